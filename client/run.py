"""`python -m client.run`: the main job. Parses the CLI, runs the start-up checks, the swarm and the
console, prints the summary and exits with a documented code.

Exit codes: 0 every valid prompt is done; 1 the run ended but some prompts failed after all attempts
(run again to retry them); 2 bad options or an unusable fleet/--out, nothing sent; 3 bad input under
--strict; 4 results could not be written (disk full or read-only: free space and run again);
130 stopped by Ctrl-C or SIGTERM (run again to continue).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from client.cli import build_parser, settings_from
from client.console import format_duration, show_progress
from client.dispatch import Dispatcher
from client.endpoint import Endpoint
from client.errors import ConfigError, InputError, RegenError, SinkError
from client.sink import ResultSink, load_done_ids, new_run_id
from client.source import PromptSource, Shard, count_remaining
from client.startup import check_reachable, parse_endpoints, resolve_model
from client.stats import EndpointCounters, RunStats
from client.swarm import RetryPolicy, Swarm

EXIT_OK, EXIT_FAILURES, EXIT_CONFIG, EXIT_INPUT, EXIT_SINK, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _simulated_fleet(args: argparse.Namespace) -> Iterator[list[str]]:
    from launch.sim.fleet import SimFleet, SimServerSpec

    spec = SimServerSpec(max_running=args.sim_max_running, speed=args.sim_speed,
                         extra_args=tuple(args.sim_arg or ()))
    fleet = SimFleet([spec] * args.simulate, seed=args.seed or 0)
    _say(f"starting {args.simulate} simulated server(s) on 127.0.0.1 ...")
    fleet.start(wait_ready=True, timeout=60.0)
    try:
        yield fleet.urls
    finally:
        fleet.close()


async def _main(args: argparse.Namespace, urls: list[str]) -> int:
    settings = settings_from(args)
    out = Path(args.out)
    ResultSink.prepare(out)
    prompt_paths = [Path(p) for p in args.prompts]
    for path in prompt_paths:
        if not path.is_file():
            raise ConfigError(f"--prompts {path}: no such file")
    shard = Shard.parse(args.shard) if args.shard else None

    done_ids, scan = load_done_ids(out / "segments")
    if scan.segments:
        repaired = f", repaired a torn tail of {scan.repaired_bytes} bytes" if scan.repaired_bytes else ""
        corrupt = f", {scan.corrupt_lines} unreadable line(s) ignored" if scan.corrupt_lines else ""
        _say(f"resuming: {len(done_ids):,} done id(s) in {scan.segments} segment(s){repaired}{corrupt}")

    stats = RunStats(gpus=args.gpus)
    endpoints = [
        Endpoint(url, EndpointCounters(url=url, index=i), max_in_flight=args.max_in_flight,
                 idle_timeout=args.idle_timeout, api_key=args.api_key)
        for i, url in enumerate(urls)
    ]
    stats.endpoints = [e.counters for e in endpoints]
    try:
        await check_reachable(endpoints, args.wait_ready)
        model = await resolve_model(endpoints, args.model, max(args.wait_ready, 60.0))
        _say(f"model {model} on {len(endpoints)} endpoint(s); thinking {'on' if settings.enable_thinking else 'off'}, "
             f"max_tokens {settings.max_tokens}")

        problems_shown = 0

        def on_problem(problem: object) -> None:
            nonlocal problems_shown
            problems_shown += 1
            if problems_shown <= args.show_problems:
                _say(f"skipped invalid record: {problem}")

        source = PromptSource(prompt_paths, done_ids, strict=args.strict, shard=shard, on_problem=on_problem)
        sink = ResultSink(out, run_id=new_run_id(), shard_label=(shard or Shard(0, 1)).label,
                          max_segment_bytes=int(args.segment_mb * (1 << 20)), max_segment_age_s=args.segment_age)
        swarm = Swarm(
            endpoints=endpoints, source=source, sink=sink, stats=stats, settings=settings, model=model,
            retry=RetryPolicy(max_attempts=args.max_attempts), grace_s=args.grace,
            dispatcher=Dispatcher(endpoints, failure_threshold=args.circuit_failures),
        )

        async def count_total() -> None:
            stats.total = await asyncio.to_thread(count_remaining, prompt_paths, done_ids, shard)

        async def progress() -> None:
            await show_progress(stats.snapshot, live=False if args.plain else None,
                                plain_every_s=args.progress_every)

        loop = asyncio.get_running_loop()
        signals_seen = 0

        def on_signal() -> None:
            nonlocal signals_seen
            signals_seen += 1
            if signals_seen == 1:
                _say(f"\nstopping: no new requests; waiting up to {args.grace:.0f}s for those in flight "
                     "(press Ctrl-C again to stop now)")
            swarm.request_stop(immediate=signals_seen > 1)

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal)
        try:
            outcome = await swarm.run([count_total, progress])
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            sink.close()
    finally:
        await asyncio.gather(*(e.aclose() for e in endpoints), return_exceptions=True)

    counts = source.counts
    snap = stats.snapshot()
    _say("")
    _say(f"run {'stopped' if outcome.interrupted else 'ended'} after {format_duration(snap.elapsed_s)}: "
         f"{snap.done:,} done, {snap.failed:,} failed, {snap.retries:,} retries, {snap.truncated:,} truncated "
         f"(finish_reason length), {snap.completion_tokens:,} completion tokens")
    fresh = counts.records - counts.skipped_done - counts.other_shards
    not_reached = fresh - counts.invalid - counts.duplicates - snap.done - snap.failed
    _say(f"reconciliation: inputs {counts.records:,} = done {snap.done:,} + failed {snap.failed:,} "
         f"+ skipped-invalid {counts.invalid:,} + duplicate {counts.duplicates:,} "
         f"+ already-done {counts.skipped_done:,} + other-shards {counts.other_shards:,}"
         + (f" + not-yet-sent {not_reached:,}" if not_reached else ""))
    if counts.invalid or counts.duplicates:
        _say(f"{counts.invalid + counts.duplicates} record(s) were skipped as invalid; each was reported above "
             "(first few) with file:line. Fix them and run again, or pass --strict to stop on the first.")
    if snap.failed:
        _say(f"{snap.failed} prompt(s) failed after all attempts; see {sink.failures_path}. "
             "Run the same command again to retry them.")
    if outcome.fatal is not None:
        raise outcome.fatal
    if outcome.interrupted:
        _say("interrupted: run the same command again to continue where this one stopped")
        return EXIT_INTERRUPTED
    return EXIT_FAILURES if snap.failed else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if bool(args.endpoints) == bool(args.simulate):
        parser.error("give exactly one of --endpoints or --simulate N")
    try:
        if args.simulate:
            with _simulated_fleet(args) as urls:
                return asyncio.run(_main(args, urls))
        return asyncio.run(_main(args, parse_endpoints(args.endpoints)))
    except ConfigError as exc:
        _say(f"error: {exc}")
        return EXIT_CONFIG
    except InputError as exc:
        _say(f"error: bad input: {exc}")
        return EXIT_INPUT
    except SinkError as exc:
        _say(f"error: {exc}. Every line already written is intact; free space (or fix permissions) "
             "and run the same command again to continue.")
        return EXIT_SINK
    except RegenError as exc:
        _say(f"error: {exc}")
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
