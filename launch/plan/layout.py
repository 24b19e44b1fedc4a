"""The layout planner: hardware + model + wishes -> TP/DP, instances (GPUs, ports) and each command line.

Owns the choice and the validation of the input; rendering lives in `render` and `compose`. The rule: take
the smallest TP degree at which one replica fits a GPU group with room for the wanted KV cache, so that
a model which fits one GPU runs one replica per GPU (data parallel across independent servers beats
tensor parallel for batch generation: no all-reduce per layer, and a crash takes out one replica only).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from launch.plan.errors import PlanError
from launch.plan.memory import GpuMemory, gpu_memory
from launch.plan.model import KvDtype, ModelSpec
from launch.plan.presets import Preset

SPECULATIVE_ALGORITHMS = ("EAGLE", "NEXTN")
DEFAULT_KV_TOKENS = 65_536
# Above 0.95 SGLang runs out of memory for activations and CUDA graphs; below 0.3 little is left for cache.
MEM_FRACTION_RANGE = (0.3, 0.95)


@dataclass(frozen=True)
class MtpSettings:
    """Multi-token prediction with the model's own MTP layer, run by SGLang's EAGLE worker."""

    enabled: bool = True
    algorithm: str = "EAGLE"
    steps: int = 3
    topk: int = 1
    draft_tokens: int | None = None  # None: steps + 1, the only value SGLang keeps when topk is 1

    def resolved_draft_tokens(self) -> int:
        return self.steps + 1 if self.draft_tokens is None else self.draft_tokens

    def validate(self, model: ModelSpec) -> None:
        if not self.enabled:
            return
        if not model.has_mtp:
            raise PlanError(f"{model.key} ships no MTP layer; start without MTP (--no-mtp)")
        if self.algorithm not in SPECULATIVE_ALGORITHMS:
            raise PlanError(f"unknown MTP algorithm {self.algorithm!r}; use one of "
                            f"{', '.join(SPECULATIVE_ALGORITHMS)}")
        if self.steps < 1 or self.topk < 1:
            raise PlanError(f"MTP steps and top-k must be at least 1 (got {self.steps}, {self.topk})")
        draft = self.resolved_draft_tokens()
        if self.topk == 1 and draft != self.steps + 1:
            raise PlanError(f"with MTP top-k 1, draft tokens must be steps + 1 = {self.steps + 1} "
                            f"(SGLang would silently change {draft} to that); drop --mtp-draft-tokens")
        if draft < 2 or draft > self.steps * self.topk + 1:
            raise PlanError(f"MTP draft tokens must be in [2, steps x top-k + 1 = "
                            f"{self.steps * self.topk + 1}], got {draft}")


@dataclass(frozen=True)
class PlanRequest:
    """Everything the user asked for; None means 'take it from the preset' or 'let the planner choose'."""

    preset: Preset
    model: ModelSpec
    num_gpus: int | None = None
    gpu_memory_gib: float | None = None
    gpus: tuple[int, ...] | None = None
    tp: int | None = None
    dp: int = 1
    mtp: MtpSettings = field(default_factory=MtpSettings)
    mem_fraction: float | None = None
    kv_tokens: int = DEFAULT_KV_TOKENS
    kv_cache_dtype: KvDtype = "auto"
    context_length: int | None = None
    host: str | None = None
    advertise_host: str | None = None
    base_port: int = 30000
    api_key: str | None = None
    extra_args: tuple[str, ...] = ()
    python: str = "python3"
    # What nvidia-smi reports on the node; it caps the preset (never raises it) for a real GPU preset.
    detected_gpus: int | None = None
    detected_gpu_memory_gib: float | None = None


@dataclass(frozen=True)
class Instance:
    """One server process: the GPUs it owns, where it listens and the exact command that starts it."""

    index: int
    name: str
    gpus: tuple[int, ...]
    port: int
    url: str
    health_url: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Plan:
    request: PlanRequest
    node_gpus: int
    gpu_memory_gib: float
    mem_fraction: float
    tp: int
    dp: int
    memory: GpuMemory
    tried: tuple[GpuMemory, ...]
    instances: tuple[Instance, ...]
    idle_gpus: tuple[int, ...]
    notes: tuple[str, ...]

    @property
    def preset(self) -> Preset:
        return self.request.preset


def parse_gpu_list(text: str) -> tuple[int, ...]:
    """'0,1,2,3', '0-6' or '0-3,6' -> GPU indices in the given order."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError(part)
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise PlanError(f"cannot read GPU list {text!r}: use indices like 0,1,2,3 or ranges like 0-6") \
                from None
    if not out:
        raise PlanError("the GPU list is empty; give indices like 0,1,2,3 or a range like 0-6")
    return tuple(out)


