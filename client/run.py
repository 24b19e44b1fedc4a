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
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from client.cli import build_parser, settings_from
from client.console import format_duration, show_progress
from client.dispatch import Dispatcher
from client.endpoint import Endpoint
from client.errors import ConfigError, InputError, RegenError, SinkError
from client.manifest import manifest_key, writer_name
from client.s3resume import start as start_s3
from client.s3store import S3Error, S3Store, S3Url
from client.s3sync import SegmentUploader, SyncReport
from client.sink import ResultSink, host_name, load_done_ids, new_run_id
from client.source import PromptSource, Shard, count_remaining
from client.startup import check_reachable, parse_endpoints, resolve_model
from client.stats import EndpointCounters, RunStats, StatsSnapshot
from client.swarm import RetryPolicy, Swarm

EXIT_OK, EXIT_FAILURES, EXIT_CONFIG, EXIT_INPUT, EXIT_SINK, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_SYNC_PENDING = 5


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


async def _open_s3(args: argparse.Namespace, out: Path, shard: Shard, run_id: str, done_ids: set[str],
                   stack: contextlib.AsyncExitStack) -> SegmentUploader:
    """Check the bucket, add the done ids held in S3, queue what an earlier run left unuploaded, and
    register this run in its manifest: all before any request, so a bad bucket costs nothing."""
    url = S3Url.parse(args.s3)
    store = await stack.enter_async_context(S3Store(url, endpoint_url=args.s3_endpoint_url))
    writer = writer_name(host_name(), shard.label)
    try:
        found = await start_s3(store, segments_dir=out / "segments", writer=writer, host=host_name(),
                               shard=f"{shard.index}/{shard.count}", run_id=run_id,
                               sync_interval_s=args.sync_interval, done=done_ids,
                               delete_uploaded=args.delete_uploaded)
        uploader = SegmentUploader(store, found.manifest, found.etag, gzipped=args.s3_gzip,
                                   part_size=int(args.s3_part_mb * (1 << 20)), delete_uploaded=args.delete_uploaded)
        for segment in found.pending:
            uploader.add(segment)
        await uploader.write_manifest()
    except S3Error as exc:
        raise ConfigError(f"{exc}. Nothing was sent; start again once S3 answers.") from exc
    _say(f"s3: {url} as writer {writer} ({manifest_key(writer)}): read {found.manifests} manifest(s); "
         f"{found.s3_ids_added:,} more done id(s) from {found.s3_segments} segment index(es) in {found.seconds:.1f}s")
    for line in found.dropped:
        _say(f"s3: {line}")
    if found.pending:
        size = sum(p.size for p in found.pending)
        _say(f"s3: {len(found.pending)} segment(s) ({size / 1e6:.1f} MB) closed by an earlier run but not "
             "uploaded: they go up first")
    if found.aborted_uploads:
        _say(f"s3: aborted {found.aborted_uploads} unfinished multipart upload(s) an earlier run left behind")
    if found.deleted_local:
        _say(f"s3: deleted {found.deleted_local} local segment(s) already uploaded (--delete-uploaded)")
    return uploader


async def _drain(uploader: SegmentUploader, args: argparse.Namespace, out: Path, state: str) -> SyncReport:
    """Bounded wait for the last uploads; Ctrl-C skips it (what is left goes up with the next run)."""
    pending = uploader.report()
    if pending.pending:
        _say(f"s3: uploading {pending.pending} pending segment(s) ({pending.pending_bytes / 1e6:.1f} MB), "
             f"up to {args.sync_wait:.0f}s (Ctrl-C to leave them for the next run)")
    skip = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, skip.set)
    try:
        report = await uploader.drain(args.sync_wait, state=state, skip=skip)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    for line in report.unreadable:
        _say(f"s3: could not read {line}; it was not uploaded")
    if report.pending:
        reason = f" (last error: {report.last_error})" if report.last_error else ""
        _say(f"s3: {report.pending} segment(s) ({report.pending_bytes / 1e6:.1f} MB) are not in S3 yet{reason}. "
             f"They are safe in {out / 'segments'}; run the same command again to upload them.")
    else:
        _say(f"s3: every closed segment is uploaded and listed ({report.uploaded} this run)")
    return report


