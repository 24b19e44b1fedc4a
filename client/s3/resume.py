"""Start-up of a run with --s3: check the bucket, read every writer's manifest, add the done ids held in
S3 to the ledger (from the id indexes, never the segments), and find the local segments an earlier run
closed but did not upload (compared with the manifests), so they go up first.

Every listed segment is checked against its object in one listing of `segments/` (size and ETag, no
segment read): a segment that is missing, truncated or replaced is damaged, and its ids are not done, so
this run generates them again. This writer drops its own damaged entries from its manifest (a local copy
of one goes up again); another writer's stay listed until that writer starts again.

A live writer of this shard, of this writer's name, or of another shard count refuses the start
(client.s3.lease: judged on S3's clock), from the manifests and from the shard's lease
(client.s3.shard_lease), which this writer claims only at `register`.

`start` only reads: a start refused later (settings, a live writer) leaves the prefix and --out as it
found them. Once nothing can refuse the start any more, `commit` cleans what a crash of this writer left
behind: unfinished multipart uploads under its segment names (none on a store without multipart
uploads, which answers NotImplemented), and (with --delete-uploaded) local
segments a manifest already lists. A local segment that was never uploaded but holds ids another writer
has since uploaded (a host that came back after its shard was rerun elsewhere) loses those lines before
upload, so no id is ever stored twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from client.core.errors import ConfigError
from client.core.ids import line_id
from client.local.ledger import read_ids
from client.local.segment_rewrite import rewrite_segment
from client.s3.lease import check_lease, check_same_shard, check_shard_counts, machine_id
from client.s3.manifest import MANIFESTS_PREFIX, SEGMENTS_PREFIX, Manifest, SegmentEntry, decode_ids, listed_problem
from client.s3.segment_upload import NOT_IMPLEMENTED, PendingSegment
from client.s3.shard_lease import LeaseRecord, ShardLease
from client.s3.store import S3Error, S3Store

FETCH_CONCURRENCY = 32


@dataclass
class S3Start:
    """What start-up found; `manifest`/`etag` are this writer's, ready to be extended, and `lease` the
    lease of its shard, to be claimed at register."""

    manifest: Manifest
    etag: str | None
    lease: ShardLease
    pending: list[PendingSegment] = field(default_factory=list)
    manifests: int = 0
    s3_segments: int = 0
    s3_ids_added: int = 0
    dropped: list[str] = field(default_factory=list)
    aborted_uploads: int = 0
    deleted_local: int = 0
    seconds: float = 0.0
    takeover: str | None = None  # the lease of a writer that is gone, taken over (client.s3.lease)
    damaged: list[str] = field(default_factory=list)  # listed segments whose object is not the one uploaded
    # What `commit` does once the start cannot be refused any more:
    duplicates: dict[PendingSegment, set[str]] = field(default_factory=dict)  # ids uploaded since by others
    local: list[Path] = field(default_factory=list)
    entries: dict[str, SegmentEntry] = field(default_factory=dict)


async def read_manifests(store: S3Store) -> list[tuple[Manifest, str]]:
    """Every manifest under the prefix, with its ETag and its age on S3's clock (`Manifest.age_s`). An
    unreadable one stops the start: its ids are unknown."""
    keys = [info.key for info in await store.list_objects(MANIFESTS_PREFIX) if info.key.endswith(".json")]
    blobs = await asyncio.gather(*(store.get_dated(key) for key in keys))
    found: list[tuple[Manifest, str]] = []
    for key, got in zip(keys, blobs, strict=True):
        if got is None:
            continue  # deleted between the listing and the read
        try:
            manifest = Manifest.from_json(got.body, source=str(store.url) + key)
        except ValueError as exc:
            raise ConfigError(f"{exc}. Fix or remove that object, then start again.") from exc
        manifest.age_s = got.age_s
        found.append((manifest, got.etag))
    return found


async def find_damaged(store: S3Store, manifests: Sequence[tuple[Manifest, str]]) -> dict[str, str]:
    """Segment name -> what is wrong, for every listed segment whose object differs from its entry."""
    listed = {info.key: info for info in await store.list_objects(SEGMENTS_PREFIX)}
    damaged: dict[str, str] = {}
    for manifest, _ in manifests:
        for entry in manifest.segments.values():
            info = listed.get(entry.key)
            problem = listed_problem(entry, info.size if info else None, info.etag if info else None)
            if problem is not None:
                damaged[entry.name] = (f"{store.url}{entry.key} (writer {manifest.writer}, {entry.records:,} "
                                       f"record(s)) is damaged: {problem}")
    return damaged


def _ids_from_segment(data: bytes) -> list[str]:
    return [prompt_id for prompt_id in map(line_id, data.split(b"\n")) if prompt_id is not None]


async def fetch_ids(store: S3Store, entry: SegmentEntry) -> list[str]:
    """A segment's ids from its index; from the segment itself when the index is missing or damaged."""
    got = await store.get(entry.ids_key)
    if got is not None and (not entry.ids_sha256 or hashlib.sha256(got[0]).hexdigest() == entry.ids_sha256):
        return decode_ids(got[0])
    body = await store.get(entry.key)
    if body is None:
        raise ConfigError(f"{store.url}{entry.key} is listed in a manifest but missing from S3 (and so is a "
                          "usable id index): restore it, or remove its entry from the manifest and start again")
    data = await asyncio.to_thread(gzip.decompress, body[0]) if entry.gzip else body[0]
    return await asyncio.to_thread(_ids_from_segment, data)


