"""Synthetic ResultRecords and segments for the offline tools' tests (audit, estimate, export)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from tests.conftest import WEATHER_TOOL

__all__ = ["WEATHER_TOOL", "result", "stub", "tool_call", "write_prompt_ids", "write_segment"]

def result(record_id: str, *, reasoning: str = "Let me think about this carefully.", content: str = "An answer.",
           completion_tokens: int = 120, finish_reason: str = "stop", thinking: bool = True,
           tool_calls: list[dict[str, Any]] | None = None, tools: list[dict[str, Any]] | None = None,
           model: str = "Qwen/Qwen3.6-27B", endpoint: str = "http://127.0.0.1:30000", created: float = 1000.0,
           total_s: float = 2.0, ttft_s: float = 0.1, meta: dict[str, Any] | None = None,
           **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": record_id,
        "messages": [{"role": "user", "content": f"Question {record_id}?"}],
        "sampling": {"max_tokens": 8192, "temperature": 0.6, "enable_thinking": thinking},
        "reasoning": reasoning,
        "content": content,
        "tool_calls": tool_calls or [],
        "finish_reason": finish_reason,
        "usage": {"prompt_tokens": 20, "completion_tokens": completion_tokens},
        "model": model,
        "endpoint": endpoint,
        "timings": {"queued_s": 0.0, "ttft_s": ttft_s, "total_s": total_s},
        "attempts": 1,
        "created": created,
    }
    if tools is not None:
        record["tools"] = tools
    if meta is not None:
        record["meta"] = meta
    record.update(extra)
    return record


def stub(record_id: str, **extra: Any) -> dict[str, Any]:
    """The six-token `<think>\\n</think>\\nOK.<|im_end|>` reply that started the project."""
    return result(record_id, reasoning="", content="OK.", completion_tokens=6, **extra)


def tool_call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def write_segment(out: Path, records: Iterable[dict[str, Any]], name: str = "host-0of1-run-00001") -> Path:
    """Write records as one segment of a run directory `out`; returns the segment path."""
    segments = out / "segments"
    segments.mkdir(parents=True, exist_ok=True)
    path = segments / f"{name}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def write_prompt_ids(path: Path, ids: Iterable[str]) -> Path:
    path.write_bytes(b"".join(orjson.dumps({"id": i, "messages": [{"role": "user", "content": "q"}]}) + b"\n"
                              for i in ids))
    return path
