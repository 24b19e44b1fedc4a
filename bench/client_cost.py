"""Client CPU time per streamed chunk at high concurrency, ours against two baselines in the same run.

Starts a simulated fleet (subprocesses; their CPU is not counted), then streams the same workload three
times with N concurrent streams: (a) the openai SDK's AsyncOpenAI streaming loop, (b) a plain httpx
(default transport) + json loop, (c) our Endpoint.stream_chat (an asyncio Protocol whose HTTP is parsed by
httptools, feeding a byte-level SSE parser that uses orjson). Client CPU is this process's CPU time
(user + system) across the streaming phase; chunks are the SSE events received.

    python -m bench.client_cost [--streams 1000] [--requests 3000] [--mean-tokens 100] [--servers 4]
    python -m bench.client_cost --clients ours-usage-at-end,ours   # the cost of continuous_usage_stats
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import httpx2
import openai
import orjson

from bench.report import emit
from client.core.loop import event_loop_factory
from client.core.payload import FieldPolicy, SamplingSettings, build_payload
from client.core.records import Prompt
from client.wire.endpoint import Endpoint
from simulator.fleet import SimFleet, SimServerSpec

MODEL = "Qwen/Qwen3.6-27B"


@dataclass
class Measurement:
    name: str
    chunks: int
    cpu_s: float
    wall_s: float

    @property
    def us_per_chunk(self) -> float:
        return 1e6 * self.cpu_s / max(1, self.chunks)


def _messages(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Benchmark prompt {i}: describe item {i % 97} in detail."}]


async def _pool(streams: int, requests: int, one: Callable[[int], Awaitable[int]]) -> int:
    """A fixed pool of `streams` workers over `requests` jobs; returns the chunks received."""
    next_job = iter(range(requests))
    total = 0

    async def worker() -> None:
        nonlocal total
        for job in next_job:
            received = await one(job)  # not `total += await ...`: that reads `total` before awaiting
            total += received

    async with asyncio.TaskGroup() as group:
        for _ in range(streams):
            group.create_task(worker())
    return total


async def measure(name: str, streams: int, requests: int, one: Callable[[int], Awaitable[int]]) -> Measurement:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    chunks = await _pool(streams, requests, one)
    return Measurement(name, chunks, time.process_time() - cpu0, time.perf_counter() - wall0)


async def run_openai(urls: list[str], streams: int, requests: int, max_tokens: int) -> Measurement:
    clients = [openai.AsyncOpenAI(base_url=f"{u}/v1", api_key="none", max_retries=0, timeout=600,
                                  http_client=httpx2.AsyncClient(limits=httpx2.Limits(max_connections=streams)))
               for u in urls]

    async def one(i: int) -> int:
        stream = await clients[i % len(clients)].chat.completions.create(
            model=MODEL, messages=_messages(i), stream=True, max_tokens=max_tokens,  # type: ignore[arg-type]
            stream_options={"include_usage": True}, extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        count = 0
        async for _chunk in stream:
            count += 1
        return count

    try:
        return await measure("openai SDK (AsyncOpenAI stream)", streams, requests, one)
    finally:
        for c in clients:
            await c.close()


async def run_httpx(urls: list[str], streams: int, requests: int, max_tokens: int) -> Measurement:
    clients = [httpx.AsyncClient(base_url=u, timeout=600, limits=httpx.Limits(max_connections=streams)) for u in urls]

    async def one(i: int) -> int:
        body = {"model": MODEL, "messages": _messages(i), "stream": True, "max_tokens": max_tokens,
                "stream_options": {"include_usage": True}}
        count = 0
        async with clients[i % len(clients)].stream("POST", "/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    json.loads(line[6:])
                    count += 1
        return count

    try:
        return await measure("httpx default transport + json", streams, requests, one)
    finally:
        for c in clients:
            await c.aclose()


async def run_ours(urls: list[str], streams: int, requests: int, max_tokens: int, *,
                   live_usage: bool = True) -> Measurement:
    """`live_usage`: ask for stream_options.continuous_usage_stats (running usage on every chunk), as the
    run does on SGLang and vLLM."""
    endpoints = [Endpoint(u, index=i, max_in_flight=streams) for i, u in enumerate(urls)]
    settings = SamplingSettings(max_tokens=max_tokens)
    everything = FieldPolicy.everything()
    policy = everything if live_usage else FieldPolicy(everything.extensions - {"continuous_usage_stats"})

    async def one(i: int) -> int:
        prompt = Prompt(id=str(i), messages=_messages(i), tools=None, meta=None, source="bench", line=i)
        payload = orjson.dumps(build_payload(prompt, prompt.messages, settings, model=MODEL, policy=policy))
        # as the run sends it: the stream bound and the loop stop (on by default) watch every chunk
        await endpoints[i % len(endpoints)].stream_chat(payload, max_tokens=max_tokens, stop_loops=True)
        return 0

    try:
        usage = "running usage per chunk" if live_usage else "usage at the end only"
        measured = await measure(f"regen-swarm (Protocol transport, orjson SSE; {usage})", streams, requests, one)
        measured.chunks = sum(e.wire.chunks for e in endpoints)
        reads = sum(e.wire.reads for e in endpoints)
        print(f"ours: {measured.chunks / max(1, reads):.2f} SSE events per transport read", file=sys.stderr)
        return measured
    finally:
        for e in endpoints:
            await e.aclose()


async def run_aiohttp_floor(urls: list[str], streams: int, requests: int, max_tokens: int) -> Measurement:
    """A floor, not a client: aiohttp reading the bytes and counting events, no parsing at all."""
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=streams))

    async def one(i: int) -> int:
        body = {"model": MODEL, "messages": _messages(i), "stream": True, "max_tokens": max_tokens,
                "stream_options": {"include_usage": True}}
        count = 0
        async with session.post(f"{urls[i % len(urls)]}/v1/chat/completions", json=body) as response:
            async for data in response.content.iter_any():
                count += data.count(b"data: {")
        return count

    try:
        return await measure("floor: aiohttp reading bytes, no parsing", streams, requests, one)
    finally:
        await session.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--mean-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--speed", type=float, default=50.0)
    parser.add_argument("--clients", default="openai,httpx,ours-asyncio,ours",
                        help="which clients to run, in order; the last is the reference of the ratios")
    parser.add_argument("--out", type=Path, help="append the markdown table to this file")
    args = parser.parse_args(argv)
    # docs/benchmarks.md's figures were measured on servers without a tokenizer (a token per word piece).
    spec = SimServerSpec(max_running=max(1, args.streams // args.servers), speed=args.speed,
                         extra_args=("--mean-tokens", str(args.mean_tokens), "--tokens-per-chunk", "1",
                                     "--log-level", "warning", "--tokenizer", "none"))
    with SimFleet([spec] * args.servers) as fleet:
        fleet.start()
        results = []
        runners = {"openai": (run_openai, None), "httpx": (run_httpx, None), "ours-asyncio": (run_ours, None),
                   "floor": (run_aiohttp_floor, event_loop_factory()),
                   "ours-usage-at-end": (partial(run_ours, live_usage=False), event_loop_factory()),
                   "ours": (run_ours, event_loop_factory())}
        for name in args.clients.split(","):
            runner, factory = runners[name]
            with asyncio.Runner(loop_factory=factory) as loop_runner:
                measured = loop_runner.run(runner(fleet.urls, args.streams, args.requests, args.max_tokens))
            if name.startswith("ours"):
                measured.name += ", uvloop" if factory is not None else ", asyncio loop"
            results.append(measured)
            print(f"{results[-1].name}: {results[-1].chunks} chunks, {results[-1].us_per_chunk:.1f} us/chunk",
                  file=sys.stderr)
    ours = results[-1]
    lines = [
        f"Client CPU per streamed chunk: {args.streams} concurrent streams, {args.requests} requests, "
        f"{args.servers} simulated servers, one token per chunk.",
        "",
        "| client | chunks | client CPU (s) | wall (s) | CPU per chunk (us) | vs ours |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in results:
        lines.append(f"| {m.name} | {m.chunks:,} | {m.cpu_s:.2f} | {m.wall_s:.2f} | {m.us_per_chunk:.1f} | "
                     f"{m.us_per_chunk / ours.us_per_chunk:.1f}x |")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
