"""Run the calibration sample on the real fleet with the client's own machinery.

The same Endpoint, Dispatcher, Swarm, PromptSource and ResultSink as `client.run`, so the sample is
sent, balanced, retried and written exactly as the full run would be, and its results in `--out` are
ordinary segments (`client.audit` and `--from-results` read them). The dispatcher fills every server
to its reported capacity plus a small queue, which is what keeps the fleet saturated while the sample
lasts; `max_in_flight` only caps the connection pools and defaults high for that reason.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from client.core.errors import AttemptError
from client.core.payload import SamplingSettings
from client.core.stats import EndpointCounters, RunStats
from client.fleet.dispatcher import Dispatcher
from client.fleet.startup import check_reachable, resolve_model
from client.local.sink import ResultSink, new_run_id
from client.local.source import PromptSource
from client.run.console import show_progress
from client.run.startup_fields import settle_fields
from client.run.swarm import RetryPolicy, Swarm
from client.wire.connect import NetworkOptions
from client.wire.endpoint import Endpoint
from client.wire.loads import LOAD_SOURCES, LoadFormatError

DEFAULT_SLOTS = 32  # decode slots assumed for a server that does not report them


@dataclass(frozen=True, slots=True)
class FleetOptions:
    urls: tuple[str, ...]
    model: str | None
    api_key: str | None
    max_in_flight: int
    wait_ready: float
    max_attempts: int
    network: NetworkOptions = field(default_factory=NetworkOptions)  # --ca-bundle, --insecure, --proxy
    compat: str = "auto"  # which extension fields go out (client.fleet.preflight)


@dataclass(frozen=True, slots=True)
class CalibrationRun:
    model: str
    reported_slots: int
    sample_size: int
    done: int
    failed: int
    elapsed_s: float
    interrupted: bool


async def _reported_slots(endpoint: Endpoint) -> int | None:
    for path, parse in LOAD_SOURCES:
        try:
            load = parse(await endpoint.get_bytes(path))
        except (AttemptError, LoadFormatError):
            continue
        if load.capacity:
            return load.capacity
    return None


async def calibrate(fleet: FleetOptions, settings: SamplingSettings, out: Path,
                    make_sample: Callable[[int], tuple[Path, int]], *,
                    progress_every_s: float = 10.0) -> CalibrationRun:
    """Check the fleet, ask `make_sample(fleet slots)` for the sample file, and run it into `out`."""
    stats = RunStats()
    endpoints = [Endpoint(url, EndpointCounters(url=url, index=i), max_in_flight=fleet.max_in_flight,
                          api_key=fleet.api_key, network=fleet.network) for i, url in enumerate(fleet.urls)]
    stats.endpoints = [e.counters for e in endpoints]
    try:
        await check_reachable(endpoints, fleet.wait_ready)
        model = await resolve_model(endpoints, fleet.model, max(fleet.wait_ready, 60.0))
        reported = await asyncio.gather(*(_reported_slots(e) for e in endpoints))
        slots = sum(r or DEFAULT_SLOTS for r in reported)
        sample_path, size = await asyncio.to_thread(make_sample, slots)
        if size < 2 * slots:
            print(f"warning: a sample of {size:,} cannot keep {slots} decode slots busy for long; the throughput "
                  "will be rough (a sample of at least 5x the slots is better)", file=sys.stderr, flush=True)
        print(f"calibrating: {size:,} prompt(s) on {len(endpoints)} endpoint(s) ({slots} decode slots), "
              f"model {model}, max_tokens {settings.max_tokens}", file=sys.stderr, flush=True)
        policy = await settle_fields(endpoints, settings, model=model, compat=fleet.compat,
                                     prompt_paths=[sample_path])
        stats.total = size
        sink = ResultSink(out, run_id=new_run_id(), shard_label="calibration")
        swarm = Swarm(endpoints=endpoints, source=PromptSource([sample_path], set()), sink=sink, stats=stats,
                      settings=settings, model=model, retry=RetryPolicy(max_attempts=fleet.max_attempts),
                      dispatcher=Dispatcher(endpoints), policy=policy)

        async def progress() -> None:
            await show_progress(stats.snapshot, stream=sys.stderr, live=False, plain_every_s=progress_every_s)

        started = time.monotonic()
        try:
            outcome = await swarm.run([progress])
        finally:
            sink.close()
        if outcome.fatal is not None:
            raise outcome.fatal
        return CalibrationRun(model, slots, size, stats.done, stats.failed, time.monotonic() - started,
                              outcome.interrupted)
    finally:
        await asyncio.gather(*(e.aclose() for e in endpoints), return_exceptions=True)
