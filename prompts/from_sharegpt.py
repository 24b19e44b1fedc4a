"""Convert ShareGPT-style conversations to PromptRecord JSONL.

This module owns the ShareGPT mapping: speaker names to chat roles, `function_call`/`observation` turns
(LLaMA-Factory style) and Hermes-style `<tool_call>`/`<tool_response>` text to OpenAI tool calls and
tool turns, and the `tools` field (JSON text or list) to OpenAI tool schemas. Reading, writing, ids,
validation and error reporting live in prompts.convert_io.
"""

from __future__ import annotations

import re
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

ROLES: dict[str, str] = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "model": "assistant",
    "tool": "tool",
    "observation": "tool",
    "function_response": "tool",
    "function_call": "function_call",  # an assistant turn that only calls tools
}
KNOWN_FIELDS = frozenset({"id", "conversations", "tools", "system"})

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_TOOL_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.S)

DESCRIPTION = """\
Convert ShareGPT conversations to PromptRecord JSONL, one record per input record.

Input: JSONL, or one JSON array of records (told apart by the first byte; .gz is read too):
  {"id"?: str|int, "system"?: str, "tools"?: str|list,
   "conversations": [{"from": "system|human|user|gpt|assistant|tool|function_call|observation",
                      "value": str}, ...], ...}
Mapping: human/user -> user, gpt/assistant/chatgpt/model -> assistant, system -> system,
  function_call -> an assistant turn with tool_calls (value: JSON {"name", "arguments"} or a list of
  them; it joins a directly preceding gpt turn), observation/tool -> a tool turn answering the waiting
  calls in order. Hermes-style <tool_call>{json}</tool_call> blocks inside a gpt turn become tool_calls
  and <tool_response> blocks become one tool turn each. "tools" (JSON text or list, bare functions or
  OpenAI schemas) becomes OpenAI tool schemas. Every other top-level field is kept in meta. A record
  without an id gets PREFIX + its line number (its position for a JSON array)."""


def convert(obj: object, item: Item, options: ConvertOptions) -> dict[str, Any]:
    """One ShareGPT record -> one PromptRecord (not yet validated)."""
    if not isinstance(obj, dict):
        raise ConvertError(f"record is {describe(obj)}; expected a JSON object with conversations")
    turns = obj.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise ConvertError(f"conversations is {describe(turns)}; expected a non-empty list of turns")
    messages: list[dict[str, Any]] = []
    system = obj.get("system")
    if isinstance(system, str) and system.strip():
        messages.append({"role": "system", "content": system})
    pending = PendingCalls()
    for n, turn in enumerate(turns):
        _add_turn(messages, turn, f"conversations[{n}]", n, pending)
    record: dict[str, Any] = {
        "id": record_id(obj.get("id"), f"{options.id_prefix}{item.number}"),
        "messages": messages,
    }
    tools = normalize_tools(obj.get("tools"))
    if tools is not None:
        record["tools"] = tools
    meta = collect_meta(obj, KNOWN_FIELDS)
    if meta is not None:
        record["meta"] = meta
    return record


def _add_turn(messages: list[dict[str, Any]], turn: object, where: str, n: int, pending: PendingCalls) -> None:
    if not isinstance(turn, dict):
        raise ConvertError(f"{where} is {describe(turn)}; expected an object with from and value")
    speaker = turn.get("from", turn.get("role"))
    value = turn.get("value", turn.get("content"))
    role = ROLES.get(speaker.lower()) if isinstance(speaker, str) else None
    if role is None:
        raise ConvertError(f"{where}.from is {describe(speaker)}; expected one of {', '.join(ROLES)}")

    if role == "function_call":
        calls = _parse_calls(value, f"{where}.value", n)
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_calls" not in last:
            last["tool_calls"] = calls  # the gpt turn just before said what it is about to call
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        pending.calls_made(calls)
    elif role == "tool":
        results = _tool_results(value)
        named = turn.get("tool_call_id") if len(results) == 1 else None
        for result in results:
            call_id = named
            if isinstance(call_id, str) and call_id:
                pending.answered(call_id)
            else:
                call_id = pending.answer(where)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    elif role == "assistant" and isinstance(value, str) and "<tool_call>" in value:
        blocks = _TOOL_CALL.findall(value)
        calls = [_parse_call(b, f"{where}.value <tool_call> {k}", f"call_{n}_{k}") for k, b in enumerate(blocks)]
        text = _TOOL_CALL.sub("", value).strip()
        messages.append({"role": "assistant", "content": text or None, "tool_calls": calls})
        pending.calls_made(calls)
    else:
        if not isinstance(value, str | list):
            raise ConvertError(f"{where}.value is {describe(value)}; expected a string")
        messages.append({"role": role, "content": value})


def _parse_calls(value: object, where: str, n: int) -> list[dict[str, Any]]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ConvertError(f"{where} is not valid JSON ({describe(value)}); expected a tool call") from None
    calls = value if isinstance(value, list) else [value]
    if not calls:
        raise ConvertError(f"{where} is an empty list; expected at least one tool call")
    return [normalize_tool_call(c, f"call_{n}_{k}", f"{where}[{k}]") for k, c in enumerate(calls)]


def _parse_call(text: str, where: str, call_id: str) -> dict[str, Any]:
    try:
        call = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ConvertError(f"{where} is not valid JSON ({describe(text)})") from None
    return normalize_tool_call(call, call_id, where)


def _tool_results(value: object) -> list[str]:
    """The tool turn's text, split into one result per <tool_response> block when it has them
    (the target chat template adds that wrapper itself, so it must not be kept)."""
    if not isinstance(value, str):
        return [orjson.dumps(value).decode()]
    blocks = _TOOL_RESPONSE.findall(value)
    return blocks if blocks else [value]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(
        "python -m prompts.from_sharegpt",
        DESCRIPTION,
        "ShareGPT records: JSONL or a JSON array (.json); `-` reads stdin",
        "sharegpt-",
    )
    return run(argv, parser, convert)


if __name__ == "__main__":
    raise SystemExit(main())
