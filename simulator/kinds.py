"""The GPU kinds a simulated server can play: a kind's figures turned into the simulator's capacity options.

The figures come from client/estimate/gpus.toml (bandwidth, dense compute and the `[serving]` model, with their
sources) and from the launcher's own memory plan for that kind (launch.plan: its preset, one replica per GPU,
MTP on), so that a simulated "RTX PRO 6000" holds the running requests the launcher would give a real one. The
model of a verify step at a batch of b running requests, on a replica of `tp` GPUs:

    t(b) = (W + D + b x (S + K)) / (tp x BW x bandwidth_share) + b x host_ms_per_request

(the terms are explained in gpus.toml's `[serving]`), with accept_length tokens per request and step; a
prefill runs at prefill_mfu x the dense compute. `GpuFigures.sim_args` are the `simulator` options that serve
it: the engine's step is step_ms + request_ms x b, the same straight line in b.

Everything here is arithmetic on the table and the plan: no GPU is measured. The file is read, not imported,
so the simulator does not depend on the client.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from launch.plan.errors import PlanError
from launch.plan.layout import MtpSettings, PlanRequest, make_plan
from launch.plan.model import Dtype, ModelSpec, default_model
from launch.plan.presets import Preset, load_preset

TABLE = Path(__file__).resolve().parents[1] / "client" / "estimate" / "gpus.toml"
SIMULATED = "(simulated)"  # after the kind's name in /v1/loads: a projection knows the kind, a reader the fake


class KindError(ValueError):
    """A kind the simulator cannot play; `str()` is meant for the user as is."""


class UnknownKind(KindError):
    """A kind the table does not hold; the message names the known ones."""


@dataclass(frozen=True)
class Serving:
    """gpus.toml's `[serving]`: the model's figures that are the same on every kind."""

    bandwidth_share: float
    host_ms_per_request: float
    accept_length: float
    draft_params_b: float
    prefill_mfu: float
    output_tokens: int  # the request the anchors are stated for
    prompt_tokens: int


@dataclass(frozen=True)
class GpuFigures:
    """One replica of a kind as the simulator serves it; times in ms, rates in tokens a second."""

    kind: str
    name: str
    dtype: Dtype
    tp: int
    slots: int  # running requests of the launcher's memory plan
    kv_tokens: int
    step_ms: float  # the batch-independent part of a verify step: weights and draft passes
    per_request_ms: float  # what each running request adds to a step: its state, its KV cache, the host's work
    accept_length: float
    prefill_tok_s: float

    def step_ms_at(self, batch: int) -> float:
        return self.step_ms + self.per_request_ms * batch

    def decode_tok_s(self, batch: int | None = None) -> float:
        """Output tokens a second of one replica decoding `batch` requests (default: its slots, full)."""
        b = self.slots if batch is None else batch
        return b * self.accept_length / (self.step_ms_at(b) / 1000)

    def serving_tok_s(self, prompt_tokens: int, output_tokens: int) -> float:
        """Output tokens a second of one replica kept full of requests of this shape, its prefills included
        (a prefill holds the whole replica: its share of the time is the prompts' tokens at the prefill rate)."""
        decode = self.decode_tok_s()
        return output_tokens / (output_tokens / decode + prompt_tokens / self.prefill_tok_s)

    def per_gpu_tok_s(self, prompt_tokens: int, output_tokens: int) -> float:
        return self.serving_tok_s(prompt_tokens, output_tokens) / self.tp

    def sim_args(self) -> tuple[str, ...]:
        """The simulator options that serve these figures."""
        return ("--max-running", str(self.slots), "--step-ms", f"{self.step_ms:.4f}", "--batch-cost", "0",
                "--request-ms", f"{self.per_request_ms:.4f}", "--accept-length", f"{self.accept_length:g}",
                "--prefill-ms-per-1k", f"{1e6 / self.prefill_tok_s:.4f}", "--max-total-tokens", str(self.kv_tokens),
                "--accelerator", f"{self.name} {SIMULATED}", "--num-accelerators", str(self.tp))

    def as_record(self) -> dict[str, Any]:
        """What GET /sim/clock says of the kind played."""
        return {"kind": self.kind, "name": self.name, "dtype": self.dtype, "tp": self.tp, "slots": self.slots,
                "kv_tokens": self.kv_tokens, "step_ms": self.step_ms, "per_request_ms": self.per_request_ms,
                "accept_length": self.accept_length, "prefill_tok_s": self.prefill_tok_s,
                "decode_tok_s_at_1": self.decode_tok_s(1), "decode_tok_s_full": self.decode_tok_s()}


@cache
def _table(path: Path = TABLE) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def serving(path: Path = TABLE) -> Serving:
    s = _table(path)["serving"]
    shape = s["shape"]
    return Serving(float(s["bandwidth_share"]), float(s["host_ms_per_request"]), float(s["accept_length"]),
                   float(s["draft_params_b"]), float(s["prefill_mfu"]), int(shape["output_tokens"]),
                   int(shape["prompt_tokens"]))


def kind_keys(path: Path = TABLE) -> tuple[str, ...]:
    return tuple(str(k["key"]) for k in _table(path)["kinds"])


def _entry(kind: str, path: Path) -> dict[str, Any]:
    wanted = kind.strip().lower()
    for entry in _table(path)["kinds"]:
        if wanted == entry["key"] or wanted in entry.get("aliases", ()):
            return dict(entry)
    raise UnknownKind(f"no GPU kind {kind!r} in client/estimate/gpus.toml (known: {', '.join(kind_keys(path))})")


def _preset(entry: dict[str, Any], path: Path) -> Preset:
    """The launcher's node type for the kind, else one GPU of the memory nvidia-smi reports."""
    if "preset" in entry:
        return load_preset(str(entry["preset"]))
    return Preset(name=str(entry["key"]), description=str(entry["name"]), gpu=str(entry["name"]), gpu_count=1,
                  gpu_memory_gib=float(entry["memory_gib"]),
                  mem_fraction_static=float(_table(path)["defaults"]["mem_fraction_static"]))


def figures(kind: str, dtype: Dtype = "bf16", path: Path = TABLE) -> GpuFigures:
    """A kind's replica of Qwen3.6-27B (`dtype` weights) at the launcher's plan; UnknownKind for a kind the
    table does not hold, KindError when the plan cannot place the model (the plan's own PlanError stays here,
    so no caller depends on the launcher)."""
    entry = _entry(kind, path)
    s = serving(path)
    mtp = MtpSettings()
    model: ModelSpec = default_model(dtype)
    try:
        plan = make_plan(PlanRequest(preset=_preset(entry, path), model=model, mtp=mtp))
    except PlanError as exc:
        raise KindError(f"{entry['key']} ({dtype}): {exc}") from exc
    memory = plan.memory
    tp = plan.tp
    bytes_per_param = model.weight_bytes() / (model.params_b * 1e9)
    weights = model.weight_bytes() + mtp.steps * s.draft_params_b * 1e9 * bytes_per_param
    context = s.prompt_tokens + s.output_tokens / 2
    per_request = model.state_bytes_per_request() * (1 + mtp.resolved_draft_tokens()) \
        + model.kv_bytes_per_token() * context
    bandwidth = tp * float(entry["memory_bandwidth_tb_s"]) * 1e12 * s.bandwidth_share  # bytes a second
    tflops = float(entry["fp8_dense_tflops" if dtype == "fp8" else "bf16_dense_tflops"])
    return GpuFigures(
        kind=str(entry["key"]), name=str(entry["name"]), dtype=dtype, tp=tp,
        slots=max(1, memory.running_requests or 1), kv_tokens=memory.kv_tokens,
        step_ms=weights / bandwidth * 1000, per_request_ms=per_request / bandwidth * 1000 + s.host_ms_per_request,
        accept_length=s.accept_length,
        prefill_tok_s=tp * tflops * 1e12 * s.prefill_mfu / (2 * model.params_b * 1e9))
