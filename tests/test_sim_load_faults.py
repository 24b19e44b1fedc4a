"""The simulated server under load and under injected faults, over real sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import httpx
import pytest

from simulator.config import FaultRates, SimConfig
from simulator.server import SimServer

BASE = SimConfig(port=0, speed=200.0, mean_tokens=60, max_gen_tokens=2000)
USER = [{"role": "user", "content": "Tell me about queues."}]


@asynccontextmanager
async def serving(faults: FaultRates | None = None, **overrides: Any
                  ) -> AsyncIterator[tuple[SimServer, httpx.AsyncClient]]:
    config = dataclasses.replace(BASE, faults=faults or FaultRates(), **overrides)
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=10.0) as client:
        yield srv, client


def body(content: str = "Tell me about queues.", **extra: Any) -> dict[str, Any]:
    return {"model": "Qwen/Qwen3.6-27B", "messages": [{"role": "user", "content": content}], **extra}


async def read_stream(client: httpx.AsyncClient, payload: dict[str, Any], got: list[Any]) -> None:
    async with client.stream("POST", "/v1/chat/completions", json=payload) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                data = line[6:]
                got.append(data if data == "[DONE]" else json.loads(data))


async def wait_for_load(client: httpx.AsyncClient, running: int, waiting: int) -> dict[str, Any]:
    async with asyncio.timeout(60):
        while True:
            load = (await client.get("/v1/loads")).json()["loads"][0]
            if (load["num_running_reqs"], load["num_waiting_reqs"]) == (running, waiting):
                return load  # type: ignore[no-any-return]
            await asyncio.sleep(0.02)


async def test_loads_and_metrics_show_running_and_waiting_then_disconnects_free_slots() -> None:
    async with serving(max_running=2, speed=2.0, mean_tokens=5000, max_gen_tokens=20000) as (_, client):
        tasks = [asyncio.create_task(read_stream(client, body(f"question {i}", stream=True), []))
                 for i in range(5)]
        load = await wait_for_load(client, running=2, waiting=3)
        assert load["max_running_requests"] == 2
        assert load["num_used_tokens"] > 0 and load["num_total_tokens"] > load["num_used_tokens"]
        text = (await client.get("/metrics")).text
        assert 'sglang:num_running_reqs{model_name="Qwen/Qwen3.6-27B"' in text
        samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
        running = next(v for k, v in samples.items() if k.startswith("sglang:num_running_reqs"))
        queued = next(v for k, v in samples.items() if k.startswith("sglang:num_queue_reqs"))
        assert (float(running), float(queued)) == (2.0, 3.0)
        assert any(k.startswith("sglang:generation_tokens_total") for k in samples)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await wait_for_load(client, running=0, waiting=0)


async def test_dp_ranks_each_report_their_share() -> None:
    async with serving(max_running=1, dp_size=2, speed=2.0, mean_tokens=5000,
                       max_gen_tokens=20000) as (_, client):
        tasks = [asyncio.create_task(read_stream(client, body(f"q{i}", stream=True), [])) for i in range(4)]
        async with asyncio.timeout(60):
            while True:
                loads = (await client.get("/v1/loads")).json()["loads"]
                if [(x["num_running_reqs"], x["num_waiting_reqs"]) for x in loads] == [(1, 1), (1, 1)]:
                    break
                await asyncio.sleep(0.02)
        one = (await client.get("/v1/loads", params={"dp_rank": 1})).json()["loads"]
        assert [x["dp_rank"] for x in one] == [1]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_fail_500_and_429() -> None:
    async with serving(FaultRates(fail_500=1.0)) as (_, client):
        r500 = await client.post("/v1/chat/completions", json=body(stream=True))
    async with serving(FaultRates(fail_429=1.0, retry_after=7)) as (_, client):
        r429 = await client.post("/v1/chat/completions", json=body(stream=True))
    assert r500.status_code == 500 and r500.json()["code"] == 500
    assert r429.status_code == 429 and r429.headers["retry-after"] == "7"


async def test_faults_are_not_tied_to_content_so_retries_succeed() -> None:
    statuses = []
    texts = set()
    async with serving(FaultRates(fail_500=0.5)) as (_, client):
        for _ in range(20):
            resp = await client.post("/v1/chat/completions", json=body(max_tokens=20))
            statuses.append(resp.status_code)
            if resp.status_code == 200:
                texts.add(resp.json()["choices"][0]["message"]["reasoning_content"])
    assert 500 in statuses and 200 in statuses
    assert len(texts) == 1


async def test_drop_stream_aborts_mid_body() -> None:
    got: list[Any] = []
    async with serving(FaultRates(drop_stream=1.0)) as (_, client):
        with pytest.raises(httpx.RemoteProtocolError):
            await read_stream(client, body(stream=True), got)
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/v1/chat/completions", json=body())
        await wait_for_load(client, 0, 0)
    assert got and got[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "[DONE]" not in got


async def test_stall_stream_goes_silent_and_disconnect_frees_slot() -> None:
    got: list[Any] = []
    async with serving(FaultRates(stall_stream=1.0, stall_seconds=60), mean_tokens=400) as (_, client):
        short = httpx.Timeout(10.0, read=0.3)
        with pytest.raises(httpx.ReadTimeout):
            async with client.stream("POST", "/v1/chat/completions", json=body(stream=True),
                                     timeout=short) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        got.append(json.loads(line[6:]))
        await wait_for_load(client, 0, 0)
    assert got and all(e["choices"][0]["finish_reason"] is None for e in got)


async def test_error_event_ends_stream() -> None:
    got: list[Any] = []
    async with serving(FaultRates(error_event=1.0)) as (_, client):
        await read_stream(client, body(stream=True), got)
        plain = await client.post("/v1/chat/completions", json=body())
    assert got[-1] == "[DONE]"
    err = got[-2]["error"]
    assert err["code"] == 500 and err["message"] and err["type"]
    assert all("choices" not in e or e["choices"][0]["finish_reason"] is None for e in got[:-2])
    assert plain.status_code == 500


async def test_a_thousand_concurrent_streams() -> None:
    config = dataclasses.replace(BASE, max_running=256, dp_size=4, mean_tokens=8, max_gen_tokens=40)
    connector = aiohttp.TCPConnector(limit=0)
    done = 0

    async def one(session: aiohttp.ClientSession, url: str, i: int) -> None:
        nonlocal done
        payload = body(f"prompt {i}", stream=True, chat_template_kwargs={"enable_thinking": False})
        async with session.post(url + "/v1/chat/completions", json=payload) as resp:
            raw = await resp.read()
        assert raw.endswith(b"data: [DONE]\n\n")
        done += 1

    async with SimServer(config) as srv, aiohttp.ClientSession(connector=connector) as session:
        async with asyncio.timeout(60):
            await asyncio.gather(*(one(session, srv.url, i) for i in range(1000)))
        assert sum(r.stats.finished_requests for r in srv.state.engine.ranks) == 1000
    assert done == 1000
