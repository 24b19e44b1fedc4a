"""How true the run's ETA is over the last 20% of a run: the rule before client.core.eta and after, from the same
snapshots of one run, as ratios predicted / actual remaining time. Used by bench/estimate_vs_actual.py
(`--part eta`); a module of its own so that file stays one thing.

The run is the real `client.run` (its Run: prepare, run, finish) in this process, so a companion can read the
same StatsSnapshot the console reads, four times a second. "Before" is the rule the client had until this
change, computed here from the snapshot's own fields: the tokens still expected (remaining prompts x the
mean so far) less what the requests in flight had streamed (at most their expected share), over the
5-minute token rate. "After" is the snapshot's ETA (client.core.eta). The actual remaining time of a sample
is the time from it to the end of the run (the swarm's return). Samples closer to the end than two sampling
intervals are left out: a ratio over a fraction of a second says more about the sampling than the rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Any

from client.core.stats import StatsSnapshot
from client.run.cli import build_parser, config_from
from client.run.job import Run
from client.run.stop import StopController

EVERY_S = 0.25
LAST_SHARE = 0.2
SOURCES = ("chat", "code", "tools", "multiturn")


def write_prompts(path: Path, count: int) -> Path:
    with path.open("w") as handle:
        for i in range(count):
            source = SOURCES[i % len(SOURCES)]
            message = {"role": "user", "content": f"{source} question {i}: why {i % 89}?"}
            handle.write(json.dumps({"id": f"{source}-{i:06d}", "meta": {"source": source}, "messages": [message]})
                         + "\n")
    return path


def before_rule(snap: StatsSnapshot, requests_rate: float) -> float | None:
    """The ETA rule of client.core.stats before client.core.eta (its `_eta`, on the snapshot's fields)."""
    remaining = snap.remaining
    if remaining is None:
        return None
    if remaining == 0:
        return 0.0
    mean = snap.expected_tokens_per_prompt or (snap.completion_tokens / snap.done if snap.done else None)
    if mean is not None and snap.tokens_per_s_long > 0:
        partial = min(max(0, snap.streamed_tokens - snap.completion_tokens), snap.in_flight * mean)
        return max(0.0, remaining * mean - partial) / snap.tokens_per_s_long
    return remaining / requests_rate if requests_rate > 0 else None


async def _sampled_run(args: list[str]) -> tuple[list[tuple[float, float | None, float | None, int]], float, float]:
    parser = build_parser()
    cfg = config_from(parser, parser.parse_args(args))
    samples: list[tuple[float, float | None, float | None, int]] = []
    done_at: deque[tuple[float, int]] = deque()
    with StopController() as stop:
        async with contextlib.AsyncExitStack() as stack:
            run = Run(cfg, stop)
            prepared = await run.prepare(stack)
            if isinstance(prepared, int):
                raise RuntimeError("the run ended before it started")

            async def sample() -> None:
                while True:
                    await asyncio.sleep(EVERY_S)
                    now = time.monotonic()
                    snap = run.snapshot(prepared)
                    done_at.append((now, snap.done))
                    while done_at and done_at[0][0] < now - 300:
                        done_at.popleft()
                    span = now - done_at[0][0]
                    requests_rate = (snap.done - done_at[0][1]) / span if span > 0 else 0.0
                    samples.append((now, before_rule(snap, requests_rate), snap.eta_s, snap.done))

            started = time.monotonic()
            outcome, sync = await run.run(prepared, probes=[sample])  # a probe on the run's own snapshots
            ended = time.monotonic()
            await run.finish(prepared, outcome, sync)
    return samples, started, ended


def _summary(ratios: list[float]) -> dict[str, Any]:
    if not ratios:
        return {"samples": 0}
    ordered = sorted(ratios)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"samples": len(ratios), "median_ratio": round(statistics.median(ratios), 3), "p10": round(at(0.1), 3),
            "p90": round(at(0.9), 3), "mean_abs_error": round(statistics.fmean(abs(r - 1) for r in ratios), 3),
            "zero_while_work_left": sum(1 for r in ratios if r == 0.0)}


def eta_tail(work: Path, urls: list[str], *, prompts: int, max_tokens: int) -> dict[str, Any]:
    """One run of `prompts` prompts on the fleet at `urls`; the two rules' ratios over its last 20%."""
    data = write_prompts(work / "eta-prompts.jsonl", prompts)
    args = ["--endpoints", ",".join(urls), "--prompts", str(data), "--out", str(work / "eta-run"),
            "--max-tokens", str(max_tokens), "--plain", "--progress-every", "3600"]
    samples, started, ended = asyncio.run(_sampled_run(args))
    tail_from = ended - LAST_SHARE * (ended - started)
    before: list[float] = []
    after: list[float] = []
    unknown = {"before": 0, "after": 0}
    for when, old, new, _ in samples:
        left = ended - when
        if when < tail_from or left < 2 * EVERY_S:
            continue
        for name, value, into in (("before", old, before), ("after", new, after)):
            if value is None:
                unknown[name] += 1
            else:
                into.append(value / left)
    return {"prompts": prompts, "max_tokens": max_tokens, "run_s": round(ended - started, 2),
            "tail_from_s": round(tail_from - started, 2), "sample_every_s": EVERY_S,
            "before": {**_summary(before), "unknown": unknown["before"]},
            "after": {**_summary(after), "unknown": unknown["after"]}}


def print_eta(row: dict[str, Any]) -> None:
    print(f"\nETA over the last 20% of a run ({row['prompts']:,} prompts, max_tokens {row['max_tokens']:,}, "
          f"{row['run_s']:.1f}s; sampled every {row['sample_every_s']}s): predicted / actual remaining time")
    print("| rule | samples | median ratio | p10 | p90 | mean abs error | ETA 0 while work left | unknown |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in ("before", "after"):
        r = row[name]
        if not r.get("samples"):
            print(f"| {name} | 0 | - | - | - | - | - | {r['unknown']} |")
            continue
        print(f"| {name} | {r['samples']} | {r['median_ratio']:.2f} | {r['p10']:.2f} | {r['p90']:.2f} "
              f"| {r['mean_abs_error']:.2f} | {r['zero_while_work_left']} | {r['unknown']} |")
