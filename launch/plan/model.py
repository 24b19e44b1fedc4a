"""What the planner knows about a model: weight bytes, KV-cache bytes per token, recurrent-state bytes.

Owns the architecture numbers and the arithmetic on them; nothing here knows about GPUs or SGLang flags.
Assumptions, from the Qwen3.6-27B checkpoint (config.json, model.safetensors.index.json):
- 27.8B parameters as shipped (text decoder + vision tower + MTP layer); 55.6 GB in BF16.
- 64 decoder layers, of which 16 are full (gated) attention with 4 KV heads of dim 256; so the KV cache
  costs 16 x 2 (K and V) x 4 x 256 x 2 bytes = 64 KiB per token in BF16, a quarter of a plain 64-layer
  transformer of that width.
- 48 Gated-DeltaNet layers keep a fixed-size recurrent state per request instead of a KV cache: per layer
  48 value heads x 128 x 128 in FP32 plus a short conv window (kernel 4) over 2x16x128 + 48x128 channels in
  BF16, about 147 MiB per request in all, whatever its length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Dtype = Literal["bf16", "fp8"]
KvDtype = Literal["auto", "bf16", "fp8_e4m3", "fp8_e5m2"]

BYTES_PER_PARAM: dict[str, float] = {"bf16": 2.0, "fp8": 1.0}
KV_BYTES: dict[str, int] = {"auto": 2, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass(frozen=True)
class ModelSpec:
    """One checkpoint as the planner sees it. `params_b` and `dtype` set the weights; the rest the caches."""

    key: str
    path: str
    served_name: str
    params_b: float
    dtype: Dtype = "bf16"
    max_context: int = 262_144
    attention_heads: int = 24
    full_attention_layers: int = 16
    kv_heads: int = 4
    head_dim: int = 256
    linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_head_dim: int = 128
    conv_kernel: int = 4
    state_bytes: int = 4  # FP32 SSM state, SGLang's default mamba_ssm_dtype for this family
    has_mtp: bool = True
    reasoning_parser: str = "qwen3"
    tool_call_parser: str = "qwen3_coder"

    @property
    def hybrid(self) -> bool:
        """True when some layers keep a recurrent state (Gated DeltaNet / Mamba) instead of a KV cache."""
        return self.linear_layers > 0

    def weight_bytes(self) -> float:
        return self.params_b * 1e9 * BYTES_PER_PARAM[self.dtype]

    def kv_bytes_per_token(self, kv_dtype: KvDtype = "auto") -> int:
        return self.full_attention_layers * 2 * self.kv_heads * self.head_dim * KV_BYTES[kv_dtype]

    def state_bytes_per_request(self) -> int:
        if not self.hybrid:
            return 0
        ssm = self.linear_value_heads * self.linear_head_dim * self.linear_head_dim * self.state_bytes
        conv_channels = (2 * self.linear_key_heads + self.linear_value_heads) * self.linear_head_dim
        conv = conv_channels * (self.conv_kernel - 1) * 2
        return self.linear_layers * (ssm + conv)

    def tp_sizes(self, limit: int) -> list[int]:
        """TP degrees SGLang can shard this model over, up to `limit` GPUs: powers of two dividing the heads."""
        sizes = []
        tp = 1
        while tp <= limit:
            if self.attention_heads % tp == 0 and (not self.hybrid or self.linear_value_heads % tp == 0):
                sizes.append(tp)
            tp *= 2
        return sizes


QWEN36_27B = ModelSpec(
    key="qwen3.6-27b",
    path="Qwen/Qwen3.6-27B",
    served_name="Qwen/Qwen3.6-27B",
    params_b=27.8,
    linear_layers=48,
    linear_key_heads=16,
    linear_value_heads=48,
)

# FP8 checkpoint of the same model: SGLang reads the quantization from its config, no flag needed.
QWEN36_27B_FP8 = replace(QWEN36_27B, key="qwen3.6-27b-fp8", path="Qwen/Qwen3.6-27B-FP8", dtype="fp8")

MODELS: dict[str, ModelSpec] = {m.key: m for m in (QWEN36_27B, QWEN36_27B_FP8)}


def default_model(dtype: Dtype) -> ModelSpec:
    return QWEN36_27B_FP8 if dtype == "fp8" else QWEN36_27B
