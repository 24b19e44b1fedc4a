"""Client CPU per request: streaming (SGLang's default path, no ids) against non-streaming with exact
token ids and SGLang's detail fields (--token-ids on), on the same simulated fleet in the same run.

The simulated servers run as subprocesses (their CPU is not counted) with the tiny test tokenizer, so a
non-streaming answer carries real `token_ids` / `prompt_token_ids` lists for the client to parse. Both
modes send the same prompts through `Endpoint` (the run's own path); client CPU is this process's CPU
time (user + system) over the phase, divided by the requests. Streaming is measured at one token per
chunk (no MTP) and at three (an MTP accept length of about 3).

    python -m bench.nonstream_cost [--streams 256] [--requests 2000] [--mean-tokens 400] [--servers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.report import emit
from client.core.loop import event_loop_factory
from client.core.payload import FieldPolicy, SamplingSettings, build_payload
from client.core.records import Prompt
from client.core.stats import EndpointCounters
from client.wire.complete import as_nonstreaming
from client.wire.endpoint import Endpoint
from launch.sim.fleet import SimFleet, SimServerSpec
from tests.tokenizer_fixture import tiny_tokenizer_dir

MODEL = "Qwen/Qwen3.6-27B"


@dataclass
class Measurement:
    name: str
    requests: int
    tokens: int
    cpu_s: float
    wall_s: float

    @property
    def us_per_request(self) -> float:
        return 1e6 * self.cpu_s / max(1, self.requests)


def _prompt(i: int) -> Prompt:
    messages = [{"role": "user", "content": f"Benchmark prompt {i}: describe item {i % 97} in detail."}]
    return Prompt(id=str(i), messages=messages, tools=None, meta=None, source="bench", line=i)


async def run(name: str, urls: list[str], streams: int, requests: int, max_tokens: int, *,
              nonstreaming: bool) -> Measurement:
    endpoints = [Endpoint(u, EndpointCounters(url=u, index=i), max_in_flight=streams) for i, u in enumerate(urls)]
    settings = SamplingSettings(max_tokens=max_tokens)
    extensions = {"top_k", "min_p", "chat_template_kwargs"} | ({"return_token_ids"} if nonstreaming else set())
    policy = FieldPolicy(frozenset(extensions), "sglang")
    jobs = iter(range(requests))
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        for i in jobs:
            prompt = _prompt(i)
            payload: dict[str, Any] = build_payload(prompt, prompt.messages, settings, model=MODEL,
                                                    return_token_ids=nonstreaming, policy=policy)
            endpoint = endpoints[i % len(endpoints)]
            if nonstreaming:
                completion, _ = await endpoint.complete_chat(orjson.dumps(as_nonstreaming(payload, details=True)),
                                                             600.0)
                assert completion.completion_token_ids
            else:
                completion, _ = await endpoint.stream_chat(orjson.dumps(payload))
            tokens += completion.completion_tokens

    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(streams):
                group.create_task(worker())
    finally:
        for endpoint in endpoints:
            await endpoint.aclose()
    return Measurement(name, requests, tokens, time.process_time() - cpu0, time.perf_counter() - wall0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--mean-tokens", type=int, default=400)
    parser.add_argument("--max-tokens", type=int, default=1200)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--speed", type=float, default=50.0)
    parser.add_argument("--out", type=Path, help="append the markdown table to this file")
    args = parser.parse_args(argv)
    tokenizer = str(tiny_tokenizer_dir())
    results: list[Measurement] = []
    for chunk in (1, 3):
        spec = SimServerSpec(max_running=max(1, args.streams // args.servers), speed=args.speed,
                             extra_args=("--mean-tokens", str(args.mean_tokens), "--tokens-per-chunk", str(chunk),
                                         "--tokenizer", tokenizer, "--log-level", "warning"))
        with SimFleet([spec] * args.servers) as fleet:
            fleet.start()
            modes = [(f"streaming, {chunk} token(s) per chunk, no ids", False)]
            if chunk == 1:
                modes.append(("non-streaming, token ids + spec and cache details", True))
            for name, nonstreaming in modes:
                with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
                    measured = runner.run(run(name, fleet.urls, args.streams, args.requests, args.max_tokens,
                                              nonstreaming=nonstreaming))
                results.append(measured)
                print(f"{name}: {measured.us_per_request:.1f} us/request", file=sys.stderr)
    reference = next(m for m in results if "non-streaming" in m.name)
    lines = [
        f"Client CPU per request: {args.streams} concurrent requests, {args.requests} requests per mode, "
        f"{args.servers} simulated servers, mean {args.mean_tokens} tokens per reply (uvloop).",
        "",
        "| mode | requests | completion tokens | client CPU (s) | wall (s) | CPU per request (us) | vs non-streaming |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in results:
        lines.append(f"| {m.name} | {m.requests:,} | {m.tokens:,} | {m.cpu_s:.2f} | {m.wall_s:.2f} | "
                     f"{m.us_per_request:.0f} | {m.us_per_request / reference.us_per_request:.1f}x |")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
