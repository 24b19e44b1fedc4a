"""Continue, never regenerate (client/engine/continuation.py, client/wire/native.py) on the simulated SGLang
server: a reply cut after k exact ids and continued on `/generate` equals the reply made in one go, id for
id, with the budget left and each attempt's share recorded; the wire shape of the request; refusals."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from client.core.errors import AttemptError, ProtocolError
from client.core.payload import SamplingSettings
from client.engine.continuation import Partial, continue_reply
from client.wire.endpoint import Endpoint
from client.wire.native import parse_generated, sampling_params
from simulator.config import SimConfig
from simulator.server import SimServer
from tests.tokenizer_fixture import tiny_tokenizer_dir

MESSAGES = [{"role": "user", "content": "Name three rivers and say where each meets the sea."}]
MAX_TOKENS = 300
GREEDY = SamplingSettings(max_tokens=MAX_TOKENS, temperature=0.0, top_p=1.0, top_k=1, min_p=0.0, seed=7)


@asynccontextmanager
async def sim(**settings: Any) -> AsyncIterator[str]:
    config = SimConfig(**{"port": 0, "speed": 500.0, "mean_tokens": 60, "max_gen_tokens": 400,
                          "tokenizer": str(tiny_tokenizer_dir()), **settings})
    async with SimServer(config) as srv:
        yield srv.url


async def whole_reply(url: str, max_tokens: int = MAX_TOKENS) -> tuple[list[int], list[int], str]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        r = await client.post("/v1/chat/completions", json={
            "model": "default", "messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0,
            "return_token_ids": True})
    choice = r.json()["choices"][0]
    return choice["prompt_token_ids"], choice["response_token_ids"], choice["finish_reason"]


async def test_a_reply_cut_and_continued_equals_the_whole() -> None:
    async with sim() as url:
        prompt, reply, finish = await whole_reply(url)
        assert finish == "stop" and len(reply) > 8
        endpoint = Endpoint(url, max_in_flight=1)
        try:
            for k in (1, 3, len(reply) // 2, len(reply) - 1):
                stitched = await continue_reply(endpoint, Partial(prompt, reply[:k], attempt=1), GREEDY,
                                                MAX_TOKENS, attempt=2)
                assert stitched.completion_ids == reply, k
                assert stitched.prompt_ids == prompt
                assert stitched.finish_reason == "stop" and stitched.matched == reply[-1]
                assert stitched.continued == [{"attempt": 1, "tokens": k}, {"attempt": 2, "tokens": len(reply) - k}]
            # Continued twice: the second break came after more ids; every attempt keeps its share.
            first = Partial(prompt, reply[:2], attempt=1)
            second = Partial(prompt, reply[:5], attempt=3, parts=tuple(first.shares))
            stitched = await continue_reply(endpoint, second, GREEDY, MAX_TOKENS, attempt=4)
            assert stitched.completion_ids == reply
            assert stitched.continued == [{"attempt": 1, "tokens": 2}, {"attempt": 3, "tokens": 3},
                                          {"attempt": 4, "tokens": len(reply) - 5}]
        finally:
            await endpoint.aclose()


async def test_the_continuation_asks_only_for_the_budget_left() -> None:
    async with sim() as url:
        cap = 12
        prompt, reply, finish = await whole_reply(url, max_tokens=cap)
        assert finish == "length" and len(reply) == cap
        endpoint = Endpoint(url, max_in_flight=1)
        try:
            stitched = await continue_reply(endpoint, Partial(prompt, reply[:4], attempt=1), GREEDY, cap, attempt=2)
            assert stitched.completion_ids == reply and stitched.finish_reason == "length"
            # A partial that used the whole budget is the reply, cut at its cap: nothing is asked for.
            done = await continue_reply(endpoint, Partial(prompt, reply, attempt=1), GREEDY, cap, attempt=2)
            assert done.completion_ids == reply and done.continued == [{"attempt": 1, "tokens": cap}]
        finally:
            await endpoint.aclose()


async def test_a_server_without_generate_fails_the_attempt() -> None:
    async with sim(tokenizer=None) as url:
        endpoint = Endpoint(url, max_in_flight=1)
        try:
            with pytest.raises(AttemptError):
                await continue_reply(endpoint, Partial([1, 2, 3], [4], attempt=1), GREEDY, 10, attempt=2)
        finally:
            await endpoint.aclose()


def test_sampling_params_use_sglang_names() -> None:
    assert sampling_params(GREEDY, 17) == {"max_new_tokens": 17, "temperature": 0.0, "top_p": 1.0,
                                           "presence_penalty": 0.0, "top_k": 1, "min_p": 0.0, "sampling_seed": 7}
    plain = sampling_params(SamplingSettings(top_k=None, min_p=None), 5)
    assert "top_k" not in plain and "min_p" not in plain and "sampling_seed" not in plain


@pytest.mark.parametrize("raw", [b"not json", b"{}", b'{"output_ids": [1], "meta_info": {}}',
                                 b'{"output_ids": [1], "meta_info": {"finish_reason": {"type": "abort"}}}',
                                 b'{"output_ids": ["x"], "meta_info": {"finish_reason": {"type": "stop"}}}'])
def test_a_malformed_answer_is_a_protocol_error(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_generated(raw, "http://x")


def test_a_well_formed_answer_is_read() -> None:
    raw = orjson.dumps({"text": "ab", "output_ids": [5, 6], "meta_info": {
        "finish_reason": {"type": "stop", "matched": 6}, "prompt_tokens": 3, "completion_tokens": 2}})
    got = parse_generated(raw, "http://x")
    assert (got.output_ids, got.text, got.finish_reason, got.matched, got.prompt_tokens) == ([5, 6], "ab", "stop",
                                                                                             6, 3)
