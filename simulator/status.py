"""Read-only views of the engine: /v1/loads, /get_load, /metrics, /server_info and /v1/models bodies.

Shapes follow SGLang 0.5.23: `entrypoints/v1_loads.py` + `managers/load_snapshot.py` `LoadSnapshot` (one
entry per DP rank), the `/get_load` list of older SGLang releases (0.5.23 answers it 404; the simulator keeps
it for clients of those: dp_rank, num_reqs, num_waiting_reqs, num_tokens, num_pending_tokens, ts_tic),
`ModelCard`/`ModelList` in `openai/protocol.py`, and the Prometheus names of the production-metrics page
(`sglang:` prefix, `model_name` label).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from simulator.config import SGLANG_VERSION, SimConfig
from simulator.engine import Engine, Rank, decode_tok_s, step_ms, tokens_per_step
from simulator.tokens import DRAFT_TOKENS, MEAN_ACCEPT_LENGTH

# The `memory` section's figures are there for its shape, not for planning: Qwen3.6-27B's BF16 weights and
# an assumed 64 KB of KV cache per token.
_WEIGHT_GB = 54.0
_KV_GB_PER_TOKEN = 64e-6


def _mtp(config: SimConfig) -> bool:
    """MTP on: several tokens a step (--accept-length, or --tokens-per-chunk)."""
    return config.accept_length > 1 or config.tokens_per_chunk > 1


def _accept_length(config: SimConfig) -> float:
    """The live figure: a GPU kind's accepted length, else the replies' own draws (simulator.tokens)."""
    return config.accept_length if config.accept_length > 1 else MEAN_ACCEPT_LENGTH


def _rank_load(rank: Rank, config: SimConfig) -> dict[str, Any]:
    """One `LoadSnapshot.to_dict()`: the core fields in SGLang's order, then the sections that apply
    (`speculative` only with MTP, no `lora` section: the simulator serves no adapters)."""
    used = rank.used_tokens
    running = len(rank.running)
    st = rank.stats
    load: dict[str, Any] = {
        "timestamp": time.time(),
        "dp_rank": rank.index,
        "num_running_reqs": running,
        "num_waiting_reqs": len(rank.waiting),
        "num_waiting_uncached_tokens": rank.pending_tokens,
        "num_used_tokens": used,
        "num_total_tokens": used + rank.pending_tokens,
        "num_active_tokens": used + rank.pending_tokens,
        "num_prealloc_ready_tokens": 0,
        "max_total_num_tokens": config.max_total_tokens,
        "max_running_requests": config.max_running,
        "token_usage": round(used / config.max_total_tokens, 4),
        "gen_throughput": round(st.gen_throughput, 2),
        "cache_hit_rate": 0.0,
        "utilization": round(running / config.max_running, 4),
        "total_prefill_uncached_tokens": st.prompt_tokens,
        "total_prefill_busy_us": st.prefill_busy_us,
        "decode_moments": list(st.decode_moments) if st.decode_moments[0] > 0 else None,
        "memory": {"weight_gb": _WEIGHT_GB, "kv_cache_gb": round(config.max_total_tokens * _KV_GB_PER_TOKEN, 3),
                   "graph_gb": 0.0, "token_capacity": config.max_total_tokens},
    }
    if _mtp(config) and st.decode_moments[0] > 0:
        # MTP on (several tokens a chunk): the figure per verify step of the replies' own draws
        # (simulator.tokens), not the chunk size, so the live view and the audit of one run agree.
        accept = _accept_length(config)
        load["speculative"] = {"accept_length": round(accept, 4), "accept_rate": round((accept - 1) / DRAFT_TOKENS, 4)}
    load["disaggregation"] = {"mode": "null", "prefill_bootstrap_queue_reqs": 0, "prefill_inflight_queue_reqs": 0,
                              "decode_prealloc_queue_reqs": 0, "decode_transfer_queue_reqs": 0,
                              "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0,
                              "kv_transfer_latency_ms": 0.0}
    load["queues"] = {"waiting": len(rank.waiting), "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0}
    return load


def loads(engine: Engine, dp_rank: int | None = None) -> dict[str, Any]:
    ranks = [r for r in engine.ranks if dp_rank is None or r.index == dp_rank]
    return {
        "timestamp": datetime.now(UTC).isoformat(),
        "version": SGLANG_VERSION,
        "accelerator": engine.config.accelerator,
        "num_accelerators": engine.config.num_accelerators,
        "loads": [_rank_load(r, engine.config) for r in ranks],
    }


def clock(engine: Engine) -> dict[str, Any]:
    """GET /sim/clock (the simulator's own route, no SGLang one): the modelled clock, the time the modelled
    GPU spent on the steps so far at speed 1, per DP rank and for the server (the mean of its ranks, which
    run side by side), with the tokens generated and prefilled. A load on the host slows the wall clock of
    a run but not this one, so a rate over it is the modelled GPU's."""
    ranks = [{"dp_rank": r.index, "busy_s": r.stats.busy_s, "generation_tokens": r.stats.generation_tokens,
              "prompt_tokens": r.stats.prompt_tokens} for r in engine.ranks]
    # decode_steps and decode_batch (the requests in the batch, summed over the steps) give the batch the
    # modelled GPU really decoded: a client that cannot keep up leaves slots empty, which no clock can hide.
    return {"busy_s": sum(r.stats.busy_s for r in engine.ranks) / len(engine.ranks),
            "generation_tokens": sum(r.stats.generation_tokens for r in engine.ranks),
            "decode_steps": sum(r.stats.decode_moments[0] for r in engine.ranks),
            "decode_batch": sum(r.stats.decode_moments[1] for r in engine.ranks), "dp_size": len(engine.ranks),
            "speed": engine.config.speed, "accelerator": engine.config.accelerator, "gpu": capacity(engine.config),
            "monotonic": time.monotonic(), "time": time.time(), "ranks": ranks}


def capacity(config: SimConfig) -> dict[str, Any]:
    """The capacity model a rank serves, on the modelled clock (at speed 1): the GPU kind it plays (None: the
    generic one), its slots, its step at a batch of 1 and full, its decode rate there, its prefill rate."""
    full = config.max_running
    return {"kind": config.gpu_kind, "slots": full, "max_total_tokens": config.max_total_tokens,
            "step_ms_at_1": step_ms(config, 1), "step_ms_full": step_ms(config, full),
            "tokens_per_step": tokens_per_step(config), "decode_tok_s_at_1": decode_tok_s(config, 1),
            "decode_tok_s_full": decode_tok_s(config, full),
            "prefill_tok_s": 1e6 / config.prefill_ms_per_1k if config.prefill_ms_per_1k > 0 else None}


def legacy_load(engine: Engine) -> list[dict[str, Any]]:
    ts = time.perf_counter()
    out = []
    for r in engine.ranks:
        total = r.used_tokens + r.pending_tokens
        out.append(
            {
                "dp_rank": r.index,
                "num_reqs": len(r.running) + len(r.waiting),
                "num_waiting_reqs": len(r.waiting),
                "num_tokens": total,
                "num_pending_tokens": r.pending_tokens,
                "ts_tic": ts,
            }
        )
    return out


def model_card(config: SimConfig) -> dict[str, Any]:
    return {
        "id": config.model_name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": config.model_name,
        "parent": None,
        "max_model_len": config.context_length,
    }


def models(config: SimConfig) -> dict[str, Any]:
    return {"object": "list", "data": [model_card(config)]}


def server_info(engine: Engine) -> dict[str, Any]:
    c = engine.config
    return {
        "model_path": c.model_name,
        "served_model_name": c.model_name,
        "tp_size": 1,
        "dp_size": c.dp_size,
        "context_length": c.context_length,
        "max_running_requests": c.max_running,
        "max_total_num_tokens": c.max_total_tokens,
        "reasoning_parser": "qwen3",
        "tool_call_parser": c.tool_call_parser,
        "incremental_streaming_output": c.incremental_streaming_output,
        "speculative_algorithm": "EAGLE" if _mtp(c) else None,
        "version": SGLANG_VERSION,
        "internal_states": [
            {"dp_rank": r.index, "max_running_requests": c.max_running, "max_total_num_tokens": c.max_total_tokens}
            for r in engine.ranks
        ],
    }


def _labels(config: SimConfig, rank: Rank | None) -> str:
    parts = [f'model_name="{config.model_name}"', 'engine_type="unified"', 'tp_rank="0"', 'pp_rank="0"']
    if rank is not None and config.dp_size > 1:
        parts.append(f'dp_rank="{rank.index}"')
    return "{" + ",".join(parts) + "}"


def metrics(engine: Engine) -> str:
    """Prometheus text; one sample per rank so a DP server looks like SGLang's multi-process registry."""
    c = engine.config
    families: list[tuple[str, str, str, list[tuple[str, float]]]] = []

    def family(name: str, kind: str, doc: str, value_of: Any) -> None:
        families.append((name, kind, doc, [(_labels(c, r), float(value_of(r))) for r in engine.ranks]))

    family("sglang:num_running_reqs", "gauge", "The number of running requests.", lambda r: len(r.running))
    family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
           lambda r: len(r.waiting))
    family("sglang:num_used_tokens", "gauge", "The number of used tokens.", lambda r: r.used_tokens)
    family("sglang:token_usage", "gauge", "The token usage.", lambda r: r.used_tokens / c.max_total_tokens)
    family("sglang:gen_throughput", "gauge", "The generation throughput (token/s).",
           lambda r: r.stats.gen_throughput)
    if _mtp(c):
        family("sglang:spec_accept_length", "gauge", "The average acceptance length of speculative decoding.",
               lambda r: _accept_length(c))
    family("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           lambda r: r.stats.prompt_tokens)
    family("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
           lambda r: r.stats.generation_tokens)
    family("sglang:num_requests_total", "counter", "Number of requests processed.",
           lambda r: r.stats.finished_requests)
    lines: list[str] = []
    for name, kind, doc, samples in families:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value!r}" for labels, value in samples)
    return "\n".join(lines) + "\n"
