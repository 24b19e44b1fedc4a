"""Table-driven tests of prompts.schema.validate_prompt: one row per valid shape, one per invalid case."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from prompts.schema import VALID_ROLES, validate_prompt

USER = {"role": "user", "content": "What's the weather in Paris?"}
CALL: dict[str, Any] = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def rec(*messages: object, **extra: Any) -> dict[str, Any]:
    return {"id": "p1", "messages": list(messages or [USER]), **extra}


def with_call(**changes: Any) -> dict[str, Any]:
    """A record whose assistant turn carries one tool call, changed by `changes` (None deletes a key)."""
    call = copy.deepcopy(CALL)
    for key, value in changes.items():
        target, _, leaf = key.rpartition(".")
        holder = call["function"] if target == "function" else call
        if value is None:
            holder.pop(leaf)
        else:
            holder[leaf] = value
    return rec(USER, {"role": "assistant", "content": None, "tool_calls": [call]})


VALID: list[tuple[str, object]] = [
    ("plain chat", rec()),
    ("system prompt", rec({"role": "system", "content": "Be brief."}, USER)),
    ("developer prompt", rec({"role": "developer", "content": "Answer in French."}, USER)),
    ("content parts", rec({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})),
    ("non-text part", rec({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})),
    ("empty string content", rec({"role": "user", "content": ""})),
    ("multi-turn", rec(USER, {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "And Rome?"})),
    ("ends with assistant", rec(USER, {"role": "assistant", "content": "OK."})),
    (
        "tool call and result",
        rec(
            USER,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
        ),
    ),
    ("tool call, content absent", rec(USER, {"role": "assistant", "tool_calls": [CALL]})),
    ("tool call with text", rec(USER, {"role": "assistant", "content": "Checking.", "tool_calls": [CALL]})),
    ("tool_calls null", rec(USER, {"role": "assistant", "content": "Hi", "tool_calls": None})),
    ("tools", rec(tools=[WEATHER])),
    ("tool without description or parameters", rec(tools=[{"type": "function", "function": {"name": "now"}}])),
    ("empty tools list", rec(tools=[])),
    ("meta", rec(meta={"source": "chat", "n": 1})),
    ("unknown top-level key", rec(extra_field=[1, 2])),
    ("unknown message key", rec({"role": "user", "content": "hi", "weight": 0.5})),
    ("message name", rec({"role": "user", "content": "hi", "name": "alice"})),
]


@pytest.mark.parametrize(("shape", "obj"), VALID, ids=[v[0] for v in VALID])
def test_valid(shape: str, obj: object) -> None:
    assert validate_prompt(obj) is None


INVALID: list[tuple[str, object, str]] = [
    ("not a JSON object", ["id", "messages"], "record is a list"),
    ("string record", "hello", 'record is "hello"'),
    ("missing id", {"messages": [USER]}, "id is missing"),
    ("non-string id", {"id": 12, "messages": [USER]}, "id is the number 12"),
    ("empty id", {"id": "", "messages": [USER]}, "id is an empty string"),
    ("missing messages", {"id": "p1"}, "messages is missing"),
    ("messages not a list", {"id": "p1", "messages": {"role": "user"}}, "messages is an object"),
    ("empty messages", {"id": "p1", "messages": []}, "messages is a list"),
    ("message not an object", rec("hi"), 'messages[0] is "hi"'),
    (
        "unknown role",
        rec(USER, USER, {"role": "robot", "content": "x"}),
        'messages[2].role is "robot"; expected one of',
    ),
    ("missing role", rec({"content": "x"}), "messages[0].role is missing"),
    ("content wrong type", rec({"role": "user", "content": 42}), "messages[0].content is the number 42"),
    ("content object", rec({"role": "user", "content": {"text": "x"}}), "messages[0].content is an object"),
    ("user content missing", rec({"role": "user"}), "messages[0].content is missing"),
    ("assistant content null", rec(USER, {"role": "assistant", "content": None}), "messages[1].content is null"),
    ("bad content part", rec({"role": "user", "content": ["text"]}), "messages[0].content[0] is"),
    ("part without type", rec({"role": "user", "content": [{"text": "x"}]}), "messages[0].content[0].type is missing"),
    ("text part without text", rec({"role": "user", "content": [{"type": "text"}]}), "messages[0].content[0].text"),
    ("text part non-string", rec({"role": "user", "content": [{"type": "text", "text": 1}]}), "content[0].text is"),
    ("tool_calls not a list", rec(USER, {"role": "assistant", "tool_calls": CALL}), "messages[1].tool_calls is an"),
    ("tool_calls on a user turn", rec({**USER, "tool_calls": [CALL]}), "messages[0].tool_calls is set on a user"),
    ("tool call without id", with_call(id=None), "messages[1].tool_calls[0].id is missing"),
    ("tool call wrong type", with_call(type="retrieval"), 'messages[1].tool_calls[0].type is "retrieval"'),
    ("tool call without function", with_call(function=None), "messages[1].tool_calls[0].function is missing"),
    ("tool call without name", with_call(**{"function.name": None}), "tool_calls[0].function.name is missing"),
    ("arguments as object", with_call(**{"function.arguments": {"city": "Paris"}}), "function.arguments is an object"),
    ("arguments not JSON", with_call(**{"function.arguments": "{city: Paris}"}), "arguments is not valid JSON"),
    ("arguments JSON list", with_call(**{"function.arguments": "[1]"}), "arguments holds a list"),
    ("arguments missing", with_call(**{"function.arguments": None}), "function.arguments is missing"),
    ("empty tool_calls, no content", rec(USER, {"role": "assistant", "tool_calls": []}), "messages[1].content is"),
    ("tool turn without tool_call_id", rec(USER, {"role": "tool", "content": "21"}), "messages[1].tool_call_id is"),
    (
        "tool turn with numeric tool_call_id",
        rec(USER, {"role": "tool", "content": "21", "tool_call_id": 7}),
        "messages[1].tool_call_id is the number 7",
    ),
    ("tool turn content null", rec(USER, {"role": "tool", "tool_call_id": "c"}), "messages[1].content is missing"),
    ("name not a string", rec({"role": "user", "content": "x", "name": 3}), "messages[0].name is the number 3"),
    ("only a system prompt", rec({"role": "system", "content": "Be brief."}), "messages has no turn to answer"),
    ("only an assistant turn", rec({"role": "assistant", "content": "Hi"}), "messages has no turn to answer"),
    ("tools not a list", rec(tools=WEATHER), "tools is an object; expected a list"),
    ("tool not an object", rec(tools=["get_weather"]), 'tools[0] is "get_weather"'),
    ("tool not a function schema", rec(tools=[{"type": "retrieval"}]), 'tools[0].type is "retrieval"'),
    ("tool bare function", rec(tools=[WEATHER["function"]]), "tools[0].type is missing"),
    ("tool function not object", rec(tools=[{"type": "function", "function": "f"}]), "tools[0].function is"),
    ("tool without name", rec(tools=[{"type": "function", "function": {}}]), "tools[0].function.name is missing"),
    ("tool empty name", rec(tools=[{"type": "function", "function": {"name": ""}}]), "tools[0].function.name is an"),
    (
        "tool description not string",
        rec(tools=[{"type": "function", "function": {"name": "f", "description": 1}}]),
        "tools[0].function.description is the number 1",
    ),
    (
        "tool parameters not object",
        rec(tools=[{"type": "function", "function": {"name": "f", "parameters": []}}]),
        "tools[0].function.parameters is a list",
    ),
    ("meta not object", rec(meta=["chat"]), "meta is a list; expected an object"),
    ("meta null", rec(meta=None), "meta is null"),
]


@pytest.mark.parametrize(("case", "obj", "expected"), INVALID, ids=[v[0] for v in INVALID])
def test_invalid(case: str, obj: object, expected: str) -> None:
    problem = validate_prompt(obj)
    assert problem is not None, case
    assert expected in problem
    assert "\n" not in problem  # one plain-English line, ready for FILE:LINE: prefixes


def test_role_message_lists_every_role_sorted() -> None:
    problem = validate_prompt(rec({"role": "robot", "content": "x"}))
    assert problem == 'messages[0].role is "robot"; expected one of assistant, developer, system, tool, user'
    assert sorted(VALID_ROLES) == ["assistant", "developer", "system", "tool", "user"]


def test_long_values_are_shortened_in_messages() -> None:
    problem = validate_prompt({"id": "p1", "messages": [{"role": "x" * 500, "content": "hi"}]})
    assert problem is not None
    assert len(problem) < 160


def test_first_problem_wins() -> None:
    problem = validate_prompt({"id": 1, "messages": "nope", "meta": []})
    assert problem is not None
    assert problem.startswith("id ")


def test_readme_examples_are_valid() -> None:
    readme = (Path(__file__).resolve().parent.parent / "prompts" / "README.md").read_text()
    examples = re.findall(r"```json\n(.*?)```", readme, re.S)
    assert len(examples) >= 4
    for example in examples:
        assert validate_prompt(orjson.loads(example)) is None, example
