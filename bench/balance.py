"""Balance quality: makespan over its ideal, our queue-depth policy against round-robin, in one run.

A heterogeneous simulated fleet (decode slots 1:1:2:4) serves the same fixed workload twice, once per
policy, through the real Swarm (source -> dispatch -> stream -> sink). Output lengths follow the
simulator's heavy-tailed distribution, capped by max_tokens as in a real run.

Ideal = the larger of (total generated tokens / the fleet's full-batch token rate) and the longest single
request's own decode time; both come from the simulator's capacity model (step_ms * (1 + batch_cost *
batch / max_running) / speed per decode step of tokens_per_chunk tokens). Prefill is ignored in the
ideal (prompts are short), which only makes the ratios slightly pessimistic.

    python -m bench.balance [--prompts 900] [--speed 4] [--slots 2,2,4,8]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.prompt_file import write_prompts
from bench.report import emit
from client.core.payload import FieldPolicy, RequestShape, SamplingSettings
from client.core.stats import RunStats
from client.engine.session import Fleet
from client.engine.swarm import Swarm
from client.fleet.dispatcher import Dispatcher, DispatchSettings
from client.fleet.startup import check_reachable
from client.local.ledger import read_done_ids
from client.local.sink import ResultSink
from client.local.source import PromptSource
from client.results.reader import ReadReport, iter_records
from client.wire.endpoint import Endpoint
from simulator.fleet import SimFleet, SimServerSpec

MODEL = "Qwen/Qwen3.6-27B"
STEP_MS, BATCH_COST = 20.0, 1.0  # the simulator's defaults


class RoundRobin(Dispatcher):
    """The baseline: each request to the next endpoint in turn, whatever its load."""

    def __init__(self, endpoints: list[Endpoint]) -> None:
        super().__init__(endpoints)
        self._turn = itertools.cycle(range(len(endpoints)))

    async def acquire(self, avoid: int | None = None, prefer: int | None = None) -> Endpoint:
        endpoint = self.endpoints[next(self._turn)]
        self._tracked[endpoint.index].in_flight += 1
        return endpoint


@dataclass
class Outcome:
    policy: str
    makespan_s: float
    tokens: int
    longest_tokens: int
    per_endpoint: list[int]


async def run_policy(policy: str, urls: list[str], prompts: Path, out: Path, max_tokens: int) -> Outcome:
    ResultSink.prepare(out)
    endpoints = [Endpoint(u, index=i, max_in_flight=250, idle_timeout=600) for i, u in enumerate(urls)]
    stats = RunStats()
    stats.track(len(endpoints))
    try:
        found = await check_reachable(endpoints, 10.0)
        dispatcher = RoundRobin(endpoints) if policy == "round-robin" else Dispatcher(endpoints, DispatchSettings())
        for endpoint, readiness in zip(endpoints, found, strict=True):
            dispatcher.starting(endpoint, readiness.ready, readiness.reason)
        done, _ = read_done_ids(out / "segments")
        sink = ResultSink(out, run_id=policy)
        shape = RequestShape(MODEL, SamplingSettings(max_tokens=max_tokens), FieldPolicy.everything())
        swarm = Swarm(Fleet(endpoints, dispatcher, shape), PromptSource([prompts], done), sink, stats)
        started = time.monotonic()
        await swarm.run()
        makespan = time.monotonic() - started
        sink.close()
    finally:
        for e in endpoints:
            await e.aclose()
    report = ReadReport()
    records = [record for _, record in iter_records(str(out), report)]
    if report.corrupt or report.torn_tails:
        raise SystemExit(f"{out}: {report.corrupt + report.torn_tails} result lines are not records: {report.examples}")
    tokens = [r["usage"]["completion_tokens"] for r in records]
    return Outcome(policy, makespan, sum(tokens), max(tokens), [e.done for e in stats.endpoints])


def ideal_seconds(tokens: int, longest: int, slots: list[int], speed: float, per_chunk: int) -> float:
    full_step_s = STEP_MS * (1 + BATCH_COST) / speed / 1000
    fleet_rate = sum(s * per_chunk / full_step_s for s in slots)
    lone_step_s = STEP_MS * (1 + BATCH_COST / max(slots)) / speed / 1000
    return max(tokens / fleet_rate, (longest / per_chunk) * lone_step_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=900)
    parser.add_argument("--speed", type=float, default=4.0)
    parser.add_argument("--slots", default="2,2,4,8", help="decode slots per server (default 1:1:2:4)")
    parser.add_argument("--mean-tokens", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=1500)
    parser.add_argument("--tokens-per-chunk", type=int, default=4)
    parser.add_argument("--out", type=Path, help="append the markdown table to this file")
    args = parser.parse_args(argv)
    slots = [int(s) for s in args.slots.split(",")]
    # docs/benchmarks.md's figures were measured on servers without a tokenizer (a token per word piece).
    extra = ("--mean-tokens", str(args.mean_tokens), "--tokens-per-chunk", str(args.tokens_per_chunk),
             "--log-level", "warning", "--tokenizer", "none")
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp, SimFleet(
            [SimServerSpec(max_running=s, speed=args.speed, extra_args=extra) for s in slots]) as fleet:
        fleet.start()
        prompts = write_prompts(Path(tmp) / "prompts.jsonl", args.prompts)
        for policy in ("round-robin", "queue-depth (ours)"):
            outcome = asyncio.run(run_policy(policy, fleet.urls, prompts, Path(tmp) / policy, args.max_tokens))
            outcomes.append(outcome)
            print(f"{policy}: makespan {outcome.makespan_s:.1f}s, per endpoint {outcome.per_endpoint}",
                  file=sys.stderr)
    lines = [
        f"Balance quality: {args.prompts} prompts, slots {args.slots}, speed {args.speed}, "
        f"heavy-tailed lengths (mean {args.mean_tokens}, max_tokens {args.max_tokens}), "
        f"{args.tokens_per_chunk} tokens per chunk.",
        "",
        "| policy | requests per endpoint | tokens | makespan (s) | ideal (s) | makespan / ideal |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        ideal = ideal_seconds(o.tokens, o.longest_tokens, slots, args.speed, args.tokens_per_chunk)
        lines.append(f"| {o.policy} | {o.per_endpoint} | {o.tokens:,} | {o.makespan_s:.1f} | {ideal:.1f} | "
                     f"{o.makespan_s / ideal:.3f} |")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
