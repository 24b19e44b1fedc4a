"""Per-GPU memory arithmetic of one replica: does the model fit at a TP degree, and how much cache is left.

Owns the sizing model and its explanation (`--explain`). It mirrors how SGLang 0.5.23 sizes memory, in
simplified form:
- `--mem-fraction-static` of the GPU is the static budget: weights plus the cache pool. The rest stays free
  for activations, CUDA graphs, NCCL buffers and the MTP draft pass.
- Weights are params x bytes/param (BF16 2, FP8 1), split evenly over the TP ranks.
- On a hybrid model the pool is split between the recurrent-state pool and the KV cache in the ratio
  mamba_full_memory_ratio = 0.9 (SGLang's default), i.e. 0.9/1.9 of it holds recurrent states.
- Each running request needs 3 state slots (SGLang's MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO), 2 more
  with `--mamba-radix-cache-strategy extra_buffer` under the overlap scheduler, and with MTP about one per
  draft token for the intermediate states; the running-request figure printed from this is an estimate.
- KV heads are split over TP ranks (replicated once TP exceeds the KV head count).
A layout fits when the pool is positive, the KV cache holds the requested tokens and at least one request's
recurrent state fits. SGLang sizes its own pools at start-up; this only has to choose TP, never to be exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from launch.plan.model import KvDtype, ModelSpec

GIB = float(1 << 30)
MAMBA_FULL_MEMORY_RATIO = 0.9
STATE_SLOTS_PER_REQUEST = 3
EXTRA_BUFFER_SLOTS = 2


@dataclass(frozen=True)
class GpuMemory:
    """One GPU of one replica at TP=`tp`; all sizes in bytes."""

    tp: int
    gpu: str
    total: float
    mem_fraction: float
    params_b: float
    dtype: str
    weights: float
    kv_per_token: float
    state_per_request: float
    state_slots: int
    state_slots_why: str
    required_kv_tokens: int

    @property
    def static(self) -> float:
        return self.total * self.mem_fraction

    @property
    def reserve(self) -> float:
        return self.total - self.static

    @property
    def pool(self) -> float:
        return self.static - self.weights

    @property
    def hybrid(self) -> bool:
        return self.state_per_request > 0

    @property
    def state_pool(self) -> float:
        if not self.hybrid or self.pool <= 0:
            return 0.0
        return self.pool * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)

    @property
    def kv_pool(self) -> float:
        return max(0.0, self.pool - self.state_pool)

    @property
    def kv_tokens(self) -> int:
        return int(self.kv_pool // self.kv_per_token)

    @property
    def running_requests(self) -> int | None:
        """Estimated concurrent requests the recurrent-state pool holds; None for a plain transformer."""
        if not self.hybrid:
            return None
        return int(self.state_pool // (self.state_per_request * self.state_slots))

    def shortfall(self) -> str | None:
        """Why this layout does not fit, or None when it does."""
        if self.pool <= 0:
            return (f"weights {self.weights / GIB:.1f} GiB per GPU exceed the static budget "
                    f"{self.static / GIB:.1f} GiB ({self.total / GIB:.1f} GiB x {self.mem_fraction:g})")
        if self.kv_tokens < self.required_kv_tokens:
            return (f"KV cache holds {self.kv_tokens:,} tokens per replica, "
                    f"{self.required_kv_tokens:,} wanted (--kv-tokens / --context-length)")
        running = self.running_requests
        if running is not None and running < 1:
            return "the recurrent-state pool cannot hold a single request"
        return None

    @property
    def fits(self) -> bool:
        return self.shortfall() is None

    def explain(self) -> list[str]:
        """The arithmetic as aligned lines, for `--explain`."""
        rows: list[tuple[str, str, str]] = [
            ("weights", f"{self.params_b:g}B params x {_BPP[self.dtype]} B ({self.dtype}) / TP {self.tp}",
             _gib(self.weights)),
            ("static budget", f"{self.total / GIB:.1f} GiB x --mem-fraction-static {self.mem_fraction:g}",
             _gib(self.static)),
            ("reserve", "the rest: activations, CUDA graphs, NCCL, MTP draft pass", _gib(self.reserve)),
            ("cache pool", "static budget - weights", _gib(self.pool)),
        ]
        if self.pool > 0:
            if self.hybrid:
                ratio = MAMBA_FULL_MEMORY_RATIO
                rows.append(("  state pool", f"pool x {ratio:g}/{1 + ratio:g} (mamba_full_memory_ratio)",
                             _gib(self.state_pool)))
                rows.append(("", f"{self.state_per_request / (1 << 20):.0f} MiB/request x {self.state_slots} "
                                 f"slots ({self.state_slots_why})", f"~{self.running_requests} running"))
            rows.append(("  KV cache", "pool - state pool" if self.hybrid else "the whole pool",
                         _gib(self.kv_pool)))
            rows.append(("", f"/ {self.kv_per_token / 1024:g} KiB per token", f"{self.kv_tokens:,} tok"))
        reason = self.shortfall()
        verdict = "fits" if reason is None else f"does not fit: {reason}"
        lines = [f"TP={self.tp}, one GPU ({self.gpu}, {self.total / GIB:.1f} GiB):"]
        lines += [f"  {label:<14} {detail:<62} {value:>13}" for label, detail, value in rows]
        lines.append(f"  {'needs':<14} >= {self.required_kv_tokens:,} KV tokens per replica -> {verdict}")
        return lines


_BPP = {"bf16": "2", "fp8": "1"}


def _gib(size: float) -> str:
    return f"{size / GIB:.1f} GiB"


def gpu_memory(model: ModelSpec, *, gpu: str, gpu_memory_gib: float, mem_fraction: float, tp: int,
               kv_cache_dtype: KvDtype, mtp_draft_tokens: int, extra_buffer: bool,
               required_kv_tokens: int) -> GpuMemory:
    """The memory picture of one GPU when a replica of `model` is sharded over `tp` GPUs."""
    slots = STATE_SLOTS_PER_REQUEST
    why = [f"{STATE_SLOTS_PER_REQUEST} base"]
    if extra_buffer:
        slots += EXTRA_BUFFER_SLOTS
        why.append(f"{EXTRA_BUFFER_SLOTS} extra_buffer")
    if mtp_draft_tokens:
        slots += mtp_draft_tokens
        why.append(f"{mtp_draft_tokens} MTP draft")
    return GpuMemory(
        tp=tp,
        gpu=gpu,
        total=gpu_memory_gib * GIB,
        mem_fraction=mem_fraction,
        params_b=model.params_b,
        dtype=model.dtype,
        weights=model.weight_bytes() / tp,
        kv_per_token=model.kv_bytes_per_token(kv_cache_dtype) / min(tp, model.kv_heads),
        state_per_request=model.state_bytes_per_request() / tp,
        state_slots=slots,
        state_slots_why=" + ".join(why),
        required_kv_tokens=required_kv_tokens,
    )
