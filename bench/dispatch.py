"""Dispatcher CPU per request as the number of waiting workers grows: 288, 4,096 and 8,192 workers
contending for 288 slots (9 endpoints x 32), with the release waking one waiter (ours) against waking
every waiter (the earlier `notify_all` behaviour, as a baseline in the same run).

Each worker loops acquire -> yield to the loop -> release; nothing touches the network (the endpoints are
never connected), so the figure is the dispatcher's own cost: process CPU time / requests.

    python -m bench.dispatch [--requests 40000] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from bench.report import emit
from client.fleet.dispatcher import Dispatcher, DispatchSettings
from client.wire.endpoint import Endpoint

ENDPOINTS, SLOTS = 9, 32


class WakeAll(Dispatcher):
    """The baseline: every release wakes every waiting worker."""

    def release(self, endpoint: Endpoint) -> None:
        self._tracked[endpoint.index].in_flight -= 1
        self._tracked[endpoint.index].finished_since_poll += 1
        self._wake(len(self._waiters))


async def measure(kind: type[Dispatcher], workers: int, requests: int) -> float:
    endpoints = [Endpoint(f"http://127.0.0.1:{9000 + i}", index=i, max_in_flight=SLOTS) for i in range(ENDPOINTS)]
    dispatcher = kind(endpoints, DispatchSettings(default_capacity=SLOTS, headroom=0.0))
    for endpoint in endpoints:
        dispatcher.starting(endpoint, ready=True)
    remaining = requests

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            endpoint = await dispatcher.acquire()
            await asyncio.sleep(0)
            dispatcher.release(endpoint)

    started = time.process_time()
    async with asyncio.TaskGroup() as group:
        for _ in range(workers):
            group.create_task(worker())
    spent = time.process_time() - started
    await asyncio.gather(*(e.aclose() for e in endpoints))
    return spent / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[288, 4096, 8192])
    parser.add_argument("--out", type=Path, help="append the table to this markdown file")
    args = parser.parse_args()
    rows = []
    for workers in args.workers:
        ours = asyncio.run(measure(Dispatcher, workers, args.requests))
        # The baseline grows with the workers: fewer requests keep its run short, the figure is per request.
        baseline = asyncio.run(measure(WakeAll, workers, max(2_000, args.requests * 288 // workers)))
        rows.append(f"| {workers:,} | {ours:.1f} us | {baseline:.1f} us | {baseline / ours:.1f}x |")
    first = rows[0].split("|")[2].strip()
    lines = ["| workers (288 slots) | wake one (ours) | wake all (baseline) | baseline / ours |",
             "|---:|---:|---:|---:|", *rows, "",
             f"Ours from {args.workers[0]:,} to {args.workers[-1]:,} workers: {first} -> "
             f"{rows[-1].split('|')[2].strip()} per request."]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