def _select_gpus(req: PlanRequest, node_gpus: int) -> tuple[int, ...]:
    if req.gpus is None:
        return tuple(range(node_gpus))
    for g in req.gpus:
        if not 0 <= g < node_gpus:
            raise PlanError(f"GPU {g} does not exist: the node has {node_gpus} GPU(s), numbered 0-{node_gpus - 1}. "
                            f"Pass --gpus within that range, or --num-gpus if the node has more")
    if len(set(req.gpus)) != len(req.gpus):
        raise PlanError(f"GPU list {','.join(map(str, req.gpus))} names a GPU twice")
    return req.gpus


def _memory(req: PlanRequest, tp: int, gpu_gib: float, frac: float, required: int) -> GpuMemory:
    mtp_on = req.mtp.enabled
    return gpu_memory(req.model, gpu=req.preset.gpu, gpu_memory_gib=gpu_gib, mem_fraction=frac, tp=tp,
                      kv_cache_dtype=req.kv_cache_dtype,
                      mtp_draft_tokens=req.mtp.resolved_draft_tokens() if mtp_on else 0,
                      extra_buffer=mtp_on and req.model.hybrid, required_kv_tokens=required)


def _choose_tp(req: PlanRequest, usable: int, gpu_gib: float, frac: float,
               required: int) -> tuple[GpuMemory, tuple[GpuMemory, ...]]:
    per_replica_limit = usable // req.dp
    if req.tp is not None:
        if req.tp not in req.model.tp_sizes(64):
            raise PlanError(f"TP={req.tp} cannot shard {req.model.key}: use one of "
                            f"{', '.join(map(str, req.model.tp_sizes(64)))}")
        if req.tp * req.dp > usable:
            raise PlanError(f"TP={req.tp} x DP={req.dp} needs {req.tp * req.dp} GPUs per instance, "
                            f"but only {usable} are selected")
        mem = _memory(req, req.tp, gpu_gib, frac, required)
        reason = mem.shortfall()
        if reason is not None:
            raise PlanError(f"TP={req.tp} does not fit: {reason}. Leave --tp out to let the planner choose, "
                            f"or use FP8 weights, a larger --mem-fraction or fewer --kv-tokens")
        return mem, (mem,)
    tried: list[GpuMemory] = []
    for tp in req.model.tp_sizes(per_replica_limit):
        mem = _memory(req, tp, gpu_gib, frac, required)
        tried.append(mem)
        if mem.fits:
            return mem, tuple(tried)
    if not tried:
        raise PlanError(f"DP={req.dp} per instance needs at least {req.dp} GPUs, but only {usable} are selected")
    last = tried[-1]
    raise PlanError(f"{req.model.key} ({req.model.dtype}) does not fit {usable} x {gpu_gib:g} GiB even at "
                    f"TP={last.tp}: {last.shortfall()}. Use FP8 weights (--dtype fp8), more or larger GPUs, "
                    f"or ask for fewer --kv-tokens")


