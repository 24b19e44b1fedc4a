"""Pure per-record judgements of the audit: stub replies, token parts, and tool-call validity.

Tool calls are checked against the tool's JSON schema with a deliberately small subset of JSON Schema
(required keys, basic types, enum, nested properties and items, additionalProperties: false), which is
what tool definitions use in practice; no schema library is needed and nothing here does I/O.

A tool call that max_tokens cut off (the last call of a record whose finish_reason is `length`) is not
broken data: its arguments simply end early. `judge_tool_call` names it `truncated`, apart from the
invalid kinds, so the audit counts it with the truncated completions and not as an invalid call.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

import orjson

# The stub that started the project: `<think>\n</think>\nOK.<|im_end|>`, six tokens. A reasoning parser
# may leave the empty think block in the content or strip it; both spellings are stubs.
_STUB_CONTENT = re.compile(r"\A\s*(?:<think>\s*</think>\s*)?(?:ok|okay|sure|yes|done)[.!]?\s*(?:<\|im_end\|>)?\s*\Z",
                           re.IGNORECASE)

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def usage_int(usage: object, key: str) -> int | None:
    if not isinstance(usage, Mapping):
        return None
    value = usage.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    details = usage.get("completion_tokens_details")
    if key == "reasoning_tokens" and isinstance(details, Mapping):
        nested = details.get("reasoning_tokens")
        if isinstance(nested, int) and not isinstance(nested, bool):
            return nested
    return None


def is_stub(reasoning: str, content: str, has_tool_calls: bool) -> bool:
    """The `<think>\\n</think>\\nOK.` pattern: no reasoning, no tool call, a one-word acknowledgement."""
    return not has_tool_calls and not reasoning.strip() and _STUB_CONTENT.match(content) is not None


def token_parts(record: Mapping[str, Any]) -> tuple[int, float, float]:
    """(reasoning, content, tool-call) tokens of one result.

    Reasoning comes from `usage` when the server reports it, else from the share of characters; the
    rest of `completion_tokens` is split between content and tool calls by their characters (the server
    does not count them apart, so this part is an estimate).
    """
    usage = record.get("usage")
    total = usage_int(usage, "completion_tokens") or 0
    reasoning_text = record.get("reasoning") or ""
    content_text = record.get("content") or ""
    calls = record.get("tool_calls") or []
    tool_chars = 0
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            tool_chars += len(str(function.get("name") or "")) + len(str(function.get("arguments") or ""))
    reasoning = usage_int(usage, "reasoning_tokens")
    chars = len(reasoning_text) + len(content_text) + tool_chars
    if reasoning is None:
        reasoning = round(total * len(reasoning_text) / chars) if chars else 0
    reasoning = min(max(reasoning, 0), total)
    rest = total - reasoning
    other_chars = len(content_text) + tool_chars
    tools = rest * tool_chars / other_chars if other_chars else 0.0
    return reasoning, rest - tools, tools


def _type_ok(value: object, expected: object) -> bool:
    names = expected if isinstance(expected, list) else [expected]
    for name in names:
        if name == "null" and value is None:
            return True
        kinds = _JSON_TYPES.get(name) if isinstance(name, str) else None
        if kinds is None:
            return True  # a type we do not know: do not call the value wrong
        if isinstance(value, bool) and name != "boolean":
            continue  # JSON true is not a number
        if name == "integer" and isinstance(value, float) and value.is_integer():
            return True
        if isinstance(value, kinds):
            return True
    return False


def schema_problem(value: object, schema: object, where: str = "arguments", depth: int = 0) -> str | None:
    """The first way `value` breaks `schema`, or None. Unknown keywords are ignored."""
    if not isinstance(schema, Mapping) or depth > 8:
        return None
    expected = schema.get("type")
    if expected is not None and not _type_ok(value, expected):
        return f"{where} is {type(value).__name__}; the schema wants {expected}"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and value not in enum:
        return f"{where} is {value!r}; the schema allows only {enum}"
    if isinstance(value, dict):
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        for key in required if isinstance(required, list) else []:
            if key not in value:
                return f"{where} lacks the required key {key!r}"
        for key, item in value.items():
            if key in properties:
                problem = schema_problem(item, properties[key], f"{where}.{key}", depth + 1)
                if problem:
                    return problem
            elif schema.get("additionalProperties") is False:
                return f"{where} has the key {key!r}, which the schema does not allow"
    if isinstance(value, list):
        items = schema.get("items")
        for index, item in enumerate(value):
            problem = schema_problem(item, items, f"{where}[{index}]", depth + 1)
            if problem:
                return problem
    return None


def tool_schemas(tools: object) -> dict[str, object]:
    """Tool name -> its parameters schema, from the request's OpenAI tool list."""
    found: dict[str, object] = {}
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            found[function["name"]] = function.get("parameters")
    return found


