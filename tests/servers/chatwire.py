"""The JSON and SSE bytes of the odd chat server: a deterministic answer, its stream events in each SSE
dialect, and the bodies of /v1/models, /v1/loads, /metrics and the strict validators.

The answer is fixed so tests can assert it exactly: `REASONING_TEXT` then `CONTENT_TEXT`, each piece worth
`TOKENS_PER_PIECE` completion tokens, finish_reason "stop" (or "length" when max_tokens cuts it), and
`prompt_tokens(messages)` prompt tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MODEL = "Qwen/Qwen3.6-27B"
OWNER = "sglang"
MAX_MODEL_LEN = 262_144
CREATED = 1_700_000_000

REASONING_PIECES = ("Let me think", " about the question", " carefully.")
CONTENT_PIECES = ("The answer", " is", " 42.")
REASONING_TEXT = "".join(REASONING_PIECES)
CONTENT_TEXT = "".join(CONTENT_PIECES)
TOKENS_PER_PIECE = 2

STANDARD_FIELDS = frozenset({
    "model", "messages", "tools", "tool_choice", "stream", "stream_options", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "n", "stop", "seed", "presence_penalty",
    "frequency_penalty", "logprobs", "top_logprobs", "user", "response_format", "parallel_tool_calls",
})

LOGIN_PAGE = (b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n<body><h1>Sign in</h1>\n"
              b"<form method=\"post\" action=\"/login\"><input name=\"user\"><input name=\"password\" "
              b"type=\"password\"><button>Sign in</button></form>\n</body></html>\n")

MID_ERROR = {"object": "error", "message": "Simulated engine failure mid-stream.", "type": "InternalServerError",
             "param": None, "code": 500}


def prompt_tokens(messages: Any) -> int:
    """4 per message plus the whitespace-separated words of its content."""
    if not isinstance(messages, list):
        return 0
    total = 0
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) else None
        total += 4 + (len(str(content).split()) if content is not None else 0)
    return total


@dataclass(frozen=True)
class Answer:
    """What one request gets: the pieces (phase, text) it is allowed, the finish reason and usage."""

    model: str
    pieces: tuple[tuple[str, str], ...]
    finish: str
    prompt_tokens: int

    @property
    def completion_tokens(self) -> int:
        return TOKENS_PER_PIECE * len(self.pieces)

    @property
    def reasoning_tokens(self) -> int:
        return TOKENS_PER_PIECE * sum(1 for phase, _ in self.pieces if phase == "reasoning")

    def usage(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens}}

    def text(self, phase: str) -> str:
        return "".join(t for p, t in self.pieces if p == phase)


def answer_for(body: Mapping[str, Any]) -> Answer:
    kwargs = body.get("chat_template_kwargs")
    thinking = not (isinstance(kwargs, Mapping) and kwargs.get("enable_thinking") is False)
    pieces = [("reasoning", t) for t in REASONING_PIECES] if thinking else []
    pieces += [("content", t) for t in CONTENT_PIECES]
    finish = "stop"
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 and cap < TOKENS_PER_PIECE * len(pieces):
        pieces = pieces[: -(-cap // TOKENS_PER_PIECE)]
        finish = "length"
    model = body.get("model")
    return Answer(model if isinstance(model, str) else MODEL, tuple(pieces), finish,
                  prompt_tokens(body.get("messages")))


def completion(rid: str, answer: Answer) -> dict[str, Any]:
    """The non-streaming chat.completion."""
    message = {"role": "assistant", "content": answer.text("content"),
               "reasoning_content": answer.text("reasoning") or None, "tool_calls": None}
    return {"id": rid, "object": "chat.completion", "created": CREATED, "model": answer.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish}],
            "usage": answer.usage()}


def stream_objects(rid: str, answer: Answer, *, include_usage: bool, usage_on_finish: bool,
                   mid_error: bool) -> list[dict[str, Any]]:
    """The chunk objects of one stream, in order ([DONE] not included). With `mid_error` the stream ends
    with an {"error": ...} object after the first content piece."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": rid, "object": "chat.completion.chunk", "created": CREATED, "model": answer.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    for phase, text in answer.pieces:
        out.append(chunk({"reasoning_content": text} if phase == "reasoning" else {"content": text}))
        if mid_error and phase == "content":
            out.append({"error": MID_ERROR})
            return out
    final = chunk({}, answer.finish)
    if usage_on_finish:
        final["usage"] = answer.usage()
    out.append(final)
    if include_usage and not usage_on_finish:
        out.append({"id": rid, "object": "chat.completion.chunk", "created": CREATED, "model": answer.model,
                    "choices": [], "usage": answer.usage()})
    return out


