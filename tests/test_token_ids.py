"""The pure parts of --token-ids: the non-streaming body parser, the payload change, the deadline, the
per-kind choice of how ids are asked for, and the simulated MTP figures. Table-driven."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from client.core.errors import AttemptError, ConfigError, NotJSON, StreamDropped, StreamErrorEvent
from client.core.payload import FieldPolicy
from client.core.stats import EndpointCounters
from client.fleet.token_ids import configure, describe, effective_kind, ids_policy
from client.run.deadline import INITIAL_RATE, MAX_DOUBLINGS, MIN_SAMPLES, SAFETY, DecodeDeadline
from client.wire.complete import as_nonstreaming, parse_completion, spec_from
from client.wire.endpoint import Endpoint
from launch.sim.tokens import DRAFT_TOKENS, cached_tokens, spec_details

SGLANG_BODY = {
    "id": "x", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi.", "reasoning_content": "think",
                                         "tool_calls": None},
                 "logprobs": None, "finish_reason": "stop", "matched_stop": None,
                 "token_ids": [5, 6, 7], "prompt_token_ids": [1, 2]}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5,
              "prompt_tokens_details": {"cached_tokens": 1}, "reasoning_tokens": 1},
    "sglext": {"spec_tokens_details": {"spec_accept_rate": 0.5, "spec_accept_length": 1.5, "spec_verify_ct": 2,
                                       "spec_num_correct_drafts": 1, "spec_num_proposed_drafts": 6,
                                       "spec_correct_drafts_histogram": [1, 1, 0, 0], "spec_cap_length": 0.0},
               "cached_tokens_details": {"device": 1, "host": 0}},
}
VLLM_BODY = {
    "id": "y", "object": "chat.completion", "model": "m", "prompt_token_ids": [9, 8],
    "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "reasoning": "r",
                                         "tool_calls": [{"id": "c1", "type": "function",
                                                         "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                 "finish_reason": "tool_calls", "token_ids": [3, 4]}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
}


def _with(body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    copy = orjson.loads(orjson.dumps(body))
    copy.update(changes)
    return copy


@pytest.mark.parametrize(("body", "expected"), [
    (SGLANG_BODY, {"reasoning": "think", "content": "Hi.", "calls": [], "finish": "stop", "prompt": [1, 2],
                   "completion": [5, 6, 7], "cached": 1,
                   "spec": {"accept_length": 1.5, "accept_rate": 0.5, "verify_ct": 2, "draft_tokens": 6,
                            "accepted_tokens": 1, "accepted_histogram": [1, 1, 0, 0]}}),
    (VLLM_BODY, {"reasoning": "r", "content": "", "calls": [("c1", "f", "{\"a\": 1}")], "finish": "tool_calls",
                 "prompt": [9, 8], "completion": [3, 4], "cached": None, "spec": None}),
    # Only the cache tiers came (no --enable-cache-report): their sum is the cached count.
    (_with(SGLANG_BODY, usage={"prompt_tokens": 9, "completion_tokens": 3},
           sglext={"cached_tokens_details": {"device": 4, "host": 2, "storage": 1}}),
     {"reasoning": "think", "content": "Hi.", "calls": [], "finish": "stop", "prompt": [1, 2],
      "completion": [5, 6, 7], "cached": 7, "spec": None}),
    # A server that gives no ids: the completion is still whole.
    (_with(SGLANG_BODY, choices=[{"index": 0, "message": {"content": "ok"}, "finish_reason": "length"}]),
     {"reasoning": "", "content": "ok", "calls": [], "finish": "length", "prompt": None, "completion": None,
      "cached": 1, "spec": {"accept_length": 1.5, "accept_rate": 0.5, "verify_ct": 2, "draft_tokens": 6,
                            "accepted_tokens": 1, "accepted_histogram": [1, 1, 0, 0]}}),
])
def test_parse_completion(body: dict[str, Any], expected: dict[str, Any]) -> None:
    completion = parse_completion(orjson.dumps(body), "http://s")
    assert completion.reasoning == expected["reasoning"]
    assert completion.content == expected["content"]
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == expected["calls"]
    assert completion.finish_reason == expected["finish"]
    assert completion.prompt_token_ids == expected["prompt"]
    assert completion.completion_token_ids == expected["completion"]
    details = completion.usage.get("prompt_tokens_details")
    assert (details or {}).get("cached_tokens") == expected["cached"]
    assert completion.spec == expected["spec"]


@pytest.mark.parametrize(("body", "error", "words"), [
    (b"<html>login</html>", NotJSON, "not JSON"),
    (b"[1, 2]", StreamDropped, "not an object"),
    (orjson.dumps({"object": "chat.completion", "choices": []}), StreamDropped, "without choices"),
    (orjson.dumps({"error": {"message": "engine died"}}), StreamErrorEvent, "engine died"),
    (orjson.dumps({"choices": [{"message": {"content": "x"}, "finish_reason": None}]}), StreamDropped,
     "finish_reason"),
    # A malformed tool call is a failed attempt, not an exception that would end the run.
    (orjson.dumps({"choices": [{"message": {"tool_calls": [{"id": "c", "function": "f"}]}, "finish_reason": "stop"}]}),
     StreamDropped, "not a list of calls"),
    (orjson.dumps({"choices": [{"message": {"tool_calls": 3}, "finish_reason": "stop"}]}), StreamDropped,
     "not a list of calls"),
])
def test_parse_completion_failures(body: bytes, error: type[AttemptError], words: str) -> None:
    with pytest.raises(error, match=words):
        parse_completion(body, "http://s", "text/html")


@pytest.mark.parametrize(("details", "spec"), [
    (None, None),
    ({}, None),
    ([{"spec_accept_length": 2.0, "spec_verify_ct": 3}], {"accept_length": 2.0, "verify_ct": 3}),  # n > 1: a list
    ({"spec_accept_length": True, "spec_verify_ct": "3"}, None),  # wrong types are left out
])
def test_spec_from(details: Any, spec: Any) -> None:
    assert spec_from(details) == spec


@pytest.mark.parametrize(("payload", "details", "expected"), [
    ({"stream": True, "stream_options": {"include_usage": True}, "model": "m"}, False,
     {"stream": False, "model": "m"}),
    ({"stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True}, True,
     {"stream": False, "return_token_ids": True, "return_prompt_token_ids": True,
      "return_spec_tokens_details": True, "return_cached_tokens_details": True}),
    ({"stream": True}, True, {"stream": False, "return_spec_tokens_details": True,
                               "return_cached_tokens_details": True}),
])
def test_as_nonstreaming(payload: dict[str, Any], details: bool, expected: dict[str, Any]) -> None:
    assert as_nonstreaming(payload, details=details) == expected


@pytest.mark.parametrize(("samples", "max_tokens", "floor", "expected"), [
    ([], 1000, 300.0, 300.0 + SAFETY * 1000 / INITIAL_RATE),
    ([(100, 1.0)] * (MIN_SAMPLES - 1), 1000, 10.0, 10.0 + SAFETY * 1000 / INITIAL_RATE),  # too few yet
    ([(100, 1.0)] * MIN_SAMPLES, 1000, 10.0, 10.0 + SAFETY * 1000 / 100),
    # The slow tail decides: one in ten requests at 20 tok/s among 200 tok/s ones.
    ([(200, 1.0)] * 18 + [(20, 1.0)] * 2, 400, 0.0, SAFETY * 400 / 20),
    ([(0, 1.0), (5, 0.0)] * 10, 100, 1.0, 1.0 + SAFETY * 100 / INITIAL_RATE),  # empty samples are ignored
])
def test_deadline(samples: list[tuple[int, float]], max_tokens: int, floor: float, expected: float) -> None:
    deadline = DecodeDeadline()
    for tokens, seconds in samples:
        deadline.observe(tokens, seconds)
    assert deadline.deadline(max_tokens, floor) == pytest.approx(expected)


def test_a_slow_endpoint_keeps_its_own_longer_deadline() -> None:
    """One slow server among fast ones (under a tenth of the replies) is not held to the fleet's rate."""
    deadline = DecodeDeadline()
    for _ in range(100):
        deadline.observe(2000, 10.0, 0)  # 200 tok/s
    for _ in range(MIN_SAMPLES):
        deadline.observe(200, 10.0, 1)  # 20 tok/s
    assert deadline.rate(0) == pytest.approx(200.0)
    assert deadline.rate(1) == pytest.approx(20.0)
    assert deadline.deadline(4000, 0.0, endpoint=1) == pytest.approx(SAFETY * 4000 / 20)
    # A fast endpoint is never planned faster than the fleet: the fleet's slow tail bounds it.
    deadline.observe(1, 1.0, 2)
    assert deadline.rate(2) == pytest.approx(200.0)


