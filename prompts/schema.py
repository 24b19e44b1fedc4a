"""The PromptRecord wire format and its validator.

This module owns what a valid prompt is: the TypedDicts describing one line of a prompt file (OpenAI
chat format) and `validate_prompt`, which the client runs on every record at start-up. The validator
is on a hot-ish path (up to a million records before the first request), so it uses plain isinstance
checks and builds an error string only when it has found a problem.

Decisions that are part of the contract (see prompts/README.md):
- Unknown top-level keys are allowed and ignored; anything that must travel with the record belongs in
  `meta`, which is carried into the result untouched. Unknown keys inside a message are passed through.
- `tool_calls[].function.arguments` must be a string holding a JSON object, as in the OpenAI API. An
  object is refused rather than silently encoded: the ResultRecord stores arguments as JSON strings, vLLM
  refuses objects, and one canonical form keeps a request rendering the same everywhere. The converters
  encode objects for you.
- A final assistant turn is dropped by the client and regenerated, so a record must still hold a turn to
  answer (anything but system/developer) once that turn is gone.
- Duplicate ids are a property of the file, not of one record: the reader checks them.
"""

from __future__ import annotations

from typing import Literal, Required, TypedDict

import orjson

Role = Literal["system", "developer", "user", "assistant", "tool"]

VALID_ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})
_ROLE_LIST = ", ".join(sorted(VALID_ROLES))
# Roles that only set up the conversation: a record made of these alone gives the model nothing to answer.
_PREAMBLE_ROLES = frozenset({"system", "developer"})


class ContentPart(TypedDict, total=False):
    """One part of a list-valued `content`; only "text" parts are checked beyond `type`."""

    type: Required[str]
    text: str
    image_url: dict[str, object]


class FunctionCall(TypedDict):
    name: str
    arguments: str  # a JSON object encoded as text


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(TypedDict, total=False):
    role: Required[Role]
    content: str | list[ContentPart] | None
    name: str
    tool_calls: list[ToolCall]
    tool_call_id: str
    reasoning_content: str


class FunctionSchema(TypedDict, total=False):
    name: Required[str]
    description: str
    parameters: dict[str, object]  # a JSON Schema object
    strict: bool


class ToolSchema(TypedDict):
    type: Literal["function"]
    function: FunctionSchema


class PromptRecord(TypedDict, total=False):
    id: Required[str]
    messages: Required[list[ChatMessage]]
    tools: list[ToolSchema]
    meta: dict[str, object]


