"""Run the calibration sample on the real fleet with the client's own machinery.

The same open_fleet, Swarm, PromptSource and ResultSink as `client.run`, so the sample is
sent, balanced, retried and written exactly as the full run would be, and its results in `--out` are
ordinary segments (`client.audit` and `--from-results` read them). The dispatcher fills every server
to its reported capacity plus a small queue, which is what keeps the fleet saturated while the sample
lasts; `max_in_flight` only caps the connection pools and defaults high for that reason. The GPUs the
servers name in `/v1/loads` (kind and count) are kept for the projection onto other GPUs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from client.core.options import DEFAULT_MAX_ATTEMPTS
from client.core.payload import SamplingSettings
from client.core.stats import RunStats
from client.engine.session import open_fleet
from client.engine.swarm import RetryPolicy, Swarm, SwarmSettings
from client.fleet.options import FleetConfig
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


def _note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def calibrate(fleet_cfg: FleetConfig, settings: SamplingSettings, out: Path,
                    make_sample: Callable[[int], tuple[Path, int]], *, prompt_paths: Sequence[Path],
                    max_attempts: int = DEFAULT_MAX_ATTEMPTS, progress_every_s: float = 10.0) -> CalibrationRun:
    """Open the fleet as the run does (client.engine.session), ask `make_sample(fleet slots)` for the sample
    file, and run it into `out`. `prompt_paths`: the full set, where the preflight looks for tools."""
    stats = RunStats()
    async with open_fleet(fleet_cfg, settings, prompt_paths=prompt_paths, note=_note) as fleet:
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
        sink = ResultSink(out, run_id=new_run_id(), shard_label="calibration")
        swarm = Swarm(fleet, PromptSource([sample_path], set()), sink, stats,
                      SwarmSettings(retry=RetryPolicy(max_attempts=max_attempts)))

        async def progress() -> None:
            await show_progress(lambda: stats.snapshot(fleet.dispatcher.live()), stream=sys.stderr, live=False,
                                plain_every_s=progress_every_s)

        started = time.monotonic()
        try:
            outcome = await swarm.run([progress])
        finally:
            sink.close()
        if outcome.fatal is not None:
            raise outcome.fatal
        return CalibrationRun(fleet.model, slots, size, stats.done, stats.failed, time.monotonic() - started,
                              outcome.interrupted, accelerators, server_gpus)
