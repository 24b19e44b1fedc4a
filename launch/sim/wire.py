"""Wire JSON of the chat endpoint, shaped like SGLang 0.5.x's OpenAI layer.

Mirrors `sglang/srt/entrypoints/openai/protocol.py` (ChatCompletionStreamResponse, DeltaMessage, ToolCall,
UsageInfo, ErrorResponse) and the chunk order of `serving_chat.py`: role chunk, reasoning/content or
tool-call deltas, a finish chunk, an optional usage chunk with `choices: []`, then `data: [DONE]`.
"""

from __future__ import annotations

from typing import Any

import orjson

from launch.sim.config import ReasoningField
from launch.sim.script import Piece, Script

DONE = b"data: [DONE]\n\n"


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def drop_nulls(obj: Any) -> Any:
    """Some server builds omit null fields (msgspec `omit_defaults`); clients must not depend on them."""
    if isinstance(obj, dict):
        return {k: drop_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [drop_nulls(v) for v in obj]
    return obj


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    """SGLang's ErrorResponse: a flat object, not OpenAI's {"error": {...}} envelope."""
    return {"object": "error", "message": message, "type": err_type, "param": param, "code": code}


def stream_error_event(message: str, err_type: str, code: int) -> bytes:
    """What `create_streaming_error_response` sends mid-stream: the error wrapped in {"error": ...}."""
    return sse({"error": error_body(message, err_type, code)})


def usage(script: Script, generated: int) -> dict[str, Any]:
    reasoning = script.reasoning_in(generated)
    return {
        "prompt_tokens": script.prompt_tokens,
        "total_tokens": script.prompt_tokens + generated,
        "completion_tokens": generated,
        "prompt_tokens_details": None,
        "reasoning_tokens": reasoning,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


class ChunkWriter:
    """Builds the SSE events of one streamed completion."""

    def __init__(self, rid: str, created: int, model: str, reasoning_field: ReasoningField, omit_nulls: bool):
        self.rid = rid
        self.created = created
        self.model = model
        self.reasoning_field = reasoning_field
        self.omit_nulls = omit_nulls

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, matched: Any = None,
               usage: dict[str, Any] | None = None) -> bytes:
        full_delta = {"role": None, "content": None, self.reasoning_field: None, "tool_calls": None}
        full_delta.update(delta)
        obj: dict[str, Any] = {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "delta": full_delta,
                    "logprobs": None,
                    "finish_reason": finish,
                    "matched_stop": matched,
                }
            ],
            "usage": usage,
        }
        return sse(drop_nulls(obj) if self.omit_nulls else obj)

    def role(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def pieces(self, pieces: list[Piece], script: Script, usage: dict[str, Any] | None = None) -> list[bytes]:
        """One chunk per piece. `usage` (stream_options.continuous_usage_stats) rides on each: like SGLang,
        every chunk of one decode step carries the step's running counts."""
        out: list[bytes] = []
        for p in pieces:
            if p.phase == "reasoning":
                out.append(self._chunk({self.reasoning_field: p.text}, usage=usage))
            elif p.phase == "content":
                out.append(self._chunk({"content": p.text}, usage=usage))
            elif p.phase == "tool_start":
                call = script.tool_calls[p.call]
                tc = {"id": call.id, "index": p.call, "type": "function",
                      "function": {"name": call.name, "arguments": ""}}
                out.append(self._chunk({"tool_calls": [tc]}, usage=usage))
            else:
                tc = {"id": None, "index": p.call, "type": "function",
                      "function": {"name": None, "arguments": p.text}}
                out.append(self._chunk({"tool_calls": [tc]}, usage=usage))
        return out

    def finish(self, reason: str, usage: dict[str, Any] | None = None) -> bytes:
        return self._chunk({}, finish=reason, usage=usage)

    def usage(self, script: Script, generated: int) -> bytes:
        obj = {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage(script, generated),
        }
        return sse(drop_nulls(obj) if self.omit_nulls else obj)


def completion(
    rid: str,
    created: int,
    model: str,
    script: Script,
    generated: int,
    finish: str,
    pieces: list[Piece],
    reasoning_field: ReasoningField,
) -> dict[str, Any]:
    """The non-streaming `chat.completion` object."""
    reasoning = "".join(p.text for p in pieces if p.phase == "reasoning")
    content = "".join(p.text for p in pieces if p.phase == "content")
    args: dict[int, str] = {}
    for p in pieces:
        if p.phase == "tool_start":
            args[p.call] = ""
        elif p.phase == "tool_args":
            args[p.call] = args.get(p.call, "") + p.text
    tool_calls = [
        {"id": script.tool_calls[i].id, "index": i, "type": "function",
         "function": {"name": script.tool_calls[i].name, "arguments": a}}
        for i, a in sorted(args.items())
    ]
    message = {
        "role": "assistant",
        "content": content if (content or not tool_calls) else None,
        reasoning_field: reasoning or None,
        "tool_calls": tool_calls or None,
    }
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        ],
        "usage": usage(script, generated),
        "metadata": {"weight_version": "default"},
    }
