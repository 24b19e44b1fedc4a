"""Run the calibration sample on the real fleet with the client's own machinery.

The same open_fleet, Swarm, PromptSource and ResultSink as `client.run`, so the sample is
sent, balanced, retried and written exactly as the full run would be, and its results in `--out` are
ordinary segments (`client.audit` and `--from-results` read them). The dispatcher fills every server
to its reported capacity plus a small queue, which is what keeps the fleet saturated while the sample
lasts; `max_in_flight` only caps the connection pools and defaults high for that reason. The GPUs the
servers name in `/v1/loads` (kind and count) are kept for the projection onto other GPUs.

On a simulated fleet (every server answers GET /sim/clock: client.fleet.sim_clock) the sample's times are
read on the servers' modelled clock, which the host's load does not stretch: their clocks are read before,
throughout and after the sample, and the trace is handed back for the measurement. A real fleet keeps the
wall clock.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from client.core.options import DEFAULT_MAX_ATTEMPTS
from client.core.payload import SamplingSettings
from client.core.sampling_plan import SamplingPlan
from client.core.stats import RunStats
from client.engine.session import open_fleet
from client.engine.swarm import RetryPolicy, Swarm, SwarmSettings
from client.fleet.options import FleetConfig
from client.fleet.sim_clock import ClockTrace, SimulatedFleet, follow, probe, read_once
from client.local.sink import ResultSink, new_run_id
from client.local.source import PromptSource
from client.run.console import show_progress


@dataclass(frozen=True, slots=True)
class CalibrationRun:
    model: str
    reported_slots: int
    sample_size: int
    done: int
    failed: int
    elapsed_s: float
    interrupted: bool
    accelerators: tuple[str, ...] = ()  # the devices the servers' /v1/loads name (client.fleet.device)
    server_gpus: int | None = None  # their GPUs, when every server says how many
    clock: str = "wall"  # "modelled" on a simulated fleet (client.fleet.sim_clock), else "wall"
    simulated: dict[str, object] | None = None  # a simulated fleet's servers, speed and kind (SimulatedFleet)


def _note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def calibrate(fleet_cfg: FleetConfig, settings: SamplingSettings, out: Path,
                    make_sample: Callable[[int], tuple[Path, int]], *, prompt_paths: Sequence[Path],
                    max_attempts: int = DEFAULT_MAX_ATTEMPTS, progress_every_s: float = 10.0,
                    plan: SamplingPlan | None = None) -> tuple[CalibrationRun, ClockTrace | None]:
    """Open the fleet as the run does (client.engine.session), ask `make_sample(fleet slots)` for the sample
    file, and run it into `out`. `prompt_paths`: the full set, where the preflight looks for tools. With the
    run, the modelled clock's readings of a simulated fleet (None on a real one). `plan`: each prompt is sent
    with its draw, as the run sends it (the same plan and seed draw the same setting)."""
    stats = RunStats()
    async with open_fleet(fleet_cfg, settings, prompt_paths=prompt_paths, note=_note, plan=plan) as fleet:
        stats.track(len(fleet.endpoints))
        await fleet.dispatcher.prime()
        slots = sum(fleet.dispatcher.capacity(e.index) for e in fleet.endpoints)
        live = fleet.dispatcher.live()
        accelerators = tuple(sorted({e.accelerator for e in live if e.accelerator}))
        counts = [e.gpus for e in live]
        server_gpus = sum(c for c in counts if c) if counts and all(counts) else None
        sample_path, size = make_sample(slots)
        if size < 2 * slots:
            _note(f"warning: a sample of {size:,} cannot keep {slots} decode slots busy for long; the throughput "
                  "will be rough (a sample of at least 5x the slots is better)")
        _note(f"calibrating: {size:,} prompt(s) on {len(fleet.endpoints)} endpoint(s) ({slots} decode slots), "
              f"model {fleet.model}, max_tokens {settings.max_tokens}")
        stats.total = size
        simulated: SimulatedFleet | None = await probe(fleet.endpoints)
        trace = ClockTrace() if simulated is not None else None
        if simulated is not None:
            _note(f"simulated fleet ({simulated.servers} server(s), speed {simulated.as_record()['speed']}): "
                  "timed on the modelled GPU's clock (GET /sim/clock), not the wall clock")
        sink = ResultSink(out, run_id=new_run_id(), shard_label="calibration")
        swarm = Swarm(fleet, PromptSource([sample_path], set()), sink, stats,
                      SwarmSettings(retry=RetryPolicy(max_attempts=max_attempts)))

        async def progress() -> None:
            await show_progress(lambda: stats.snapshot(fleet.dispatcher.live()), stream=sys.stderr, live=False,
                                plain_every_s=progress_every_s)

        companions = [progress]
        if trace is not None:
            clock = trace

            async def follow_clock() -> None:
                await follow(fleet.endpoints, clock)

            await read_once(fleet.endpoints, clock)
            companions.append(follow_clock)
        started = time.monotonic()
        try:
            outcome = await swarm.run(companions)
        finally:
            sink.close()
        if outcome.fatal is not None:
            raise outcome.fatal
        elapsed = time.monotonic() - started
        if trace is not None:
            await read_once(fleet.endpoints, trace)
        run = CalibrationRun(fleet.model, slots, size, stats.done, stats.failed, elapsed, outcome.interrupted,
                             accelerators, server_gpus, "modelled" if trace is not None else "wall",
                             simulated.as_record() if simulated is not None else None)
        return run, trace