async def _main(args: argparse.Namespace, urls: list[str]) -> int:
    async with contextlib.AsyncExitStack() as stack:
        return await _run(args, urls, stack)


async def _run(args: argparse.Namespace, urls: list[str], stack: contextlib.AsyncExitStack) -> int:
    settings = settings_from(args)
    out = Path(args.out)
    ResultSink.prepare(out)
    prompt_paths = [Path(p) for p in args.prompts]
    for path in prompt_paths:
        if not path.is_file():
            raise ConfigError(f"--prompts {path}: no such file")
    try:
        shard = Shard.parse(args.shard) if args.shard else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc

    done_ids, scan = load_done_ids(out / "segments")
    if scan.segments:
        repaired = f", repaired a torn tail of {scan.repaired_bytes} bytes" if scan.repaired_bytes else ""
        corrupt = f", {scan.corrupt_lines} unreadable line(s) ignored" if scan.corrupt_lines else ""
        _say(f"resuming: {len(done_ids):,} done id(s) in {scan.segments} segment(s){repaired}{corrupt}")
    run_id = new_run_id()
    uploader = await _open_s3(args, out, shard or Shard(0, 1), run_id, done_ids, stack) if args.s3 else None
    segment_age = min(args.segment_age, args.sync_interval) if uploader else args.segment_age

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
        sink = ResultSink(out, run_id=run_id, shard_label=(shard or Shard(0, 1)).label,
                          max_segment_bytes=int(args.segment_mb * (1 << 20)), max_segment_age_s=segment_age,
                          on_segment_closed=uploader.segment_closed if uploader else None)
        swarm = Swarm(
            endpoints=endpoints, source=source, sink=sink, stats=stats, settings=settings, model=model,
            retry=RetryPolicy(max_attempts=args.max_attempts), grace_s=args.grace,
            rotate_check_s=min(5.0, max(0.2, segment_age / 5)),
            dispatcher=Dispatcher(endpoints, failure_threshold=args.circuit_failures),
        )
        companions = []
        if uploader is not None:
            uploader.failed_count = lambda: stats.failed
            uploader.on_fatal = lambda error: swarm.request_stop()
            companions.append(uploader.run)

        async def count_total() -> None:
            stats.total = await asyncio.to_thread(count_remaining, prompt_paths, done_ids, shard)

        def snapshot() -> StatsSnapshot:
            if uploader is not None:
                stats.sync_lag = uploader.lag_text()
            return stats.snapshot()

        async def progress() -> None:
            await show_progress(snapshot, live=False if args.plain else None, plain_every_s=args.progress_every)

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
        sync: SyncReport | None = None
        try:
            outcome = await swarm.run([count_total, progress, *companions])
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            try:
                sink.close()
            finally:
                if uploader is not None:
                    ended = not swarm.outcome.interrupted and swarm.outcome.fatal is None
                    sync = await _drain(uploader, args, out, "finished" if ended else "stopped")
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
    if uploader is not None and uploader.fatal is not None:
        raise uploader.fatal
    if outcome.interrupted:
        _say("interrupted: run the same command again to continue where this one stopped")
        return EXIT_INTERRUPTED
    if sync is not None and sync.pending:
        return EXIT_SYNC_PENDING
    return EXIT_FAILURES if snap.failed else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if bool(args.endpoints) == bool(args.simulate):
        parser.error("give exactly one of --endpoints or --simulate N")
    if not args.s3 and (args.delete_uploaded or args.s3_gzip or args.s3_endpoint_url):
        parser.error("--delete-uploaded, --s3-gzip and --s3-endpoint-url need --s3 s3://BUCKET/PREFIX")
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