def runaway_chunk() -> dict[str, Any]:
    """One content chunk of a stream that never finishes (oddserver's runaway mode)."""
    return {"id": "chatcmpl-runaway", "object": "chat.completion.chunk", "created": CREATED, "model": MODEL,
            "choices": [{"index": 0, "delta": {"content": " again"}, "logprobs": None, "finish_reason": None}]}


@dataclass(frozen=True)
class Dialect:
    """How events are written: line ends, comment/event lines, JSON split across data lines."""

    crlf: bool = False
    comments: bool = False
    multiline: bool = False

    def event(self, obj: Mapping[str, Any] | None) -> bytes:
        """One SSE event for `obj`, or for `data: [DONE]` when obj is None."""
        nl = "\r\n" if self.crlf else "\n"
        if obj is None:
            data = ["[DONE]"]
        elif self.multiline:
            data = json.dumps(obj, indent=1).split("\n")
        else:
            data = [json.dumps(obj, separators=(",", ":"))]
        lines: list[str] = []
        if self.comments:
            lines += [": keep-alive", "", ": ping", "event: message"]
        lines += [f"data: {d}" for d in data]
        return (nl.join(lines) + nl + nl).encode("utf-8")


def models(model: str, owner: str, max_model_len: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": CREATED, "owned_by": owner,
                                        "root": model, "max_model_len": max_model_len}]}


def loads(running: int) -> dict[str, Any]:
    rank = {"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": 0, "num_used_tokens": 0,
            "num_total_tokens": 0, "max_total_num_tokens": 1_000_000, "max_running_requests": 64,
            "token_usage": 0.0, "gen_throughput": 0.0, "utilization": running / 64}
    return {"timestamp": datetime.now(UTC).isoformat(), "version": "0.5.23", "accelerator": "cpu",
            "num_accelerators": 1, "loads": [rank]}


def metrics(running: int, generated: int) -> bytes:
    labels = "{model_name=" + json.dumps(MODEL) + "}"
    return (f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{labels} {running}.0\n"
            f"# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{labels} 0.0\n"
            f"# TYPE sglang:generation_tokens_total counter\n"
            f"sglang:generation_tokens_total{labels} {generated}.0\n").encode()


def unexpected_fields(body: Any) -> list[str] | None:
    """Sorted non-standard field names, or None when the body is not a JSON object at all."""
    if not isinstance(body, dict):
        return None
    return sorted(set(body) - STANDARD_FIELDS)


def strict_refusal(status: int, body: Any) -> dict[str, Any] | None:
    """The refusal a strict server (400 or 422 flavour) gives this body, or None when it is acceptable."""
    extra = unexpected_fields(body)
    if extra == []:
        return None
    if extra is None:
        if status == 422:
            return {"detail": [{"type": "model_attributes_type", "loc": ["body"],
                                "msg": "Input should be a valid dictionary or object", "input": None}]}
        return {"detail": "The request body must be a JSON object."}
    if status == 422:
        return {"detail": [{"type": "extra_forbidden", "loc": ["body", name], "msg": "Extra inputs are not permitted",
                            "input": body[name]} for name in extra]}
    return {"detail": "Unexpected fields in the request: {" + ", ".join(repr(n) for n in extra) + "}"}