def make_plan(req: PlanRequest) -> Plan:
    """Validate the request and lay the fleet out; raises PlanError with a user-facing message."""
    notes: list[str] = []
    node_gpus = _node_gpus(req, notes)
    gpu_gib = _gpu_memory_gib(req, notes)
    frac = _mem_fraction(req)
    for broken, message in _REQUEST_RULES:
        if broken(req):
            raise PlanError(message(req))
    req.mtp.validate(req.model)
    selected = _select_gpus(req, node_gpus)
    required = max(req.kv_tokens, req.context_length or 0)
    mem, tried = _choose_tp(req, len(selected), gpu_gib, frac, required)
    instances, idle = _instances(req, selected, mem.tp, frac)
    if idle:
        notes.append(f"GPU(s) {','.join(map(str, idle))} left idle: {len(selected)} GPUs do not split into "
                     f"instances of TP={mem.tp} x DP={req.dp}")
    if req.preset.simulated and req.api_key:
        notes.append("the simulated server does not check API keys; --api-key is ignored")
    return Plan(request=req, node_gpus=node_gpus, gpu_memory_gib=gpu_gib, mem_fraction=frac, tp=mem.tp,
                dp=req.dp, memory=mem, tried=tried, instances=instances, idle_gpus=idle,
                notes=tuple(notes))


def _node_gpus(req: PlanRequest, notes: list[str]) -> int:
    """--num-gpus, else the preset's count, capped by what nvidia-smi sees on a real GPU preset."""
    preset = req.preset
    node_gpus = req.num_gpus if req.num_gpus is not None else preset.gpu_count
    detected = req.detected_gpus
    if req.num_gpus is None and detected is not None and not preset.simulated and 0 < detected < node_gpus:
        notes.append(f"nvidia-smi sees {detected} GPU(s), fewer than the {node_gpus} of preset {preset.name}: "
                     f"planning for {detected}")
        node_gpus = detected
    if node_gpus < 1:
        raise PlanError(f"--num-gpus must be at least 1, got {node_gpus}")
    return node_gpus


def _gpu_memory_gib(req: PlanRequest, notes: list[str]) -> float:
    """The request's GPU memory, else the preset's, lowered to what nvidia-smi reports on a real GPU preset
    when that is more than 2% less."""
    preset = req.preset
    gpu_gib = req.gpu_memory_gib if req.gpu_memory_gib is not None else preset.gpu_memory_gib
    seen = req.detected_gpu_memory_gib
    if req.gpu_memory_gib is None and seen is not None and not preset.simulated and 0 < seen < 0.98 * gpu_gib:
        notes.append(f"nvidia-smi reports {seen:.1f} GiB per GPU, less than the preset's {gpu_gib:g}: "
                     f"planning with {seen:.1f}")
        gpu_gib = seen
    if gpu_gib <= 0:
        raise PlanError(f"GPU memory must be positive, got {gpu_gib:g} GiB")
    return gpu_gib


def _mem_fraction(req: PlanRequest) -> float:
    frac = req.mem_fraction if req.mem_fraction is not None else req.preset.mem_fraction_static
    low, high = MEM_FRACTION_RANGE
    if not low <= frac <= high:
        raise PlanError(f"--mem-fraction must be in [{low:g}, {high:g}], got {frac:g}: above that SGLang runs "
                        f"out of memory for activations and CUDA graphs")
    return frac


# (broken, message) of the request's own numbers, checked in this order: the first broken one is reported.
_REQUEST_RULES: tuple[tuple[Callable[[PlanRequest], bool], Callable[[PlanRequest], str]], ...] = (
    (lambda r: r.dp < 1, lambda r: f"--dp must be at least 1, got {r.dp}"),
    (lambda r: r.kv_tokens < 1, lambda r: f"--kv-tokens must be at least 1, got {r.kv_tokens}"),
    (lambda r: r.context_length is not None and not 1 <= r.context_length <= r.model.max_context,
     lambda r: f"--context-length must be in [1, {r.model.max_context}] for {r.model.key}, "
               f"got {r.context_length}"),
)