@pytest.mark.parametrize(("missed", "factor"), [(0, 1), (1, 2), (2, 4), (5, 2 ** MAX_DOUBLINGS)])
def test_a_missed_deadline_lengthens_the_next(missed: int, factor: int) -> None:
    """A reply slower than planned is given more time on its retry, so long replies are not lost."""
    deadline = DecodeDeadline()
    assert deadline.deadline(1000, 10.0, missed=missed) == pytest.approx(factor * (10.0 + SAFETY * 1000 / INITIAL_RATE))


SGL = FieldPolicy(frozenset({"top_k", "chat_template_kwargs"}), "sglang")
VLL = FieldPolicy(frozenset({"top_k", "return_token_ids"}), "vllm")
MIX = FieldPolicy(frozenset({"top_k"}), "mixed")


@pytest.mark.parametrize(("policy", "mode", "kinds", "has_field"), [
    (SGL, "auto", {"a": "sglang"}, False),
    (SGL, "on", {"a": "sglang"}, True),
    (SGL, "off", {"a": "sglang"}, False),
    (VLL, "auto", {"a": "vllm"}, True),
    (VLL, "off", {"a": "vllm"}, False),
    (MIX, "on", {"a": "sglang", "b": "vllm"}, True),
])
def test_ids_policy(policy: FieldPolicy, mode: str, kinds: dict[str, str], has_field: bool) -> None:
    assert ids_policy(policy, mode, kinds).allows("return_token_ids") is has_field