async def fetch_done_ids(store: S3Store, entries: Sequence[SegmentEntry], done: set[str],
                        watch: frozenset[str] = frozenset(),
                        concurrency: int = FETCH_CONCURRENCY) -> tuple[int, set[str]]:
    """Add the ids of `entries` to `done`; returns (ids added, which of `watch` were seen)."""
    remaining = iter(entries)
    added = 0
    seen: set[str] = set()

    async def worker() -> None:
        nonlocal added
        for entry in remaining:  # one shared iterator: every entry is taken by exactly one worker
            ids = await fetch_ids(store, entry)
            before = len(done)
            done.update(ids)
            added += len(done) - before
            if watch:
                seen.update(watch.intersection(ids))

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, len(entries))):
            group.create_task(worker())
    return added, seen


def pending_from_disk(path: Path) -> PendingSegment:
    """A closed local segment as the uploader needs it (blocking: call in a thread)."""
    ids_path = path.with_suffix(".ids")
    records = len(read_ids(ids_path))
    tokens = 0
    with path.open("rb") as handle:
        for line in handle:
            with contextlib.suppress(orjson.JSONDecodeError, TypeError, KeyError, ValueError, AttributeError):
                tokens += int(orjson.loads(line)["usage"].get("completion_tokens", 0))
    stat = path.stat()
    return PendingSegment(path.stem, path, ids_path, records, stat.st_size, tokens, stat.st_mtime)


def drop_ids(segment: PendingSegment, drop: set[str]) -> PendingSegment | None:
    """Rewrite a never-uploaded segment without the lines of `drop`; None when nothing is left."""
    done = rewrite_segment(segment.path, lambda line: line_id(line) in drop, remove_if_empty=True)
    return None if done.removed else pending_from_disk(segment.path)


def _local_state(segments_dir: Path, uploaded: set[str]) -> tuple[list[Path], dict[PendingSegment, set[str]]]:
    """The local segments, and those no manifest lists (with their ids). Every local segment has its
    sidecar here: the local ledger scan has just rebuilt any a crash left out."""
    local = sorted(segments_dir.glob("*.jsonl")) if segments_dir.is_dir() else []
    pending: dict[PendingSegment, set[str]] = {}
    for path in local:
        if path.stem in uploaded or not path.with_suffix(".ids").exists():
            continue
        segment = pending_from_disk(path)
        if segment.records:
            pending[segment] = set(read_ids(segment.ids_path))
    return local, pending


def _delete_uploaded(local: list[Path], entries: dict[str, SegmentEntry]) -> int:
    """Delete the local segments a manifest lists with the same size (a crash came between the two)."""
    deleted = 0
    for path in local:
        entry = entries.get(path.stem)
        if entry is not None and path.stat().st_size == entry.bytes:
            path.with_suffix(".ids").unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            deleted += 1
    return deleted


