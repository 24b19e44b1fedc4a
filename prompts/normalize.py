"""Shape fixes shared by the converters: tool schemas, tool calls, tool-call ids and meta.

Datasets in the wild spell the same thing several ways (bare function schemas, arguments as objects,
tool results without ids). This module owns turning those spellings into the one canonical
PromptRecord form that `prompts.schema.validate_prompt` accepts, so both converters agree on it.
Every function raises `ConvertError` with a plain-English message naming the field it could not use.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

import orjson

from prompts.schema import describe


class ConvertError(ValueError):
    """One input record could not be turned into a PromptRecord; the message names the field."""


def encode_arguments(value: object, where: str) -> str:
    """Tool-call arguments as a JSON object encoded as text, whatever form they came in."""
    if value is None or value == "":
        return "{}"  # a call without arguments: OpenAI sends "{}"
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ConvertError(f"{where} is not valid JSON ({describe(value)})") from None
        # Some exports encode the arguments twice; undo exactly one extra layer.
        if isinstance(parsed, str):
            return encode_arguments(parsed, where)
        if not isinstance(parsed, dict):
            raise ConvertError(f"{where} holds {describe(parsed)}; expected a JSON object")
        return value
    raise ConvertError(f"{where} is {describe(value)}; expected an object or a JSON string")


def normalize_tool_call(call: object, fallback_id: str, where: str) -> dict[str, Any]:
    """One tool call in OpenAI shape. Accepts the OpenAI shape and a bare {"name", "arguments"}
    (or "parameters", as some function-calling sets spell it); fills a missing id with fallback_id."""
    if not isinstance(call, dict):
        raise ConvertError(f"{where} is {describe(call)}; expected a tool call object")
    function = call.get("function", call)
    if not isinstance(function, dict):
        raise ConvertError(f"{where}.function is {describe(function)}; expected an object")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ConvertError(f"{where} has no function name ({describe(name)})")
    raw_args = function["arguments"] if "arguments" in function else function.get("parameters")
    arguments = encode_arguments(raw_args, f"{where}.arguments")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        call_id = fallback_id
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def normalize_tools(value: object, where: str = "tools") -> list[dict[str, Any]] | None:
    """Tool schemas in OpenAI shape, or None when there are none. Accepts a list or its JSON text,
    items either {"type": "function", "function": {...}}, the flat {"type": "function", "name", ...}
    or a bare function {"name", "description", "parameters"}."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ConvertError(f"{where} is a string but not valid JSON ({describe(value)})") from None
    if isinstance(value, dict):
        value = [value]  # a single schema where a list belongs
    if not isinstance(value, list):
        raise ConvertError(f"{where} is {describe(value)}; expected a list of tool schemas")
    tools: list[dict[str, Any]] = []
    for k, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise ConvertError(f"{where}[{k}] is {describe(tool)}; expected a tool schema object")
        if isinstance(tool.get("function"), dict):
            function = tool["function"]
        elif tool.get("type", "function") == "function":
            function = {key: v for key, v in tool.items() if key != "type"}
        else:
            raise ConvertError(f'{where}[{k}].type is {describe(tool.get("type"))}; expected "function"')
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ConvertError(f"{where}[{k}] has no function name ({describe(function.get('name'))})")
        tools.append({"type": "function", "function": function})
    return tools or None


class PendingCalls:
    """Pairs tool results with the calls they answer when the source gives results without ids:
    results answer the latest assistant turn's calls in order, as chat templates assume."""

    def __init__(self) -> None:
        self._ids: deque[str] = deque()

    def calls_made(self, calls: list[dict[str, Any]]) -> None:
        self._ids = deque(call["id"] for call in calls)

    def answer(self, where: str) -> str:
        if not self._ids:
            raise ConvertError(f"{where} is a tool result, but no tool call is waiting for one")
        return self._ids.popleft()

    def answered(self, call_id: str) -> None:
        """A result that named its call: take that call off the waiting list."""
        with contextlib.suppress(ValueError):
            self._ids.remove(call_id)


def collect_meta(obj: dict[str, Any], known: frozenset[str], where: str = "meta") -> dict[str, Any] | None:
    """The record's own meta object plus every top-level field the converter does not use, so nothing
    the source carried is lost; the record's meta wins on a clash."""
    meta = obj.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise ConvertError(f"{where} is {describe(meta)}; expected an object")
    merged: dict[str, Any] = dict(meta) if meta else {}
    for key, value in obj.items():
        if key not in known and key != "meta" and key not in merged:
            merged[key] = value
    return merged or None


def record_id(value: object, fallback: str, where: str = "id") -> str:
    """The record's id as a string: strings are kept, integers spelled out, absence filled in."""
    if value is None or value == "":
        return fallback
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ConvertError(f"{where} is {describe(value)}; expected a string or an integer")
