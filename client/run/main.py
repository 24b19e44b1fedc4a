"""`python -m client.run`: the main job. Parses the CLI, runs the start-up checks, the swarm and the
console, prints the summary and exits with a documented code.

Exit codes: 0 every valid prompt is done; 1 the run ended but some prompts failed after all attempts
(run again to retry them); 2 bad options or an unusable fleet/--out, nothing sent; 3 bad input under
--strict; 4 results could not be written (disk full or read-only: free space and run again);
5 the run ended but some segments are not in S3 yet (run again to upload them);
130 stopped by Ctrl-C or SIGTERM (run again to continue).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

from client.core import redact
from client.core.errors import ConfigError, InputError, RegenError, SinkError
from client.core.loop import run_async
from client.core.payload import FieldPolicy
from client.core.stats import EndpointCounters, RunStats, StatsSnapshot
from client.fleet.dispatcher import Dispatcher, DispatchSettings
from client.fleet.options import network_from
from client.fleet.startup import check_max_tokens, check_reachable, parse_endpoints, resolve_model
from client.local.estimate_file import expected_tokens_per_prompt
from client.local.ledger import read_done_ids
from client.local.lock import hold_out_lock
from client.local.prompt_files import resolve_prompt_files
from client.local.run_settings import shaping_settings
from client.local.sink import ResultSink, new_run_id
from client.local.source import PromptSource, Shard, count_remaining
from client.results.reader import iter_records
from client.run.cli import build_parser, settings_from
from client.run.console import say, show_progress
from client.run.edited_prompts import check_edited
from client.run.metrics import MetricsServer
from client.run.rate import RequestRate
from client.run.s3_wiring import drain, open_s3, register_s3
from client.run.settings_gate import SettingsGate, check_sync_target
from client.run.shard_auto import resolve_shard
from client.run.startup_fields import settle_fields
from client.run.summary import print_summary
from client.run.swarm import RetryPolicy, Swarm
from client.run.turns import TurnLedger, add_records, count_remaining_events, load_turn_ledger, skip_too_long
from client.s3.uploader import SyncReport
from client.wire.endpoint import Endpoint

EXIT_OK, EXIT_FAILURES, EXIT_CONFIG, EXIT_INPUT, EXIT_SINK, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_SYNC_PENDING = 5


@contextlib.contextmanager
def _simulated_fleet(args: argparse.Namespace) -> Iterator[list[str]]:
    from launch.sim.fleet import SimFleet, SimServerSpec

    spec = SimServerSpec(max_running=args.sim_max_running, speed=args.sim_speed,
                         extra_args=tuple(args.sim_arg or ()))
    fleet = SimFleet([spec] * args.simulate, seed=args.seed or 0)
    say(f"starting {args.simulate} simulated server(s) on 127.0.0.1 ...")
    fleet.start(wait_ready=True, timeout=60.0)
    try:
        yield fleet.urls
    finally:
        fleet.close()


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _cancel_on_signal(loop: asyncio.AbstractEventLoop) -> None:
    """Outside the swarm (start-up checks, --wait-ready, the final upload), Ctrl-C or SIGTERM cancels the
    main task, which `_main` turns into exit 130 with a message; the swarm installs its own graceful stop."""
    task = asyncio.current_task()
    assert task is not None
    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, task.cancel)


async def _main(args: argparse.Namespace, urls: list[str]) -> int:
    loop = asyncio.get_running_loop()
    _cancel_on_signal(loop)
    try:
        async with contextlib.AsyncExitStack() as stack:
            return await _run(args, urls, stack)
    except asyncio.CancelledError:
        say("stopped by Ctrl-C or SIGTERM; run the same command again to continue where this one stopped")
        return EXIT_INTERRUPTED
    finally:
        for signum in _STOP_SIGNALS:
            loop.remove_signal_handler(signum)
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # back to `main`'s: KeyboardInterrupt


async def _run(args: argparse.Namespace, urls: list[str], stack: contextlib.AsyncExitStack) -> int:
    settings = settings_from(args)
    out = Path(args.out)
    ResultSink.prepare(out)
    await asyncio.to_thread(check_sync_target, out, args.s3)  # before anything is read from S3 or sent
    prompt_files = resolve_prompt_files([Path(p) for p in args.prompts], note=say)
    prompt_paths = prompt_files.paths
    if prompt_files.all_empty:
        nothing = "the prompt file(s) hold no record at all (" + ", ".join(map(str, prompt_files.empty)) + " empty)"
        if args.strict:
            raise InputError(f"{nothing}; stopping because of --strict")
        say(f"warning: nothing to do: {nothing}")
        return EXIT_OK
    for path in prompt_files.empty:
        say(f"warning: --prompts {path} is empty")
    shard, shard_source = resolve_shard(args.shard, args.shard_count, os.environ, note=say)

    done_ids, scan = read_done_ids(out / "segments")
    if scan.segments:
        repaired = f", repaired a torn tail of {scan.repaired_bytes} bytes" if scan.repaired_bytes else ""
        corrupt = f", {scan.corrupt_lines} unreadable line(s) ignored" if scan.corrupt_lines else ""
        say(f"resuming: {len(done_ids):,} done id(s) in {scan.segments} segment(s){repaired}{corrupt}")
    run_id = new_run_id()
    uploader = (await open_s3(args, out, shard or Shard(0, 1), run_id, done_ids, stack, shard_source=shard_source)
                if args.s3 else None)
    segment_age = min(args.segment_age, args.sync_interval) if uploader else args.segment_age
    ledger = await _turn_ledger(args, done_ids, out) if args.turns == "all" else None
    # What the source skips: done prompts, or (--turns all) conversations whose last event is written.
    skip_ids = ledger.finished if ledger is not None else done_ids
    too_long_ids = set() if args.retry_too_long else skip_too_long(out, done_ids, ledger)
    if too_long_ids:
        say(f"leaving out {len(too_long_ids):,} prompt(s) an earlier run found longer than the server's context "
            "(too_long in the failures file); pass --retry-too-long to send them again")

    stats = RunStats(gpus=args.gpus,
                     expected_tokens_per_prompt=expected_tokens_per_prompt(args.estimate) if args.estimate else None)
    metrics = MetricsServer(args.metrics_host, args.metrics_port) if args.metrics_port is not None else None
    if metrics is not None:
        stack.callback(metrics.close)
        metrics.show(stats.snapshot())  # zeros from the first scrape, not an empty page
        say(f"metrics: {metrics.url}")
    network = network_from(args)
    endpoints = [
        Endpoint(url, EndpointCounters(url=url, index=i), max_in_flight=args.max_in_flight,
                 idle_timeout=args.idle_timeout, api_key=args.api_key, network=network)
        for i, url in enumerate(urls)
    ]
    stats.endpoints = [e.counters for e in endpoints]
    try:
        await check_reachable(endpoints, args.wait_ready, note=say)
        model = await resolve_model(endpoints, args.model, max(args.wait_ready, 60.0))
        await check_max_tokens(endpoints, model, settings.max_tokens)
        gate = SettingsGate(out, run_id=run_id, allow_change=args.allow_settings_change,
                            store=uploader.store if uploader is not None else None, existing_records=len(done_ids),
                            s3=args.s3, delete_uploaded=args.delete_uploaded)

        async def check_settings(policy: FieldPolicy) -> None:
            await gate.check(shaping_settings(model=model, sampling=settings.recorded(policy),
                                              thinking=settings.enable_thinking, turns=args.turns,
                                              fields=policy.extensions))

        policy = await settle_fields(endpoints, settings, model=model, compat=args.compat,
                                     prompt_paths=prompt_paths, before_preflight=check_settings,
                                     token_ids=args.token_ids)
        await gate.record(prompt_paths)
        await check_edited(gate.changed_prompt_files, prompt_paths, out, done_ids, redo=args.redo_edited, ledger=ledger)
        await register_s3(uploader)  # only now: a start refused above has left S3 as it found it
        for counters in stats.endpoints:
            counters.streamed_tokens = 0  # the preflight's one-token replies are not the run's work
        say(f"model {model} on {len(endpoints)} endpoint(s); thinking {'on' if settings.enable_thinking else 'off'}, "
            f"max_tokens {settings.max_tokens}, turns {args.turns}")

        problems_shown = 0

        def on_problem(problem: object) -> None:
            nonlocal problems_shown
            problems_shown += 1
            if problems_shown <= args.show_problems:
                say(f"skipped invalid record: {problem}")

        source = PromptSource(prompt_paths, skip_ids, strict=args.strict, shard=shard, on_problem=on_problem,
                              too_long_ids=too_long_ids)
        sink = ResultSink(out, run_id=run_id, shard_label=(shard or Shard(0, 1)).label,
                          max_segment_bytes=int(args.segment_mb * (1 << 20)), max_segment_age_s=segment_age,
                          on_segment_closed=uploader.segment_closed if uploader else None)
        swarm = Swarm(
            endpoints=endpoints, source=source, sink=sink, stats=stats, settings=settings, model=model,
            retry=RetryPolicy(max_attempts=args.max_attempts), grace_s=args.grace,
            rotate_check_s=min(5.0, max(0.2, segment_age / 5)),
            dispatcher=Dispatcher(endpoints, DispatchSettings(failure_threshold=args.circuit_failures,
                                                           default_capacity=args.slots)),
            turns=args.turns, ledger=ledger, policy=policy,
            rate=RequestRate(args.max_requests_per_second) if args.max_requests_per_second else None,
        )
        companions = []
        if metrics is not None:
            companions.append(lambda: metrics.publish(snapshot))
        if uploader is not None:
            uploader.failed_count = lambda: stats.failed
            uploader.on_fatal = lambda error: swarm.request_stop()
            companions.append(uploader.run)

        async def count_total() -> None:
            if ledger is not None:
                stats.total = await asyncio.to_thread(count_remaining_events, prompt_paths, ledger, shard)
            else:
                stats.total = await asyncio.to_thread(count_remaining, prompt_paths, done_ids | too_long_ids, shard)

        def snapshot() -> StatsSnapshot:
            if uploader is not None:
                stats.sync_lag = uploader.lag_text()
                stats.sync_lag_s = uploader.lag_seconds()
            return stats.snapshot()

        async def progress() -> None:
            await show_progress(snapshot, live=False if args.plain else None, plain_every_s=args.progress_every)

        loop = asyncio.get_running_loop()
        signals_seen = 0

        def on_signal() -> None:
            nonlocal signals_seen
            signals_seen += 1
            if signals_seen == 1:
                say(f"\nstopping: no new requests; waiting up to {args.grace:.0f}s for those in flight "
                    "(press Ctrl-C again to stop now)")
            swarm.request_stop(immediate=signals_seen > 1)

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal)
        sync: SyncReport | None = None
        try:
            outcome = await swarm.run([count_total, progress, *companions])
        finally:
            _cancel_on_signal(loop)
            try:
                sink.close()
            finally:
                if uploader is not None:
                    ended = not swarm.outcome.interrupted and swarm.outcome.fatal is None
                    sync = await drain(uploader, args, out, "finished" if ended else "stopped")
    finally:
        await asyncio.gather(*(e.aclose() for e in endpoints), return_exceptions=True)

    final = stats.snapshot()
    print_summary(source.counts, final, outcome, sink.failures_path, turns=args.turns)
    if metrics is not None and args.metrics_linger > 0:
        say(f"metrics: serving the final figures until a scrape reads them (at most {args.metrics_linger:.0f}s)")
    if metrics is not None:
        await metrics.finish(final, args.metrics_linger)
    if outcome.fatal is not None:
        raise outcome.fatal
    no_valid = None if outcome.interrupted else source.counts.no_valid_record()
    if no_valid is not None:
        if args.strict:
            raise InputError(f"{no_valid}; stopping because of --strict")
        say(f"warning: nothing was generated: {no_valid}")
    if uploader is not None and uploader.fatal is not None:
        raise uploader.fatal
    if outcome.interrupted:
        say("interrupted: run the same command again to continue where this one stopped")
        return EXIT_INTERRUPTED
    if sync is not None and sync.pending:
        return EXIT_SYNC_PENDING
    return EXIT_FAILURES if stats.failed > stats.too_long else EXIT_OK


async def _turn_ledger(args: argparse.Namespace, done_ids: set[str], out: Path) -> TurnLedger:
    """Which conversations are over, and the last written turn of those a crash cut off (local segments
    first; on a fresh host, the S3 prefix)."""
    ledger = await asyncio.to_thread(load_turn_ledger, done_ids, out / "segments")
    if ledger.missing and args.s3:
        say(f"conversations: reading the last turn of {len(ledger.missing)} unfinished conversation(s) from S3")
        records = iter_records(args.s3, s3_endpoint_url=args.s3_endpoint_url)
        await asyncio.to_thread(add_records, ledger, (record for _, record in records))
    if ledger.missing:
        sample = ", ".join(list(ledger.missing.values())[:3])
        raise ConfigError(f"{len(ledger.missing)} unfinished conversation(s) have written turns that cannot be "
                          f"read back (e.g. {sample}); pass the --s3 prefix that holds them, or move those "
                          "segments back under --out")
    if ledger.finished or ledger.latest:
        say(f"conversations: {len(ledger.finished):,} finished, {len(ledger.latest):,} to continue at their next turn")
    return ledger


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    redact.remember(args.api_key)  # before anything can fail: a server may echo it in an error body
    if bool(args.endpoints) == bool(args.simulate):
        parser.error("give exactly one of --endpoints or --simulate N")
    if not args.s3 and (args.delete_uploaded or args.s3_gzip or args.s3_endpoint_url):
        parser.error("--delete-uploaded, --s3-gzip and --s3-endpoint-url need --s3 s3://BUCKET/PREFIX")
    if args.preserve_thinking and args.turns != "all":
        parser.error("--preserve-thinking keeps the reasoning of earlier turns in the history: it needs --turns all")
    if args.redo_edited and args.s3:
        parser.error("--redo-edited rewrites local segments, and with --s3 they are uploaded (never rewritten)")
    if args.sim_arg and not args.simulate:
        parser.error("--sim-arg is passed to the simulated servers: it needs --simulate N")
    previous_term = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM ends like Ctrl-C: 130
    try:
        # The lock comes first: a second client on this --out stops here, before anything is sent or written.
        ResultSink.prepare(Path(args.out))
        with hold_out_lock(Path(args.out), note=say):
            if args.simulate:
                with _simulated_fleet(args) as urls:
                    return run_async(_main(args, urls))
            return run_async(_main(args, parse_endpoints(args.endpoints)))
    except ConfigError as exc:
        say(f"error: {exc}")
        return EXIT_CONFIG
    except InputError as exc:
        say(f"error: bad input: {exc}")
        return EXIT_INPUT
    except SinkError as exc:
        say(f"error: {exc}. Every line already written is intact; free space (or fix permissions) "
             "and run the same command again to continue.")
        return EXIT_SINK
    except RegenError as exc:
        say(f"error: {exc}")
        return EXIT_CONFIG
    except KeyboardInterrupt:
        say("stopped by Ctrl-C or SIGTERM; run the same command again to continue where this one stopped")
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous_term)
