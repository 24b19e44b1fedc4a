"""Settings of one simulated SGLang server: one frozen record shared by the CLI, the app and the tests.

Defaults model one Qwen3.6-27B replica on one GPU at speed 1: ~20 ms per decode step alone, ~40 ms at a
full batch of 64, i.e. ~1.6K output tok/s per DP rank at saturation (the range the SGLang cookbook quotes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DEFAULT_MODEL_NAME = "Qwen/Qwen3.6-27B"
SGLANG_VERSION = "0.5.23"
CONTEXT_LENGTH = 262_144
# Qwen3.6's <|im_end|>: the `matched_stop` of a reply that stopped by itself, when no --tokenizer names it.
STOP_TOKEN_ID = 248_046

ReasoningField = Literal["reasoning_content", "reasoning"]
# SGLang's --tool-call-parser for Qwen3.6 (XML calls) and for the JSON-in-tags Qwen2.5/Qwen3 format: they
# differ, as a client sees them, in the non-streaming content before a call (kept by qwen3_coder,
# stripped by qwen).
ToolCallParser = Literal["qwen3_coder", "qwen"]
# The model the simulator plays (simulator.qwen36): Qwen3.6's template and output (XML tool calls, think blocks
# trimmed as its template writes them), or the Qwen3 style of simulator/qwen3_chat_template.jinja (hermes JSON).
ChatTemplateName = Literal["qwen3.6", "qwen3"]
DEFAULT_CHAT_TEMPLATE: ChatTemplateName = "qwen3.6"


@dataclass(frozen=True)
class FaultRates:
    """Per-request probabilities of each injected failure; drawn from a seeded RNG, not from the content."""

    fail_500: float = 0.0
    fail_429: float = 0.0
    drop_stream: float = 0.0
    stall_stream: float = 0.0
    error_event: float = 0.0
    retry_after: int = 1
    stall_seconds: float = 3600.0

    def any(self) -> bool:
        return (self.fail_500 + self.fail_429 + self.drop_stream + self.stall_stream + self.error_event) > 0


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulated server needs; `simulator.__main__` builds it from the command line."""

    host: str = "127.0.0.1"
    port: int = 30000
    model_name: str = DEFAULT_MODEL_NAME
    seed: int = 0
    fault_seed: int | None = None
    # capacity model
    max_running: int = 64
    dp_size: int = 1
    speed: float = 1.0
    step_ms: float = 20.0
    batch_cost: float = 1.0
    # Step time each running request adds, ms (a GPU kind's per-request cost: simulator.kinds); unlike
    # batch_cost it does not scale with max_running.
    request_ms: float = 0.0
    prefill_ms_per_1k: float = 15.0
    tokens_per_chunk: int = 1
    # MTP's accepted length: mean tokens each running request gains per step (1: no MTP). A step gives
    # floor or ceil of it, drawn so the mean is exact; an alternative to tokens_per_chunk, not a companion.
    accept_length: float = 1.0
    random_chunk: bool = False
    max_total_tokens: int = 1_048_576
    startup_delay: float = 0.0
    # output lengths
    mean_tokens: int = 1500
    max_gen_tokens: int = 32_768
    tool_call_rate: float = 0.6
    # Replies that loop until the cap (simulator.script): a share of prompts, chosen by the content and --seed.
    loop_rate: float = 0.0
    # A heavier thinking tail: this share of thinking replies draws its reasoning length from a Pareto
    # distribution starting at mean_tokens with this exponent (0 keeps the plain length model).
    think_tail_rate: float = 0.0
    think_tail_alpha: float = 1.2
    # protocol
    reasoning_field: ReasoningField = "reasoning_content"
    omit_done: bool = False
    omit_nulls: bool = False
    strict_model: bool = False
    # SGLang's --context-length: prompts of this length or more, and output caps over it, are refused.
    context_length: int = CONTEXT_LENGTH
    tool_call_parser: ToolCallParser = "qwen3_coder"
    chat_template: ChatTemplateName = DEFAULT_CHAT_TEMPLATE
    # A tokenizer directory (tokenizer.json and the chat template): with it, replies can carry token ids and
    # usage counts them (simulator.tokens); without it, the fields that ask for ids are ignored. The command
    # line's default is the tiny tokenizer (simulator.tiny_tokenizer); this record's is none.
    tokenizer: str | None = None
    incremental_streaming_output: bool = False  # SGLang's flag: a /generate stream sends only what is new
    faults: FaultRates = FaultRates()
    log_level: str = "info"
    # What `/v1/loads` names as the device, and the GPUs behind each DP rank (SGLang 0.5.23's
    # `num_accelerators` is per DP rank: tp x pp). The default name says plainly that it is no GPU.
    accelerator: str = "Simulated GPU"
    num_accelerators: int = 1
    # The GPU kind whose figures set the capacity model (simulator.kinds, --gpu-kind); None: the generic one.
    gpu_kind: str | None = None

    def __post_init__(self) -> None:
        if self.max_running < 1 or self.dp_size < 1:
            raise ValueError("max_running and dp_size must be at least 1")
        if self.speed <= 0:
            raise ValueError("speed must be positive")
        if self.tokens_per_chunk < 1:
            raise ValueError("tokens_per_chunk must be at least 1")
        if self.accept_length < 1:
            raise ValueError("accept_length must be at least 1")
        if self.accept_length > 1 and self.tokens_per_chunk > 1:
            raise ValueError("give accept_length or tokens_per_chunk, not both")
        if self.request_ms < 0:
            raise ValueError("request_ms must not be negative")
        if self.context_length < 2:
            raise ValueError("context_length must be at least 2")
        if self.num_accelerators < 1:
            raise ValueError("num_accelerators must be at least 1")
        if self.mean_tokens < 1 or self.max_gen_tokens < 1:
            raise ValueError("mean_tokens and max_gen_tokens must be at least 1")
        for name in ("tool_call_rate", "loop_rate", "think_tail_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.think_tail_alpha <= 0:
            raise ValueError(f"think_tail_alpha must be positive, got {self.think_tail_alpha}")
        for name in ("fail_500", "fail_429", "drop_stream", "stall_stream", "error_event"):
            rate = getattr(self.faults, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {rate}")

    @property
    def effective_fault_seed(self) -> int:
        return self.seed if self.fault_seed is None else self.fault_seed
