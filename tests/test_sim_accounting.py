"""The simulated server counts what it sends: its counters, its pace and its usage agree token for token.

A real SGLang server's `sglang:generation_tokens_total` is the sum of the usage it reports, and its engine
paces per token it sends. The simulator's replies are written by a tokenizer that splits a script's word
piece into several ids, so the engine must pace and count those ids, not the pieces. Held here on replies
with exact ids (the tiny tokenizer), streaming and not, with and without MTP chunks; the modelled clock
(GET /sim/clock) counts the same tokens.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from simulator.config import SimConfig
from simulator.server import SimServer
from tests.tokenizer_fixture import tiny_tokenizer_dir


def _generation_total(text: str) -> float:
    (value,) = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("sglang:generation_tokens_total")]
    return value


async def _one(client: httpx.AsyncClient, i: int, stream: bool) -> tuple[int, int, list[int]]:
    """(completion_tokens of the usage, the last running count, the reply's ids)."""
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": f"Question {i} about tides."}],
                            "max_tokens": 400}
    if not stream:
        resp = await client.post("/v1/chat/completions", json={**body, "return_token_ids": True})
        data = resp.json()
        usage = data["usage"]["completion_tokens"]
        return usage, usage, data["choices"][0]["response_token_ids"]
    resp = await client.post("/v1/chat/completions", json={
        **body, "stream": True, "return_output_ids_in_sglext": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    events = [orjson.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: {")]
    (ids,) = [e["sglext"]["output_ids"][0] for e in events if "sglext" in e]
    running = [e["usage"]["completion_tokens"] for e in events if e.get("usage") and e["choices"]]
    return events[-1]["usage"]["completion_tokens"], running[-1], ids


@pytest.mark.parametrize("chunk", [1, 3], ids=["plain", "mtp"])
async def test_counters_usage_and_ids_agree_token_for_token(chunk: int) -> None:
    config = SimConfig(port=0, speed=500.0, mean_tokens=60, max_gen_tokens=400, tokens_per_chunk=chunk,
                       random_chunk=chunk > 1, tokenizer=str(tiny_tokenizer_dir()))
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=30.0) as client:
        replies = await asyncio.gather(*(_one(client, i, stream=i % 2 == 0) for i in range(12)))
        metrics = (await client.get("/metrics")).text
        clock = (await client.get("/sim/clock")).json()
    usage = sum(r[0] for r in replies)
    ids = sum(len(r[2]) for r in replies)
    assert all(r[0] == r[1] == len(r[2]) for r in replies)
    assert usage == ids == _generation_total(metrics) == clock["generation_tokens"]
    assert clock["busy_s"] > 0


async def test_the_modelled_clock_counts_steps_at_speed_one() -> None:
    """One lone request of N tokens takes N steps of step_ms*(1 + batch_cost/max_running) on the modelled
    GPU, at any --speed."""
    for speed in (50.0, 400.0):
        config = SimConfig(port=0, speed=speed, mean_tokens=40, max_gen_tokens=400, step_ms=20.0, batch_cost=1.0,
                           max_running=4, prefill_ms_per_1k=0.0)
        async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=30.0) as client:
            data = (await client.post("/v1/chat/completions", json={
                "model": "m", "messages": [{"role": "user", "content": "Tides?"}], "max_tokens": 50})).json()
            clock = (await client.get("/sim/clock")).json()
        steps = data["usage"]["completion_tokens"]
        assert clock["busy_s"] == pytest.approx(steps * 0.020 * 1.25, rel=1e-6)
