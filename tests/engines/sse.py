"""A small reference reader of OpenAI chat-completion SSE bodies, for test infrastructure.

This module owns the test-side view of a recorded or live stream: split raw bytes into ``data:``
events and fold the chunks into one outcome dict (reasoning, content, tool calls, finish reason,
usage, token ids). It is deliberately simple and independent of the client's own parser, so the
two can be checked against each other. Stdlib only.
"""

from __future__ import annotations

import json
from typing import Any

DONE = "[DONE]"


def events(body: bytes) -> list[str]:
    """The payloads of the ``data:`` lines, in order (``[DONE]`` included), from a whole SSE body."""
    text = body.decode("utf-8").replace("\r\n", "\n")
    out: list[str] = []
    for block in text.split("\n\n"):
        data = [line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")]
        if data:
            out.append("\n".join(data))
    return out


def chunks(body: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of a body, without the closing ``[DONE]``."""
    return [json.loads(e) for e in events(body) if e != DONE]


def fold(body: bytes) -> dict[str, Any]:
    """Folds a stream into the outcome a client should record for choice 0."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    error: Any = None
    evs = events(body)
    for payload in evs:
        if payload == DONE:
            continue
        chunk = json.loads(payload)
        if "error" in chunk and "choices" not in chunk:
            error = chunk["error"]
            continue
        if chunk.get("usage"):
            usage = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None and prompt_ids is None:
            prompt_ids = list(chunk["prompt_token_ids"])
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("reasoning") or delta.get("reasoning_content")
            if text:
                reasoning.append(text)
            if delta.get("content"):
                content.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(tc.get("index", 0), {"id": None, "name": "", "arguments": ""})
                if tc.get("id"):
                    call["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    call["name"] += fn["name"]
                if fn.get("arguments"):
                    call["arguments"] += fn["arguments"]
            if choice.get("token_ids") is not None:
                completion_ids = (completion_ids or []) + list(choice["token_ids"])
            if choice.get("finish_reason"):
                finish_reason = choice["finish_reason"]
    return {
        "reasoning": "".join(reasoning),
        "content": "".join(content),
        "tool_calls": [calls[i] for i in sorted(calls)],
        "finish_reason": finish_reason,
        "usage": usage,
        "prompt_token_ids": prompt_ids,
        "completion_token_ids": completion_ids,
        "error": error,
        "done": bool(evs) and evs[-1] == DONE,
    }