def describe(value: object) -> str:
    """Name a JSON value the way a reader of the error message thinks of it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if not value:
            return "an empty string"
        text = orjson.dumps(value).decode()
        return text if len(text) <= 42 else text[:38] + '..."'
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _bad(field: str, value: object, expected: str) -> str:
    return f"{field} is {describe(value)}; expected {expected}"


def validate_prompt(obj: object) -> str | None:
    """None when obj is a valid PromptRecord, else ONE plain-English problem naming the field, e.g.
    'messages[2].role is "robot"; expected one of assistant, developer, system, tool, user'."""
    if not isinstance(obj, dict):
        return _bad("record", obj, "a JSON object with id and messages")

    rid = obj.get("id")
    if not isinstance(rid, str) or not rid:
        if "id" not in obj:
            return "id is missing; expected a non-empty string"
        return _bad("id", rid, "a non-empty string")

    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        if "messages" not in obj:
            return "messages is missing; expected a non-empty list of messages"
        return _bad("messages", messages, "a non-empty list of messages")
    for i, message in enumerate(messages):
        problem = _check_message(message, i)
        if problem is not None:
            return problem
    last = len(messages) - 1 if messages[-1]["role"] == "assistant" else len(messages)
    if all(m["role"] in _PREAMBLE_ROLES for m in messages[:last]):
        return (
            "messages has no turn to answer: apart from system/developer messages and a final assistant"
            " turn (which is regenerated) it is empty"
        )

    if "tools" in obj:
        problem = _check_tools(obj["tools"])
        if problem is not None:
            return problem

    if "meta" in obj and not isinstance(obj["meta"], dict):
        return _bad("meta", obj["meta"], "an object")
    return None


def _check_message(message: object, i: int) -> str | None:
    if not isinstance(message, dict):
        return _bad(f"messages[{i}]", message, "an object with role and content")
    role = message.get("role")
    if role not in VALID_ROLES:
        if "role" not in message:
            return f"messages[{i}].role is missing; expected one of {_ROLE_LIST}"
        return _bad(f"messages[{i}].role", role, f"one of {_ROLE_LIST}")

    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            return f"messages[{i}].tool_calls is set on a {role} turn; only an assistant turn may call tools"
        problem = _check_tool_calls(tool_calls, i)
        if problem is not None:
            return problem

    content = message.get("content")
    if not isinstance(content, str):
        if content is None:
            if role != "assistant" or not tool_calls:
                state = "null" if "content" in message else "missing"
                return (
                    f"messages[{i}].content is {state}; expected a string or a list of content parts"
                    " (only an assistant turn with tool_calls may leave it out)"
                )
        elif isinstance(content, list):
            problem = _check_parts(content, i)
            if problem is not None:
                return problem
        else:
            return _bad(f"messages[{i}].content", content, "a string or a list of content parts")

    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            if "tool_call_id" not in message:
                return f"messages[{i}].tool_call_id is missing; a tool turn must name the tool call it answers"
            return _bad(f"messages[{i}].tool_call_id", call_id, "the id of the tool call it answers")

    if "name" in message and not isinstance(message["name"], str):
        return _bad(f"messages[{i}].name", message["name"], "a string")
    return None


def _check_parts(parts: list[object], i: int) -> str | None:
    for j, part in enumerate(parts):
        where = f"messages[{i}].content[{j}]"
        if not isinstance(part, dict):
            return _bad(where, part, 'a content part object such as {"type": "text", "text": "..."}')
        kind = part.get("type")
        if not isinstance(kind, str) or not kind:
            if "type" not in part:
                return f'{where}.type is missing; expected a string such as "text"'
            return _bad(f"{where}.type", kind, 'a string such as "text"')
        if kind == "text" and not isinstance(part.get("text"), str):
            if "text" not in part:
                return f'{where}.text is missing; a "text" part needs a string text'
            return _bad(f"{where}.text", part["text"], "a string")
    return None


def _check_tool_calls(tool_calls: object, i: int) -> str | None:
    if not isinstance(tool_calls, list):
        return _bad(f"messages[{i}].tool_calls", tool_calls, "a list of tool calls")
    for j, call in enumerate(tool_calls):
        where = f"messages[{i}].tool_calls[{j}]"
        if not isinstance(call, dict):
            return _bad(where, call, 'an object {"id", "type": "function", "function"}')
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            if "id" not in call:
                return f"{where}.id is missing; expected a non-empty string"
            return _bad(f"{where}.id", call_id, "a non-empty string")
        if call.get("type") != "function":
            if "type" not in call:
                return f'{where}.type is missing; expected "function"'
            return _bad(f"{where}.type", call.get("type"), '"function"')
        function = call.get("function")
        if not isinstance(function, dict):
            if "function" not in call:
                return f"{where}.function is missing; expected an object with name and arguments"
            return _bad(f"{where}.function", function, "an object with name and arguments")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            if "name" not in function:
                return f"{where}.function.name is missing; expected a non-empty string"
            return _bad(f"{where}.function.name", name, "a non-empty string")
        problem = _check_arguments(function.get("arguments"), "arguments" in function, where)
        if problem is not None:
            return problem
    return None


def _check_arguments(arguments: object, present: bool, where: str) -> str | None:
    expected = 'a JSON object encoded as a string, e.g. \'{"city": "Paris"}\''
    field = f"{where}.function.arguments"
    if not isinstance(arguments, str):
        if not present:
            return f"{field} is missing; expected {expected}"
        return _bad(field, arguments, expected)
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return f"{field} is not valid JSON ({describe(arguments)}); expected {expected}"
    if not isinstance(parsed, dict):
        return f"{field} holds {describe(parsed)}, not an object; expected {expected}"
    return None


def _check_tools(tools: object) -> str | None:
    if not isinstance(tools, list):
        return _bad("tools", tools, "a list of tool schemas")
    for k, tool in enumerate(tools):
        where = f"tools[{k}]"
        if not isinstance(tool, dict):
            return _bad(where, tool, 'a tool schema {"type": "function", "function": {...}}')
        if tool.get("type") != "function":
            if "type" not in tool:
                return f'{where}.type is missing; expected "function"'
            return _bad(f"{where}.type", tool.get("type"), '"function"')
        function = tool.get("function")
        if not isinstance(function, dict):
            if "function" not in tool:
                return f"{where}.function is missing; expected an object with name, description, parameters"
            return _bad(f"{where}.function", function, "an object with name, description, parameters")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            if "name" not in function:
                return f"{where}.function.name is missing; expected a non-empty string"
            return _bad(f"{where}.function.name", name, "a non-empty string")
        if "description" in function and not isinstance(function["description"], str):
            return _bad(f"{where}.function.description", function["description"], "a string")
        if "parameters" in function and not isinstance(function["parameters"], dict):
            return _bad(f"{where}.function.parameters", function["parameters"], "a JSON Schema object")
    return None
