"""The simulated server's native `/generate` (simulator/generate.py): SGLang's shapes, streamed and whole,
and continuation: prompt ids plus the first k ids of a reply get exactly the rest of that reply."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from simulator.config import SimConfig
from simulator.server import SimServer
from tests.tokenizer_fixture import tiny_tokenizer_dir

pytestmark = pytest.mark.asyncio

MESSAGES = [{"role": "user", "content": "Tell me about the sea, then the sky."}]


@asynccontextmanager
async def serving(**settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    config = SimConfig(**{"port": 0, "speed": 500.0, "mean_tokens": 40, "max_gen_tokens": 400,
                          "tokenizer": str(tiny_tokenizer_dir()), **settings})
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=30.0) as client:
        yield client


async def chat_ids(client: httpx.AsyncClient, max_tokens: int = 300) -> tuple[list[int], list[int], str]:
    r = await client.post("/v1/chat/completions", json={
        "model": "default", "messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0,
        "return_token_ids": True, "return_prompt_token_ids": True})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["prompt_token_ids"], choice["response_token_ids"], choice["finish_reason"]


async def generate(client: httpx.AsyncClient, ids: list[int], max_new: int, *,
                   stream: bool = False) -> dict[str, Any]:
    body = {"input_ids": ids, "stream": stream,
            "sampling_params": {"temperature": 0, "max_new_tokens": max_new, "top_p": 1.0, "top_k": 1}}
    r = await client.post("/generate", json=body)
    assert r.status_code == 200, r.text
    if not stream:
        out: dict[str, Any] = r.json()
        return out
    events = [line[6:] for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    for chunk in chunks[:-1]:
        assert chunk["meta_info"]["finish_reason"] is None
    # SGLang's default streams the ids and text so far, not the new ones.
    for a, b in itertools.pairwise(chunks):
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
    last: dict[str, Any] = chunks[-1]
    return last


async def test_generate_answers_in_sglang_shape() -> None:
    async with serving() as client:
        prompt, _, _ = await chat_ids(client)
        out = await generate(client, prompt, 8)
        assert set(out) == {"text", "output_ids", "meta_info"}
        meta = out["meta_info"]
        assert meta["prompt_tokens"] == len(prompt)
        assert meta["completion_tokens"] == len(out["output_ids"])
        assert meta["finish_reason"]["type"] in ("stop", "length")
        assert isinstance(out["text"], str)
        r = await client.post("/generate", json={"sampling_params": {}})
        assert r.status_code == 400 and "error" in r.json()


@pytest.mark.parametrize("stream", [False, True])
async def test_continuing_a_chat_reply_gives_its_rest(stream: bool) -> None:
    async with serving() as client:
        prompt, reply, finish = await chat_ids(client)
        assert len(reply) > 4, "the scripted reply is long enough to cut"
        for k in (0, 1, len(reply) // 2, len(reply) - 1):
            out = await generate(client, prompt + reply[:k], 300 - k, stream=stream)
            assert reply[:k] + out["output_ids"] == reply, k
            expected = "stop" if finish in ("stop", "tool_calls") else "length"
            assert out["meta_info"]["finish_reason"]["type"] == expected


async def test_an_unknown_context_continues_consistently() -> None:
    async with serving() as client:
        context = list(range(10, 40))
        whole = (await generate(client, context, 60))["output_ids"]
        assert whole
        for k in (1, len(whole) // 2):
            rest = (await generate(client, context + whole[:k], 60 - k))["output_ids"]
            assert whole[:k] + rest == whole
    # The same on a fresh server that never saw it: a function of the ids and the seed.
    async with serving() as client:
        assert (await generate(client, context, 60))["output_ids"] == whole


async def test_max_new_tokens_and_stop_token_ids_cut_the_reply() -> None:
    async with serving() as client:
        prompt, reply, _ = await chat_ids(client)
        out = await generate(client, prompt, 3)
        assert out["output_ids"] == reply[:3]
        assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
        stop = reply[2]
        body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 50, "stop_token_ids": [stop]}}
        cut = (await client.post("/generate", json=body)).json()
        assert cut["output_ids"][-1] == stop
        assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}


async def test_drop_stream_cuts_a_generate_stream_after_a_prefix_of_its_ids() -> None:
    from simulator.config import FaultRates

    prompt = list(range(10, 40))
    async with serving() as plain:
        whole = (await generate(plain, prompt, 300))["output_ids"]
    async with serving(faults=FaultRates(drop_stream=1.0)) as client:
        body = {"input_ids": prompt, "stream": True,
                "sampling_params": {"temperature": 0, "max_new_tokens": 300, "top_p": 1.0, "top_k": 1}}
        held: list[int] = []
        with pytest.raises(httpx.TransportError):
            async with client.stream("POST", "/generate", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        held = orjson.loads(line[6:])["output_ids"]
        # The reply a fault-free server gives for the same ids, cut part of the way.
        assert 0 < len(held) < len(whole) and held == whole[: len(held)]
        with pytest.raises(httpx.TransportError):
            await client.post("/generate", json={**body, "stream": False})