@pytest.mark.parametrize(("policy", "kinds", "words"), [
    (FieldPolicy(frozenset(), "openai"), {"http://a": "other"}, r"http://a is neither SGLang nor vLLM"),
    (FieldPolicy(frozenset(), "openai"), {"http://a": "sglang"}, r"--compat openai sends standard"),
    # --compat auto with no server ready yet: the field set is standard, but nobody asked for --compat openai.
    (FieldPolicy(frozenset(), "openai"), {}, r"no server was ready at start"),
])
def test_ids_policy_refuses_on_without_a_way(policy: FieldPolicy, kinds: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        ids_policy(policy, "on", kinds)


@pytest.mark.parametrize(("detected", "compat", "policy", "kind"), [
    ("sglang", "auto", SGL, "sglang"),
    ("other", "sglang", SGL, "sglang"),  # --compat is the user's word
    (None, "auto", VLL, "vllm"),  # down at start: the run's kind
    (None, "auto", MIX, "other"),
])
def test_effective_kind(detected: str | None, compat: str, policy: FieldPolicy, kind: str) -> None:
    assert effective_kind(detected, compat, policy) == kind


@pytest.mark.parametrize(("kind", "mode", "policy", "expected"), [
    ("sglang", "on", ids_policy(SGL, "on", {"a": "sglang"}), (True, True, True)),
    ("sglang", "auto", SGL, (False, False, False)),
    ("vllm", "on", VLL, (False, False, True)),
    ("vllm", "auto", VLL, (False, False, True)),
    ("vllm", "off", ids_policy(VLL, "off", {}), (False, False, False)),
    ("other", "auto", MIX, (False, False, False)),
])
async def test_configure(kind: str, mode: str, policy: FieldPolicy, expected: tuple[bool, bool, bool]) -> None:
    endpoint = Endpoint("http://127.0.0.1:9", EndpointCounters(url="", index=0), max_in_flight=1)
    try:
        configure(endpoint, kind, mode, policy)
        assert (endpoint.nonstreaming, endpoint.sglang_details, endpoint.supports_token_ids) == expected
    finally:
        await endpoint.aclose()


@pytest.mark.parametrize(("seed", "tokens"), [(0, 1), (1, 2), (7, 100), (123, 5000)])
def test_simulated_spec_details_add_up(seed: int, tokens: int) -> None:
    spec = spec_details(seed, tokens)
    histogram = spec["spec_correct_drafts_histogram"]
    assert sum((j + 1) * n for j, n in enumerate(histogram)) == tokens
    assert sum(histogram) == spec["spec_verify_ct"]
    assert spec["spec_num_proposed_drafts"] == DRAFT_TOKENS * spec["spec_verify_ct"]
    assert spec["spec_accept_length"] == pytest.approx(tokens / spec["spec_verify_ct"])
    assert 1.0 <= spec["spec_accept_length"] <= DRAFT_TOKENS + 1
    assert spec == spec_details(seed, tokens)  # reproducible
    assert 0 <= cached_tokens(seed, tokens) < max(tokens, 16)


async def test_the_start_up_line_names_what_the_nonstreaming_requests_carry() -> None:
    """The field set logged at start is the streaming one; the non-streaming requests drop stream_options
    (and continuous_usage_stats with it) and add SGLang's fields: the log says so."""
    endpoint = Endpoint("http://127.0.0.1:9", EndpointCounters(url="", index=0), max_in_flight=1)
    try:
        configure(endpoint, "sglang", "on", ids_policy(SGL, "on", {"a": "sglang"}))
        line = describe("on", [endpoint])
        payload = as_nonstreaming({"stream": True, "stream_options": {"include_usage": True,
                                                                      "continuous_usage_stats": True},
                                   "return_token_ids": True}, details=endpoint.sglang_details)
        assert line.startswith("--token-ids on: 1 non-streaming with ids")
        for name, value in payload.items():
            if value is True:
                assert name in line, name
        assert "no stream_options" in line and "stream_options" not in payload
    finally:
        await endpoint.aclose()
