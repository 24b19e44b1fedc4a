"""The S3 side of `client.run`: open the store and read the prefix's state before any request
(`open_s3`, which changes nothing), register the run once every check that can refuse the start has
passed (`register_s3`), and the bounded wait for the last uploads at the end. The uploading itself is
client.s3.uploader's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

from client.core.errors import ConfigError
from client.local.sink import host_name
from client.local.source import Shard
from client.run.config import S3Config
from client.run.console import say
from client.s3.manifest import manifest_key, writer_name
from client.s3.resume import S3Start, commit
from client.s3.resume import start as start_s3
from client.s3.segment_upload import PendingSegment
from client.s3.store import S3Error, S3Store, S3Url
from client.s3.uploader import SegmentUploader, SyncReport


async def open_s3(args: S3Config, out: Path, shard: Shard, run_id: str, done_ids: set[str],
                   stack: contextlib.AsyncExitStack, *, failed_count: Callable[[], int],
                   shard_source: str = "", set_aside: Sequence[str] = ()) -> SegmentUploader:
    """Check the bucket, add the done ids held in S3 and find what an earlier run left unuploaded: all
    before any request, so a bad bucket costs nothing, and without writing anything (`register_s3` does)."""
    url = S3Url.parse(args.s3)
    store = await stack.enter_async_context(S3Store(url, endpoint_url=args.s3_endpoint_url))
    writer = writer_name(host_name(), shard.label)
    try:
        found = await start_s3(store, segments_dir=out / "segments", writer=writer, host=host_name(),
                               shard=f"{shard.index}/{shard.count}", run_id=run_id,
                               sync_interval_s=args.sync_interval, done=done_ids, shard_source=shard_source,
                               set_aside=frozenset(set_aside))
    except S3Error as exc:
        raise ConfigError(f"{exc}. Nothing was sent; start again once S3 answers.") from exc

    async def clean_up() -> list[PendingSegment]:
        await commit(store, found, writer=writer, delete_uploaded=args.delete_uploaded)
        _say_cleaned(found)
        return found.pending

    uploader = SegmentUploader(store, found.manifest, found.etag, gzipped=args.s3_gzip,
                               part_size=int(args.s3_part_mb * (1 << 20)), delete_uploaded=args.delete_uploaded,
                               failed_count=failed_count, before_register=clean_up,
                               note=lambda line: say(f"s3: {line}"), lease=found.lease)
    say(f"s3: {url} as writer {writer} ({manifest_key(writer)}): read {found.manifests} manifest(s); "
         f"{found.s3_ids_added:,} more done id(s) from {found.s3_segments} segment index(es) in {found.seconds:.1f}s")
    for line in found.damaged:
        say(f"s3: warning: {line}")
    return uploader


async def register_s3(uploader: SegmentUploader | None) -> None:
    """Once nothing can refuse the start: the held-back clean-up, and this run's manifest as running."""
    if uploader is None:
        return
    try:
        await uploader.register()
    except S3Error as exc:
        raise ConfigError(f"{exc}. Start again once S3 answers.") from exc


def _say_cleaned(found: S3Start) -> None:
    if found.takeover:
        say(f"s3: {found.takeover}")
    for line in found.dropped:
        say(f"s3: {line}")
    if found.pending:
        size = sum(p.size for p in found.pending)
        say(f"s3: {len(found.pending)} segment(s) ({size / 1e6:.1f} MB) closed by an earlier run but not "
             "uploaded: they go up first")
    if found.aborted_uploads:
        say(f"s3: aborted {found.aborted_uploads} unfinished multipart upload(s) an earlier run left behind")
    if found.deleted_local:
        say(f"s3: deleted {found.deleted_local} local segment(s) already uploaded (--delete-uploaded)")


async def drain(uploader: SegmentUploader, args: S3Config, out: Path, state: str, *,
                skip: asyncio.Event) -> SyncReport:
    """Bounded wait for the last uploads; `skip` (set by Ctrl-C, client.run.stop) ends it: what is left goes
    up with the next run."""
    pending = uploader.report()
    if pending.pending and uploader.fatal is None:
        say(f"s3: uploading {pending.pending} pending segment(s) ({pending.pending_bytes / 1e6:.1f} MB), "
             f"up to {args.sync_wait:.0f}s (Ctrl-C to leave them for the next run)")
    report = await uploader.drain(args.sync_wait, state=state, skip=skip)
    for line in report.unreadable:
        say(f"s3: could not read {line}; it was not uploaded")
    for line in report.too_large:
        say(f"s3: error: {line}")
    if report.pending and uploader.fatal is not None:
        say(f"s3: {report.pending} segment(s) ({report.pending_bytes / 1e6:.1f} MB) were not uploaded: this "
            f"writer stopped because another holds its manifest (below). They are safe in {out / 'segments'}.")
    elif report.pending:
        reason = f" (last error: {report.last_error})" if report.last_error else ""
        say(f"s3: {report.pending} segment(s) ({report.pending_bytes / 1e6:.1f} MB) are not in S3 yet{reason}. "
             f"They are safe in {out / 'segments'}; run the same command again to upload them.")
    else:
        say(f"s3: every closed segment is uploaded and listed ({report.uploaded} this run)")
    return report
