"""Projecting a throughput measured on one GPU kind onto other kinds and counts: a model, not a measurement.

The inputs are public figures kept in one data file with their sources (`gpus.toml`: memory bandwidth,
dense BF16 and FP8 compute and memory per GPU, and the weights of the models served). The model, for a
dense model served one replica per GPU (data parallel, the layout this project uses):

- A decode step reads the weights and the batch's KV cache once and does about 2 x parameters x batch
  FLOPs. At the batch sizes a fleet runs it is bound by memory bandwidth, above them by compute. So the
  throughput per GPU of kind T, against the kind M it was measured on, lies between two ratios: the
  bandwidth ratio bw_T / bw_M and the dense compute ratio at the model's precision (BF16, or FP8 for an
  FP8 checkpoint). The point is the bandwidth ratio (decode is mostly bandwidth-bound); the interval runs
  from the lower ratio to the higher.
- Memory: a replica fits one GPU when its weights fit `mem_fraction_static` x memory; what is left is the
  KV cache. A GPU with less cache holds a smaller batch, which decodes fewer tokens a step, so the low end
  is further scaled by min(1, kv_T / kv_M). A model that does not fit one GPU is not projected there (it
  would need tensor parallelism, which this model does not cover).
- Counts scale linearly (more replicas of the same server), as the estimate's GPU what-ifs do; each
  request decodes `ratio` times faster, which shortens the tail the same way.

Everything here is pure arithmetic on the table and the measured Throughput; every row says it is a model.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from client.core.errors import ConfigError
from client.estimate.model import Interval, Throughput, tail_seconds

DATA_FILE = Path(__file__).with_name("gpus.toml")
LABEL = "model, not a measurement"
# More GPUs than any fleet holds is a typo (past 2^63, a traceback before): --gpus, --what-if-gpus, --project.
MAX_GPUS = 1_000_000
Precision = Literal["bf16", "fp8"]
BYTES_PER_PARAM: dict[str, float] = {"bf16": 2.0, "fp8": 1.0}


@dataclass(frozen=True, slots=True)
class GpuKind:
    key: str
    name: str
    memory_gb: float
    bandwidth_tb_s: float
    bf16_tflops: float
    fp8_tflops: float
    source: str
    aliases: tuple[str, ...] = ()
    match: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def tflops(self, precision: Precision) -> float:
        return self.fp8_tflops if precision == "fp8" else self.bf16_tflops

    def names(self, text: str) -> bool:
        """Whether a reported device name (e.g. "NVIDIA H100 80GB HBM3") is this kind."""
        lowered = text.lower().replace("-", " ").replace("_", " ")
        words = lowered.split()
        flat = lowered.replace(" ", "")
        return (bool(self.match) and all(w in words or w in flat for w in self.match)
                and not any(x in words or x in flat for x in self.exclude))


@dataclass(frozen=True, slots=True)
class ModelWeights:
    key: str
    params_b: float
    source: str
    match: tuple[str, ...] = ()

    def gb(self, precision: Precision) -> float:
        return self.params_b * BYTES_PER_PARAM[precision]


@dataclass(frozen=True, slots=True)
class HardwareTable:
    kinds: tuple[GpuKind, ...]
    models: tuple[ModelWeights, ...]
    mem_fraction: float
    path: str

    def kind(self, text: str | None) -> GpuKind | None:
        """A kind by its key or alias (--gpu-kind, --project), else by the device name a server reports."""
        if not text:
            return None
        wanted = text.strip().lower()
        for kind in self.kinds:
            if wanted == kind.key or wanted in kind.aliases:
                return kind
        return next((kind for kind in self.kinds if kind.names(text)), None)

    def model(self, served: str | None) -> ModelWeights | None:
        lowered = (served or "").lower()
        return next((m for m in self.models if any(w in lowered for w in m.match)), None)


def _tuple(value: Any) -> tuple[str, ...]:
    return tuple(str(v).lower() for v in value) if isinstance(value, list) else ()


def load_table(path: Path = DATA_FILE) -> HardwareTable:
    """The data file; ConfigError naming the file and the entry when it is not as documented."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        kinds = tuple(GpuKind(key=k["key"], name=k["name"], memory_gb=float(k["memory_gb"]),
                              bandwidth_tb_s=float(k["memory_bandwidth_tb_s"]),
                              bf16_tflops=float(k["bf16_dense_tflops"]), fp8_tflops=float(k["fp8_dense_tflops"]),
                              source=k["source"], aliases=_tuple(k.get("aliases")), match=_tuple(k.get("match")),
                              exclude=_tuple(k.get("exclude")))
                      for k in data["kinds"])
        models = tuple(ModelWeights(key=m["key"], params_b=float(m["params_b"]), source=m["source"],
                                    match=_tuple(m.get("match")))
                       for m in data.get("models", []))
        fraction = float(data["defaults"]["mem_fraction_static"])
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the GPU table ({exc.strerror or exc})") from exc
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a GPU table as documented in it ({exc!r})") from exc
    shown = "client/estimate/gpus.toml" if path == DATA_FILE else str(path)  # where a reader finds it
    return HardwareTable(kinds, models, fraction, shown)