def tool_call_problem(call: object, schemas: Mapping[str, object]) -> tuple[str, str] | None:
    """(kind, detail) of the first problem of one tool call, or None when it is valid."""
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        return "malformed", "the tool call has no function object"
    name = function.get("name")
    if not isinstance(name, str) or name not in schemas:
        return "unknown tool", f"{name!r} is not one of the request's tools"
    arguments = function.get("arguments")
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str | bytes) else arguments
    except orjson.JSONDecodeError:
        return "arguments not JSON", f"{name}: arguments do not parse as JSON: {str(arguments)[:80]!r}"
    if not isinstance(parsed, dict):
        return "arguments not an object", f"{name}: arguments are {type(parsed).__name__}, not a JSON object"
    problem = schema_problem(parsed, schemas[name])
    if problem is not None:
        return "schema mismatch", f"{name}: {problem}"
    return None


TRUNCATED_CALL = "truncated"


def cut_by_length(finish_reason: object, index: int, count: int) -> bool:
    """Whether call `index` of `count` is the one max_tokens cut off: the last call of a `length` record."""
    return finish_reason == "length" and index == count - 1


def judge_tool_call(call: object, schemas: Mapping[str, object], *, cut_off: bool) -> tuple[str, str] | None:
    """`tool_call_problem`, except that a call cut off by max_tokens is (TRUNCATED_CALL, detail), not invalid."""
    problem = tool_call_problem(call, schemas)
    if problem is not None and cut_off:
        return TRUNCATED_CALL, f"cut off by max_tokens (finish_reason length): {problem[1]}"
    return problem


def continued_shares(record: dict[str, Any]) -> tuple[int, int] | str | None:
    """A continued reply's (tokens kept from earlier attempts, tokens its last attempt generated); None when the
    record was made in one attempt; a problem when its `continued` does not describe its reply: each part
    `{"attempt", "tokens"}`, the attempts rising, the tokens adding up to its completion ids (or its usage)."""
    parts = record.get("continued")
    if parts is None:
        return None
    if not isinstance(parts, list) or len(parts) < 2:
        return f"`continued` is {str(parts)[:60]}, not the shares of two attempts or more"
    attempts: list[int] = []
    tokens: list[int] = []
    for part in parts:
        attempt = part.get("attempt") if isinstance(part, dict) else None
        count = part.get("tokens") if isinstance(part, dict) else None
        if type(attempt) is not int or type(count) is not int or count < 0:
            return f"`continued` holds {str(part)[:60]}, not {{attempt, tokens}}"
        attempts.append(attempt)
        tokens.append(count)
    if any(b <= a for a, b in itertools.pairwise(attempts)):
        return f"`continued`'s attempts {attempts} do not rise"
    ids = record.get("completion_token_ids")
    whole = len(ids) if isinstance(ids, list) else usage_int(record.get("usage"), "completion_tokens")
    if whole is not None and sum(tokens) != whole:
        return f"`continued`'s shares add up to {sum(tokens):,} tokens, the reply has {whole:,}"
    return sum(tokens[:-1]), tokens[-1]
