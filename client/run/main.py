"""`python -m client.run`: the main job. Parses the command line into a RunConfig, takes the --out lock,
starts a simulated fleet under --simulate and runs the job (client.run.job); its errors are raised to the
entry (client.run.__main__), which maps them onto the documented exit codes once (client.core.exit_codes).

Exit codes: 0 every valid prompt is done; 1 the run ended but some prompts failed after all attempts
(run again to retry them); 2 bad options, an unusable fleet/--out or a live writer of this shard on the
--s3 prefix, nothing sent; 3 bad input under
--strict; 4 results could not be written (disk full or read-only: free space and run again);
5 the run ended but some segments are not in S3 yet (run again to upload them);
130 stopped by Ctrl-C or SIGTERM (run again to continue).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

from client.core import redact
from client.core.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from client.core.loop import run_async
from client.extend.job import ExtendConfig, run_extension
from client.extend.select import Limits
from client.local.lock import hold_out_lock
from client.local.out_dir import NewOut
from client.local.sink import ResultSink
from client.run.cli import build_parser, config_from
from client.run.config import RunConfig, SimConfig
from client.run.console import say
from client.run.job import Run
from client.run.stop import StopController

_STOPPED = "stopped by Ctrl-C or SIGTERM; run the same command again to continue where this one stopped"


@contextlib.contextmanager
def _simulated_fleet(sim: SimConfig) -> Iterator[tuple[str, ...]]:
    from simulator.api import SimFleet, SimServerSpec

    spec = SimServerSpec(max_running=sim.max_running, speed=sim.speed, extra_args=sim.extra_args,
                         gpu_kind=sim.gpu_kind)
    fleet = SimFleet([spec] * sim.servers, seed=sim.seed)
    say(f"starting {sim.servers} simulated server(s) on 127.0.0.1 ...")
    fleet.start(wait_ready=True, timeout=60.0)
    try:
        yield tuple(fleet.urls)
    finally:
        fleet.close()


def extend_config(cfg: RunConfig, source: Path) -> ExtendConfig:
    return ExtendConfig(source=source, out=cfg.out, limits=Limits(cfg.train_window, cfg.sampling.max_tokens),
                        fleet=cfg.fleet, max_attempts=cfg.max_attempts, progress_every=cfg.view.progress_every,
                        segment_mb=cfg.segment_mb, segment_age=cfg.segment_age)


async def _main(cfg: RunConfig, stop: StopController) -> int:
    stop.cancel_on_signal()
    if cfg.extend is not None:
        try:
            return await run_extension(extend_config(cfg, cfg.extend))
        finally:
            stop.release()
    try:
        async with contextlib.AsyncExitStack() as stack:
            run = Run(cfg, stop)
            prepared = await run.prepare(stack)
            if isinstance(prepared, int):
                return prepared  # nothing to do: an exit code
            outcome, sync = await run.run(prepared)
            return await run.finish(prepared, outcome, sync)  # inside: --metrics-linger serves from the stack's server
    except asyncio.CancelledError:
        say(_STOPPED)
        return EXIT_INTERRUPTED
    finally:
        stop.release()


def _execute(cfg: RunConfig, stop: StopController) -> int:
    # The lock comes first: a second client on this --out stops here, before anything is sent or written.
    ResultSink.prepare(cfg.out)
    with hold_out_lock(cfg.out, note=say):
        if cfg.simulate is not None:
            with _simulated_fleet(cfg.simulate) as urls:
                fleet = dataclasses.replace(cfg.fleet, urls=urls)
                return run_async(_main(dataclasses.replace(cfg, fleet=fleet), stop))
        return run_async(_main(cfg, stop))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    redact.remember(args.api_key)  # before anything can fail: a server may echo it in an error body
    new_out = NewOut(Path(args.out))
    with StopController() as stop:  # from here SIGTERM ends like Ctrl-C: 130
        code = EXIT_USAGE
        try:
            code = _execute(config_from(parser, args), stop)
            return code
        finally:
            if code != EXIT_OK:  # a run that failed at start leaves no empty --out it made behind
                new_out.remove_if_unused()
