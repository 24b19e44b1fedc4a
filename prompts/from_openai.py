"""Convert OpenAI chat-messages JSONL (plain or Batch API requests) to PromptRecord JSONL.

This module owns the OpenAI-specific mapping: where the messages, tools and id sit in the two shapes,
and canonicalising the messages (legacy `function_call`/`function` turns to tool calls, arguments
objects to JSON text, missing tool-call ids, SDK dumps full of nulls). Reading, writing, ids,
validation and error reporting live in prompts.convert_io.
"""

from __future__ import annotations

from typing import Any

import orjson

from prompts.convert_io import ConvertOptions, Item, build_parser, run
from prompts.normalize import (
    ConvertError,
    PendingCalls,
    collect_meta,
    normalize_tool_call,
    normalize_tools,
    record_id,
)
from prompts.schema import describe

# Request fields that become part of the PromptRecord itself (or are Batch API plumbing).
KNOWN_FIELDS = frozenset({"id", "custom_id", "messages", "tools", "functions", "body", "method", "url"})

DESCRIPTION = """\
Convert OpenAI chat-messages JSONL to PromptRecord JSONL, one record per line.

Input lines, either shape (a JSON array of them works too; .gz is read too):
  {"id"?|"custom_id"?: str, "messages": [...], "tools"?: [...], ...}
  {"custom_id": str, "method": "POST", "url": "/v1/chat/completions",
   "body": {"model": ..., "messages": [...], "tools"?: [...], ...}}     (Batch API request)
The id is "id", else "custom_id", else PREFIX + the line number. Messages are kept as they are, except:
fields that are null are dropped (but not content); tool-call arguments given as objects are encoded
as JSON text; a tool call without an id gets one and a tool turn without tool_call_id answers the
waiting calls in order; the legacy assistant "function_call" and "function" turns become tool_calls and
tool turns; the legacy "functions" list becomes tools. Every other field of the line (and of the Batch
body, such as model and temperature) is kept in meta."""


def convert(obj: object, item: Item, options: ConvertOptions) -> dict[str, Any]:
    """One OpenAI request line -> one PromptRecord (not yet validated)."""
    if not isinstance(obj, dict):
        raise ConvertError(f"record is {describe(obj)}; expected a JSON object with messages")
    body = obj.get("body")
    batch = "messages" not in obj and isinstance(body, dict)
    request: dict[str, Any] = body if batch else obj  # type: ignore[assignment]
    where = "body.messages" if batch else "messages"
    fallback = f"{options.id_prefix}{item.number}"
    record: dict[str, Any] = {
        "id": record_id(obj.get("id") or obj.get("custom_id"), fallback, "custom_id" if batch else "id"),
        "messages": _messages(request.get("messages"), where),
    }
    tools = normalize_tools(request.get("tools"), "body.tools" if batch else "tools")
    if tools is None:
        tools = normalize_tools(request.get("functions"), "body.functions" if batch else "functions")
    if tools is not None:
        record["tools"] = tools
    meta = collect_meta(obj, KNOWN_FIELDS)
    if batch:
        extra = collect_meta(request, KNOWN_FIELDS, "body.meta") or {}
        meta = {**extra, **(meta or {})} or None
    if meta is not None:
        record["meta"] = meta
    return record


def _messages(value: object, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise ConvertError(f"{where} is {describe(value)}; expected a non-empty list of messages")
    pending = PendingCalls()
    out: list[dict[str, Any]] = []
    for i, message in enumerate(value):
        here = f"{where}[{i}]"
        if not isinstance(message, dict):
            raise ConvertError(f"{here} is {describe(message)}; expected a message object")
        # SDK dumps carry "refusal": null, "audio": null, ...; content null is meaningful, keep it.
        msg = {k: v for k, v in message.items() if v is not None or k == "content"}
        calls = [
            normalize_tool_call(call, f"call_{i}_{j}", f"{here}.tool_calls[{j}]")
            for j, call in enumerate(_as_list(msg.pop("tool_calls", None), f"{here}.tool_calls"))
        ]
        if "function_call" in msg:
            calls.append(normalize_tool_call(msg.pop("function_call"), f"call_{i}", f"{here}.function_call"))
        if calls:
            msg["tool_calls"] = calls
            pending.calls_made(calls)
        if msg.get("role") == "function":
            msg["role"] = "tool"
        if msg.get("role") == "tool":
            call_id = msg.get("tool_call_id")
            if isinstance(call_id, str) and call_id:
                pending.answered(call_id)
            else:
                msg["tool_call_id"] = pending.answer(here)
            content = msg.get("content")
            if content is not None and not isinstance(content, str | list):
                msg["content"] = orjson.dumps(content).decode()  # a result given as a JSON value
        out.append(msg)
    return out


def _as_list(value: object, where: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConvertError(f"{where} is {describe(value)}; expected a list of tool calls")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(
        "python -m prompts.from_openai",
        DESCRIPTION,
        "OpenAI chat-messages JSONL (or Batch API request JSONL); `-` reads stdin",
        "openai-",
    )
    return run(argv, parser, convert)


if __name__ == "__main__":
    raise SystemExit(main())