async def start(store: S3Store, *, segments_dir: Path, writer: str, host: str, shard: str, run_id: str,
                sync_interval_s: float, done: set[str], shard_source: str = "",
                set_aside: frozenset[str] = frozenset()) -> S3Start:
    """What a run with --s3 reads before its first request, changing nothing (see `commit`); `done` gains
    the ids found in S3, and a live writer of this name or of another shard count refuses the start.

    `set_aside`: the local segments whose damaged lines the ledger scan moved aside. One that was uploaded
    whole (its object matches its entry) has its ids read from S3 too, so its whole copy there counts and
    nothing is generated twice."""
    began = time.perf_counter()
    await store.check_bucket()
    manifests = await read_manifests(store)
    machine = machine_id()
    url = str(store.url)
    check_shard_counts((m for m, _ in manifests), writer=writer, shard=shard, url=url, machine=machine)
    check_same_shard((m for m, _ in manifests), writer=writer, shard=shard, url=url, machine=machine)
    mine = next(((m, etag) for m, etag in manifests if m.writer == writer), None)
    takeover = check_lease(mine[0], machine=machine) if mine else None  # before anything is changed
    lease = ShardLease(store, LeaseRecord(writer=writer, host=host, shard=shard, machine=machine, pid=os.getpid(),
                                          run=run_id, sync_interval_s=sync_interval_s))
    await lease.check()
    manifest = mine[0] if mine else Manifest(writer=writer, host=host, shard=shard)
    manifest.machine, manifest.pid = machine, os.getpid()
    manifest.run, manifest.state, manifest.sync_interval_s = run_id, "running", sync_interval_s
    manifest.shard_source = shard_source
    result = S3Start(manifest, mine[1] if mine else None, lease, manifests=len(manifests), takeover=takeover)

    damaged = await find_damaged(store, manifests)
    for name, problem in damaged.items():
        own = manifest.segments.pop(name, None) is not None
        result.damaged.append(f"{problem}; its ids are not done and are generated again"
                              + ("; dropped from this writer's manifest" if own else ""))
    entries = {entry.name: entry for m, _ in manifests for entry in m.segments.values() if entry.name not in damaged}
    local, pending = await asyncio.to_thread(_local_state, segments_dir, set(entries))
    watch_ids = frozenset(i for ids in pending.values() for i in ids)

    local_names = {path.stem for path in local}
    remote = [entry for name, entry in entries.items() if name not in local_names or name in set_aside]
    result.s3_segments = len(remote)
    result.s3_ids_added, overlap = await fetch_done_ids(store, remote, done, watch_ids)

    for segment, ids in pending.items():
        duplicates = ids & overlap
        if duplicates:
            result.duplicates[segment] = duplicates
        else:
            result.pending.append(segment)
    result.local, result.entries = local, entries
    result.seconds = time.perf_counter() - began
    return result


async def commit(store: S3Store, found: S3Start, *, writer: str, delete_uploaded: bool = False) -> None:
    """The clean-up `start` found, done once nothing can refuse the start any more (a refused start
    changes nothing): drop the lines other writers have uploaded since from never-uploaded segments,
    abort this writer's unfinished multipart uploads, and (--delete-uploaded) delete listed local segments."""
    for segment, duplicates in found.duplicates.items():
        kept = await asyncio.to_thread(drop_ids, segment, duplicates)
        found.dropped.append(f"{segment.path.name}: {len(duplicates)} result(s) another writer has uploaded "
                             "since were dropped before upload")
        if kept is not None:
            found.pending.append(kept)
    found.duplicates.clear()

    try:
        unfinished = await store.list_multipart(f"{SEGMENTS_PREFIX}{writer}-")
    except S3Error as exc:
        if exc.code != NOT_IMPLEMENTED:
            raise
        unfinished = []  # a store without multipart uploads has none left behind
    for key, upload_id in unfinished:
        with contextlib.suppress(S3Error):
            await store.abort_multipart(key, upload_id)
            found.aborted_uploads += 1

    if delete_uploaded:
        found.deleted_local = await asyncio.to_thread(_delete_uploaded, found.local, found.entries)