def precision_of(served: str | None) -> Precision:
    """An FP8 checkpoint says so in its name (Qwen/Qwen3.6-27B-FP8); anything else is taken as BF16."""
    return "fp8" if "fp8" in (served or "").lower() else "bf16"


def kv_room_gb(kind: GpuKind, weights_gb: float | None, mem_fraction: float) -> float | None:
    """GB left for the KV cache on one GPU of `kind` holding one replica; negative: it does not fit."""
    return None if weights_gb is None else mem_fraction * kind.memory_gb - weights_gb


@dataclass(frozen=True, slots=True)
class Ratio:
    """Throughput per GPU of the target kind over the measured one."""

    point: float  # the bandwidth ratio
    low: float
    high: float
    bandwidth: float
    compute: float
    kv: float | None  # min(1, kv_T / kv_M), the batch's room; None when the weights are unknown


def ratio(measured: GpuKind, target: GpuKind, precision: Precision, weights_gb: float | None,
          mem_fraction: float) -> Ratio | None:
    """None when one replica does not fit one GPU of `target`."""
    bandwidth = target.bandwidth_tb_s / measured.bandwidth_tb_s
    compute = target.tflops(precision) / measured.tflops(precision)
    room_t = kv_room_gb(target, weights_gb, mem_fraction)
    room_m = kv_room_gb(measured, weights_gb, mem_fraction)
    if room_t is not None and room_t <= 0:
        return None
    kv = min(1.0, room_t / room_m) if room_t is not None and room_m is not None and room_m > 0 else None
    low = min(bandwidth, compute) * (kv if kv is not None else 1.0)
    return Ratio(point=bandwidth, low=low, high=max(bandwidth, compute), bandwidth=bandwidth, compute=compute, kv=kv)


@dataclass(frozen=True, slots=True)
class HardwareRow:
    kind: str
    name: str
    gpus: int
    measured_kind: bool  # the kind the throughput was measured on (scaled by count only)
    ratio: Ratio | None  # None: the model does not fit one GPU of this kind
    tokens_per_s: Interval | None
    wall_s: Interval | None
    gpu_hours: Interval | None
    kv_room_gb: float | None
    inputs: dict[str, Any] = field(default_factory=dict)
    label: str = LABEL


@dataclass(frozen=True, slots=True)
class HardwareProjection:
    measured: dict[str, Any]  # kind, where it came from, GPUs, tok/s per GPU
    model: dict[str, Any]  # served name, precision, weights, mem fraction, table file
    rows: tuple[HardwareRow, ...]
    notes: tuple[str, ...] = ()
    label: str = LABEL


def _inputs(kind: GpuKind, precision: Precision) -> dict[str, Any]:
    return {"memory_gb": kind.memory_gb, "memory_bandwidth_tb_s": kind.bandwidth_tb_s,
            "dense_tflops": kind.tflops(precision), "precision": precision, "source": kind.source}