def _instances(req: PlanRequest, selected: tuple[int, ...], tp: int,
               frac: float) -> tuple[tuple[Instance, ...], tuple[int, ...]]:
    """(one server per TP x DP group of the selected GPUs, the GPUs left over)."""
    per_instance = tp * req.dp
    count = len(selected) // per_instance
    if req.base_port < 1 or req.base_port + count - 1 > 65535:
        raise PlanError(f"ports {req.base_port}-{req.base_port + count - 1} are out of range; "
                        f"pick a --base-port between 1024 and {65536 - count}")
    simulated = req.preset.simulated
    host = req.host or req.preset.host
    advertise = req.advertise_host or _advertised(host)
    probe = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    instances = []
    for i in range(count):
        gpus = selected[i * per_instance:(i + 1) * per_instance]
        port = req.base_port + i
        argv = _sim_argv(req, host, port, i) if simulated else _sglang_argv(req, tp, host, port, frac)
        env = () if simulated else (("CUDA_VISIBLE_DEVICES", ",".join(map(str, gpus))),)
        instances.append(Instance(index=i, name=f"server{i}", gpus=gpus, port=port,
                                  url=f"http://{_url_host(advertise)}:{port}",
                                  health_url=f"http://{_url_host(probe)}:{port}/health",
                                  argv=argv, env=env))
    return tuple(instances), selected[count * per_instance:]


def _advertised(host: str) -> str:
    # A wildcard bind address is no address a client can dial: advertise this machine's name instead.
    return socket.gethostname() if host in ("0.0.0.0", "::", "") else host


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _sglang_argv(req: PlanRequest, tp: int, host: str, port: int, frac: float) -> tuple[str, ...]:
    model, preset = req.model, req.preset
    argv = [req.python, "-m", "sglang.launch_server",
            "--model-path", model.path, "--served-model-name", model.served_name,
            "--host", host, "--port", str(port),
            "--tp-size", str(tp), "--dp-size", str(req.dp),
            "--mem-fraction-static", f"{frac:g}",
            "--reasoning-parser", model.reasoning_parser, "--tool-call-parser", model.tool_call_parser,
            "--enable-metrics"]
    if req.context_length is not None:
        argv += ["--context-length", str(req.context_length)]
    if req.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", req.kv_cache_dtype]
    if req.mtp.enabled:
        argv += ["--speculative-algorithm", req.mtp.algorithm,
                 "--speculative-num-steps", str(req.mtp.steps),
                 "--speculative-eagle-topk", str(req.mtp.topk),
                 "--speculative-num-draft-tokens", str(req.mtp.resolved_draft_tokens())]
        if model.hybrid:
            # MTP on a hybrid model needs the recurrent state of every draft position kept apart.
            argv += ["--mamba-radix-cache-strategy", "extra_buffer"]
    if preset.attention_backend:
        argv += ["--attention-backend", preset.attention_backend]
    if req.api_key:
        argv += ["--api-key", req.api_key]
    # Extra arguments come last so that they override anything above.
    return (*argv, *preset.extra_args, *req.extra_args)


def _sim_argv(req: PlanRequest, host: str, port: int, index: int) -> tuple[str, ...]:
    preset = req.preset
    argv = [req.python, "-m", "simulator", "--host", host, "--port", str(port),
            "--model-name", req.model.served_name, "--dp-size", str(req.dp),
            "--max-running", str(preset.sim_max_running), "--speed", f"{preset.sim_speed:g}",
            "--startup-delay", f"{preset.sim_startup_delay:g}", "--fault-seed", str(index)]
    if req.mtp.enabled:
        # MTP streams several tokens per step; the simulator mimics that with variable-size chunks.
        argv += ["--tokens-per-chunk", str(req.mtp.resolved_draft_tokens()), "--random-chunk"]
    return (*argv, *preset.extra_args, *req.extra_args)
