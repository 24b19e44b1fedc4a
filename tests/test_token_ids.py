"""The pure parts of --token-ids: SGLang's sglext chunk in a stream, the per-kind choice of how ids are
asked for, and the simulated MTP figures. Table-driven."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from client.core.errors import ConfigError
from client.core.payload import FieldPolicy
from client.fleet.kinds import SGLANG, kind_of
from client.fleet.servers.sglext import SGLANG_REQUEST_FIELDS, spec_from
from client.fleet.token_ids import describe, effective_kind, id_request, ids_policy
from client.wire.sse import StreamParser
from simulator.tokens import DRAFT_TOKENS, cached_tokens, spec_details

SPEC = {"spec_accept_rate": 0.5, "spec_accept_length": 1.5, "spec_verify_ct": 2, "spec_num_correct_drafts": 1,
        "spec_num_proposed_drafts": 6, "spec_correct_drafts_histogram": [1, 1, 0, 0], "spec_cap_length": 0.0}
SPEC_RECORDED = {"accept_length": 1.5, "accept_rate": 0.5, "verify_ct": 2, "draft_tokens": 6, "accepted_tokens": 1,
                 "accepted_histogram": [1, 1, 0, 0]}


def _chunk(**fields: Any) -> bytes:
    return b"data: " + orjson.dumps({"id": "x", "object": "chat.completion.chunk", "model": "m", **fields}) + b"\n\n"


def _sglang_stream(sglext: dict[str, Any] | None, *, framed: bool = False,
                   usage: dict[str, Any] | None = None) -> bytes:
    """An SGLang 0.5.23 stream as serving_chat.py writes it: deltas, the finish chunk, the sglext chunk (with
    `x-sglext-ids-framed: 1` the ids as a named event of their own), the usage chunk, [DONE]."""
    parts = [_chunk(choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]),
             _chunk(choices=[{"index": 0, "delta": {"content": "Hi."}, "finish_reason": None}]),
             _chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])]
    if sglext is not None and framed:
        ids = {key: sglext[key] for key in ("input_ids", "output_ids") if key in sglext}
        rest = {key: value for key, value in sglext.items() if key not in ids}
        if rest:
            parts.append(_chunk(choices=[], sglext=rest))
        parts.append(b"event: sglext_ids\n" + _chunk(choices=[], sglext=ids))
    elif sglext is not None:
        parts.append(_chunk(choices=[], usage=None, sglext=sglext))
    parts.append(_chunk(choices=[], usage=usage or {"prompt_tokens": 2, "completion_tokens": 3}))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


@pytest.mark.parametrize(("sglext", "framed", "usage", "expected"), [
    ({"input_ids": [1, 2], "output_ids": [[5, 6, 7]], "spec_tokens_details": SPEC,
      "cached_tokens_details": {"device": 1, "host": 0}}, False, None,
     {"prompt": [1, 2], "completion": [5, 6, 7], "cached": 1, "spec": SPEC_RECORDED}),
    ({"input_ids": [1, 2], "output_ids": [[5, 6, 7]], "spec_tokens_details": SPEC}, True, None,
     {"prompt": [1, 2], "completion": [5, 6, 7], "cached": None, "spec": SPEC_RECORDED}),
    # The server's own cache report wins over the tiers' sum.
    ({"output_ids": [[5]], "cached_tokens_details": {"device": 4, "host": 2, "storage": 1}}, False,
     {"prompt_tokens": 9, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 3}},
     {"prompt": None, "completion": [5], "cached": 3, "spec": None}),
    # Only the cache tiers came (no --enable-cache-report): their sum is the cached count.
    ({"cached_tokens_details": {"device": 4, "host": 2, "storage": 1}}, False, None,
     {"prompt": None, "completion": None, "cached": 7, "spec": None}),
    # A server that gives no ids (no sglext at all): the completion is still whole, without them.
    (None, False, None, {"prompt": None, "completion": None, "cached": None, "spec": None}),
    # Wrong shapes are left out, never an exception.
    ({"input_ids": "1,2", "output_ids": [5, 6]}, False, None,
     {"prompt": None, "completion": None, "cached": None, "spec": None}),
])
@pytest.mark.parametrize("split", [None, 7])
def test_sglext_ids_in_a_stream(sglext: dict[str, Any] | None, framed: bool, usage: dict[str, Any] | None,
                                expected: dict[str, Any], split: int | None) -> None:
    data = _sglang_stream(sglext, framed=framed, usage=usage)
    parser = StreamParser(dialect=SGLANG.reply)
    for start in range(0, len(data), split or len(data)):
        parser.feed(data[start:start + (split or len(data))])
    completion = parser.completion(ended_cleanly=True)
    assert completion.content == "Hi." and completion.finish_reason == "stop"
    assert completion.prompt_token_ids == expected["prompt"]
    assert completion.completion_token_ids == expected["completion"]
    details = completion.usage.get("prompt_tokens_details")
    assert (details or {}).get("cached_tokens") == expected["cached"]
    assert completion.spec == expected["spec"]


@pytest.mark.parametrize(("details", "spec"), [
    (None, None),
    ({}, None),
    ([{"spec_accept_length": 2.0, "spec_verify_ct": 3}], {"accept_length": 2.0, "verify_ct": 3}),  # n > 1: a list
    ({"spec_accept_length": True, "spec_verify_ct": "3"}, None),  # wrong types are left out
])
def test_spec_from(details: Any, spec: Any) -> None:
    assert spec_from(details) == spec


SGL = FieldPolicy(frozenset({"top_k", "chat_template_kwargs", "return_token_ids"}), "sglang")
VLL = FieldPolicy(frozenset({"top_k", "return_token_ids"}), "vllm")
MIX = FieldPolicy(frozenset({"top_k"}), "mixed")


@pytest.mark.parametrize(("policy", "mode", "kinds", "has_field"), [
    (SGL, "auto", {"a": "sglang"}, True),
    (SGL, "on", {"a": "sglang"}, True),
    (SGL, "off", {"a": "sglang"}, False),
    (VLL, "auto", {"a": "vllm"}, True),
    (VLL, "off", {"a": "vllm"}, False),
    (MIX, "on", {"a": "sglang", "b": "vllm"}, True),
])
def test_ids_policy(policy: FieldPolicy, mode: str, kinds: dict[str, str], has_field: bool) -> None:
    assert ids_policy(policy, mode, kinds).allows("return_token_ids") is has_field


@pytest.mark.parametrize(("policy", "kinds", "words"), [
    (FieldPolicy(frozenset(), "openai"), {"http://a": "openai"}, r"http://a is neither SGLang nor vLLM"),
    (FieldPolicy(frozenset(), "openai"), {"http://a": "other"}, r"http://a is neither SGLang nor vLLM"),  # old name
    (FieldPolicy(frozenset(), "openai"), {"http://a": "sglang"}, r"--compat openai sends standard"),
    # --compat auto with no server ready yet: the field set is standard, but nobody asked for --compat openai.
    (FieldPolicy(frozenset(), "openai"), {}, r"no server was ready at start"),
])
def test_ids_policy_refuses_on_without_a_way(policy: FieldPolicy, kinds: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        ids_policy(policy, "on", kinds)


@pytest.mark.parametrize(("detected", "compat", "policy", "kind"), [
    ("sglang", "auto", SGL, "sglang"),
    ("openai", "sglang", SGL, "sglang"),  # --compat is the user's word
    (None, "auto", VLL, "vllm"),  # down at start: the run's kind
    (None, "auto", MIX, "openai"),
    ("other", "auto", MIX, "openai"),  # the plain kind's older name, one name out
])
def test_effective_kind(detected: str | None, compat: str, policy: FieldPolicy, kind: str) -> None:
    assert effective_kind(detected, compat, policy).name == kind


@pytest.mark.parametrize(("kind", "mode", "policy", "expected"), [
    ("sglang", "on", ids_policy(SGL, "on", {"a": "sglang"}), SGLANG_REQUEST_FIELDS),
    ("sglang", "auto", SGL, SGLANG_REQUEST_FIELDS),
    ("sglang", "off", ids_policy(SGL, "off", {}), {}),
    ("vllm", "on", VLL, {"return_token_ids": True}),
    ("vllm", "auto", VLL, {"return_token_ids": True}),
    ("vllm", "off", ids_policy(VLL, "off", {}), {}),
    ("openai", "auto", MIX, {}),
    # A mixed fleet's policy allows ids where every kind gives them; each server asks in its own words.
    ("sglang", "on", ids_policy(MIX, "on", {"a": "sglang", "b": "vllm"}), SGLANG_REQUEST_FIELDS),
])
def test_id_request(kind: str, mode: str, policy: FieldPolicy, expected: dict[str, bool]) -> None:
    request = id_request("http://127.0.0.1:9", kind_of(kind), mode, policy)
    assert request.fields == expected
    assert request.required == (mode == "on")


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


def test_the_start_up_line_names_the_id_fields_each_server_gets() -> None:
    requests = [id_request(f"http://127.0.0.1:{port}", kind_of(kind), "auto", VLL)
                for port, kind in ((9, "sglang"), (10, "vllm"), (11, "openai"))]
    line = describe("auto", requests)
    assert line == ("--token-ids auto: 1 endpoint(s) asked for ids (" + ", ".join(SGLANG_REQUEST_FIELDS) + "); "
                    "1 endpoint(s) asked for ids (return_token_ids); 1 not asked")
