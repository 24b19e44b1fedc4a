"""Deterministic reply scripts of the simulated server: lengths, tool arguments, token layout."""

from __future__ import annotations

import dataclasses
import random
import statistics
from typing import Any

import orjson
import pytest

from simulator.config import SimConfig
from simulator.script import Piece, ReplyCursor, build_script, value_for

CONFIG = SimConfig()


def msgs(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"prompt number {i}"}]}


@pytest.mark.parametrize(
    ("schema", "check"),
    [
        ({"type": "string"}, lambda v: isinstance(v, str) and v),
        ({"type": "string", "maxLength": 3}, lambda v: isinstance(v, str) and len(v) <= 3),
        ({"type": "integer", "minimum": 5, "maximum": 9}, lambda v: isinstance(v, int) and 5 <= v <= 9),
        ({"type": "number"}, lambda v: isinstance(v, float)),
        ({"type": "boolean"}, lambda v: isinstance(v, bool)),
        ({"type": "null"}, lambda v: v is None),
        ({"enum": ["a", "b"]}, lambda v: v in ("a", "b")),
        ({"const": 3}, lambda v: v == 3),
        ({"type": ["null", "integer"]}, lambda v: isinstance(v, int)),
        ({"anyOf": [{"type": "boolean"}, {"type": "string"}]}, lambda v: isinstance(v, bool)),
        ({"type": "array", "items": {"type": "integer"}, "minItems": 2},
         lambda v: isinstance(v, list) and len(v) >= 2 and all(isinstance(x, int) for x in v)),
        ({"properties": {"a": {"type": "integer"}}, "required": ["a"]}, lambda v: isinstance(v["a"], int)),
        ({"type": "object", "properties": {"o": {"type": "object", "properties": {"x": {"type": "string"}},
                                                 "required": ["x"]}}, "required": ["o"]},
         lambda v: isinstance(v["o"]["x"], str)),
        ({}, lambda v: isinstance(v, str)),
    ],
)
def test_value_for_follows_the_schema(schema: dict[str, Any], check: Any) -> None:
    for seed in range(20):
        value = value_for(schema, random.Random(seed))
        assert check(value), (schema, value)
        orjson.dumps(value)


def test_same_request_same_script_and_seed_changes_it() -> None:
    a = build_script(msgs(1), True, CONFIG)
    assert build_script(msgs(1), True, CONFIG) == a
    assert build_script(msgs(1), True, dataclasses.replace(CONFIG, seed=7)) != a
    assert build_script(msgs(2), True, CONFIG) != a


def test_lengths_are_heavy_tailed_around_the_mean() -> None:
    config = dataclasses.replace(CONFIG, mean_tokens=1500, max_gen_tokens=100_000)
    totals = [build_script(msgs(i), True, config).total_tokens for i in range(3000)]
    mean = statistics.fmean(totals)
    assert 1000 < mean < 2000
    assert statistics.median(totals) < mean  # right-skewed: most replies shorter than the mean
    assert max(totals) > 8 * mean  # a long tail of very long thinking


def test_context_cap_ends_in_length_with_unclosed_thinking() -> None:
    config = dataclasses.replace(CONFIG, mean_tokens=1500, max_gen_tokens=2000)
    scripts = [build_script(msgs(i), True, config) for i in range(400)]
    capped = [s for s in scripts if s.capped]
    assert capped and len(capped) < len(scripts) / 2
    for s in capped:
        assert s.total_tokens == 2000 and s.content_tokens == 0
        assert s.cut(None) == (2000, "length")
    assert all(s.total_tokens <= 2000 for s in scripts)


def test_thinking_off_has_no_reasoning() -> None:
    for i in range(50):
        s = build_script(msgs(i), False, CONFIG)
        assert s.reasoning_tokens == 0 and s.content_tokens > 0


def test_cut_and_finish_reasons() -> None:
    s = build_script(msgs(3), True, CONFIG)
    assert s.cut(None) == (s.total_tokens, "stop")
    assert s.cut(5) == (5, "length")
    assert s.cut(s.total_tokens) == (s.total_tokens, "stop")


def _tool_body(i: int) -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["q", "n"]}}}
    return {**msgs(i), "tools": [tool]}


def test_cursor_walks_every_token_once_whatever_the_step_sizes() -> None:
    config = dataclasses.replace(CONFIG, tool_call_rate=1.0)
    for i in range(30):
        script = build_script(_tool_body(i), True, config)
        one_go = ReplyCursor(script).advance(script.total_tokens)
        rng = random.Random(i)
        cursor = ReplyCursor(script)
        stepped: list[Piece] = []
        while cursor.position < script.total_tokens:
            stepped += cursor.advance(cursor.position + rng.randint(1, 5))

        def joined(pieces: list[Piece], phase: str) -> str:
            return "".join(p.text for p in pieces if p.phase == phase)

        for phase in ("reasoning", "content", "tool_args"):
            assert joined(stepped, phase) == joined(one_go, phase)
        starts = [p.call for p in stepped if p.phase == "tool_start"]
        assert starts == list(range(len(script.tool_calls))) and starts
        for n, call in enumerate(script.tool_calls):
            args = "".join(p.text for p in stepped if p.phase == "tool_args" and p.call == n)
            assert args == call.arguments
            parsed = orjson.loads(args)
            assert isinstance(parsed["q"], str) and isinstance(parsed["n"], int)
        assert script.cut(None)[1] == "tool_calls"


def test_named_tool_choice_forces_that_tool() -> None:
    body = _tool_body(0)
    body["tools"].append({"type": "function", "function": {"name": "other", "parameters": {}}})
    body["tool_choice"] = {"type": "function", "function": {"name": "other"}}
    script = build_script(body, True, dataclasses.replace(CONFIG, tool_call_rate=0.0))
    assert [c.name for c in script.tool_calls] == ["other"]
