"""Read-only views of the engine: /v1/loads, /get_load, /metrics, /server_info and /v1/models bodies.

Shapes follow SGLang: `entrypoints/v1_loads.py` + `GetLoadsReqOutput` (one entry per DP rank), the
legacy `/get_load` shim in `http_server.py` (dp_rank, num_reqs, num_waiting_reqs, num_tokens,
num_pending_tokens, ts_tic), `ModelCard`/`ModelList` in `openai/protocol.py`, and the Prometheus names
of the production-metrics page (`sglang:` prefix, `model_name` label).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from launch.sim.config import CONTEXT_LENGTH, SGLANG_VERSION, SimConfig
from launch.sim.engine import Engine, Rank

_ACCELERATOR = "Simulated GPU"


def _rank_load(rank: Rank, config: SimConfig) -> dict[str, Any]:
    used = rank.used_tokens
    running = len(rank.running)
    return {
        "dp_rank": rank.index,
        "timestamp": time.time(),
        "num_running_reqs": running,
        "num_waiting_reqs": len(rank.waiting),
        "num_used_tokens": used,
        "num_total_tokens": used + rank.pending_tokens,
        "max_total_num_tokens": config.max_total_tokens,
        "token_usage": round(used / config.max_total_tokens, 4),
        "gen_throughput": round(rank.stats.gen_throughput, 2),
        "cache_hit_rate": 0.0,
        "utilization": round(running / config.max_running, 4),
        "max_running_requests": config.max_running,
        "memory": None,
        "speculative": (
            {"accept_length": float(config.tokens_per_chunk), "accept_rate": 1.0}
            if config.tokens_per_chunk > 1
            else None
        ),
        "lora": None,
        "disaggregation": None,
        "queues": {"waiting": len(rank.waiting), "grammar": 0, "paused": 0, "retracted": 0},
    }


def loads(engine: Engine, dp_rank: int | None = None) -> dict[str, Any]:
    ranks = [r for r in engine.ranks if dp_rank is None or r.index == dp_rank]
    return {
        "timestamp": datetime.now(UTC).isoformat(),
        "version": SGLANG_VERSION,
        "accelerator": _ACCELERATOR,
        "num_accelerators": 1,
        "loads": [_rank_load(r, engine.config) for r in ranks],
    }


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
        "max_model_len": CONTEXT_LENGTH,
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
        "context_length": CONTEXT_LENGTH,
        "max_running_requests": c.max_running,
        "max_total_num_tokens": c.max_total_tokens,
        "reasoning_parser": "qwen3",
        "tool_call_parser": "qwen3_coder",
        "speculative_algorithm": "EAGLE" if c.tokens_per_chunk > 1 else None,
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
    if c.tokens_per_chunk > 1:
        family("sglang:spec_accept_length", "gauge", "The average acceptance length of speculative decoding.",
               lambda r: float(c.tokens_per_chunk))
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