def parse_targets(text: str, table: HardwareTable) -> list[tuple[GpuKind, int | None]]:
    """`b200x8,h100,rtx-pro-6000x4`: kinds of the table, each with a GPU count (None: the defaults)."""
    targets: list[tuple[GpuKind, int | None]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, count = part.rpartition("x") if part.rpartition("x")[2].isdigit() else (part, "", "")
        kind = table.kind(name)
        if kind is None:
            keys = ", ".join(k.key for k in table.kinds)
            raise ConfigError(f"--project {part!r}: no GPU kind {name!r} in {table.path} (known: {keys})")
        if count and not 1 <= int(count) <= MAX_GPUS:
            raise ConfigError(f"--project {part!r}: the GPU count must be from 1 to {MAX_GPUS:,}")
        targets.append((kind, int(count) if count else None))
    return targets


def project_hardware(*, table: HardwareTable, measured: GpuKind, measured_from: str, measured_gpus: int,
                     rate: Throughput, tokens: Interval, jobs: int, lengths: list[int], weights: list[float],
                     slots: int, seed: int, served: str | None, targets: list[tuple[GpuKind, int | None]],
                     precision: Precision | None = None, weights_gb: float | None = None) -> HardwareProjection:
    """One row per target kind and count: the fleet's throughput per GPU times the kind's ratio, and the
    wall time and GPU-hours of `tokens` (the set's projected output tokens) with the tail at that pace."""
    precision = precision or precision_of(served)
    found = table.model(served)
    notes: list[str] = []
    if weights_gb is None and found is not None:
        weights_gb = found.gb(precision)
    if weights_gb is None:
        notes.append(f"model {served!r} is not in {table.path}: whether it fits each GPU is not checked, and the "
                     "low ends ignore the KV cache's room (pass --weights-gb)")
    per_gpu = rate.tokens_per_s / measured_gpus
    tails: dict[int, float] = {}

    def tail_at(gpus: int) -> float:
        """The tail on `gpus` GPUs of the measured kind (the slots scale with the count, as in the what-ifs)."""
        if gpus not in tails:
            scaled = max(1, round(slots * gpus / measured_gpus))
            tails[gpus] = tail_seconds(lengths, weights, jobs, scaled, rate.per_slot, seed, rate.kappa * slots / scaled)
        return tails[gpus]

    rows = []
    for kind, count in targets:
        gpus = count or measured_gpus
        r = ratio(measured, kind, precision, weights_gb, table.mem_fraction) if kind != measured else \
            Ratio(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
        room = kv_room_gb(kind, weights_gb, table.mem_fraction)
        if r is None:
            rows.append(HardwareRow(kind.key, kind.name, gpus, kind == measured, None, None, None, None, room,
                                    _inputs(kind, precision)))
            continue
        walls = []
        for factor, size in ((r.point, tokens.point), (r.high, tokens.low), (r.low, tokens.high)):
            # The tail at `factor` times the pace is exactly the tail at the pace over `factor`.
            walls.append(size / (per_gpu * factor * gpus) + tail_at(gpus) / factor)
        wall = Interval(*walls)
        rows.append(HardwareRow(
            kind.key, kind.name, gpus, kind == measured, r,
            Interval(per_gpu * r.point * gpus, per_gpu * r.low * gpus, per_gpu * r.high * gpus), wall,
            Interval(wall.point * gpus / 3600, wall.low * gpus / 3600, wall.high * gpus / 3600), room,
            _inputs(kind, precision)))
    return HardwareProjection(
        measured={"kind": measured.key, "name": measured.name, "from": measured_from, "gpus": measured_gpus,
                  "tokens_per_s": rate.tokens_per_s, "tokens_per_s_per_gpu": per_gpu,
                  "inputs": _inputs(measured, precision)},
        model={"served": served, "precision": precision, "weights_gb": weights_gb,
               "weights_source": found.source if found is not None else None,
               "mem_fraction_static": table.mem_fraction, "table": table.path},
        rows=tuple(rows), notes=tuple(notes))


def default_targets(table: HardwareTable, measured: GpuKind, measured_gpus: int) -> list[tuple[GpuKind, int | None]]:
    """Every kind of the table at the measured count and at 8 (a node), the measured kind first."""
    ordered = [measured, *(k for k in table.kinds if k != measured)]
    counts = sorted({measured_gpus, 8})
    return [(kind, count) for kind in ordered for count in counts]
