"""Rolling upload of closed segments to S3, and this writer's manifest.

One long-lived coroutine (`SegmentUploader.run`, a companion in the swarm's TaskGroup) uploads the
segments the sink closes, oldest first: the body (gzip when asked, multipart when large), the id index,
a check of both against the bytes sent (the ETag S3 reports must be the one those bytes give, and the
length must match), then the manifest, written whole after each upload. The sink's callback only records
the segment and wakes the uploader, so the request loop never waits for S3.

When S3 fails, the uploader backs off (up to `max_backoff_s`) and tries the same segment again, for as
long as the run lasts; the run goes on writing locally meanwhile. At the end, `drain` gets a bounded
time. A segment leaves the pending list only once a manifest listing it is stored; only then may its
local files be deleted (with --delete-uploaded).

The manifest is written with a conditional PUT (If-Match the ETag we last wrote), so a second client
using the same writer name (same host and shard) is caught instead of silently overwriting ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from client.core.errors import ManifestConflict, RegenError
from client.core.ids import decode_ledger
from client.core.stats import SyncView
from client.local.sink import ClosedSegment
from client.s3.manifest import (
    Manifest,
    SegmentEntry,
    encode_ids,
    ids_key,
    manifest_key,
    multipart_etag,
    same_etag,
    segment_key,
    single_etag,
)
from client.s3.store import S3AccessError, S3Conflict, S3Error, S3Store, describe_error

READ_BLOCK = 4 << 20


@dataclass(frozen=True, slots=True)
class PendingSegment:
    """A closed local segment not yet listed in a manifest. `closed_at` is wall-clock time."""

    name: str
    path: Path
    ids_path: Path
    records: int
    size: int
    completion_tokens: int
    closed_at: float

    @classmethod
    def from_closed(cls, segment: ClosedSegment) -> PendingSegment:
        return cls(segment.path.stem, segment.path, segment.ids_path, segment.records, segment.size,
                   segment.completion_tokens, time.time())


@dataclass(frozen=True, slots=True)
class SyncReport:
    uploaded: int
    pending: int
    pending_bytes: int
    last_error: str
    unreadable: tuple[str, ...]


class BodyReader:
    """A segment file read as upload parts of at least `part_size` bytes (the last may be smaller), gzip
    on the fly when asked; MD5 per part, SHA-256 of the whole body. Blocking: call it in a thread."""

    def __init__(self, path: Path, gzipped: bool, part_size: int) -> None:
        self._file: BinaryIO = path.open("rb")
        self._remaining = path.stat().st_size
        self._compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if gzipped else None  # 31: gzip container
        self.part_size = part_size
        self.sha256 = hashlib.sha256()
        self.total = 0
        self.eof = False

    def next_part(self) -> tuple[bytes, bytes]:
        chunks: list[bytes] = []
        size = 0
        while size < self.part_size and not self.eof:
            # Uncompressed parts come out exactly part_size long; gzip output size is only known after.
            wanted = READ_BLOCK if self._compressor else min(READ_BLOCK, self.part_size - size)
            block = self._file.read(max(1, min(wanted, self._remaining)))
            self._remaining -= len(block)
            if not block or self._remaining <= 0:
                self.eof = True
            data = self._compressor.compress(block) if self._compressor else block
            if self.eof and self._compressor:
                data += self._compressor.flush()
            chunks.append(data)
            size += len(data)
        part = b"".join(chunks)
        self.sha256.update(part)
        self.total += len(part)
        return part, hashlib.md5(part).digest()

    def close(self) -> None:
        self._file.close()


def _read_ids_blob(path: Path) -> bytes:
    return encode_ids(decode_ledger(path.read_bytes()))


def _delete_local(segment: PendingSegment) -> None:
    for path in (segment.path, segment.ids_path):
        with contextlib.suppress(OSError):  # a copy left behind is harmless: the manifest lists it
            path.unlink()


async def _wait_for(event: asyncio.Event) -> None:
    await event.wait()



class SegmentUploader:
    """Owns the pending list, the uploads and this writer's manifest for one run."""

    def __init__(
        self,
        store: S3Store,
        manifest: Manifest,
        manifest_etag: str | None,
        *,
        gzipped: bool = False,
        part_size: int = 64 << 20,
        delete_uploaded: bool = False,
        failed_count: Callable[[], int] = lambda: 0,
        on_fatal: Callable[[RegenError], None] = lambda error: None,
        max_backoff_s: float = 60.0,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.gzipped = gzipped
        self.part_size = part_size
        self.delete_uploaded = delete_uploaded
        self.failed_count = failed_count
        self.on_fatal = on_fatal
        self.max_backoff_s = max_backoff_s
        self.fatal: RegenError | None = None
        self.uploaded = 0
        self.last_error = ""
        self._etag = manifest_etag
        self._conditional = True
        self._unconfirmed: list[str] = []  # ETags of manifest bodies sent whose reply was lost
        self._pending: dict[str, PendingSegment] = {}
        self._unreadable: list[str] = []
        self._dirty = False
        self._final_state = ""
        self._failures = 0
        self._wake = asyncio.Event()
        # The start-up clean-up held back until nothing can refuse the start (client.s3.resume.commit).
        self.before_register: Callable[[], Awaitable[None]] | None = None

    async def register(self) -> None:
        """Claim this writer's name once the start cannot be refused any more: the held-back clean-up,
        then the manifest stored as running (a refused start leaves the prefix as it found it)."""
        if self.before_register is not None:
            await self.before_register()
            self.before_register = None
        await self.write_manifest()

    # -- feeding (event loop thread, never blocks) -----------------------------------------------------

    def add(self, segment: PendingSegment) -> None:
        if segment.name not in self.manifest.segments:
            self._pending[segment.name] = segment
            self._wake.set()

    def segment_closed(self, segment: ClosedSegment) -> None:
        """The sink's `on_segment_closed` callback."""
        self.add(PendingSegment.from_closed(segment))

    # -- what the console shows ------------------------------------------------------------------------

    def view(self) -> SyncView:
        """The uploader's state in numbers, for the run's snapshot (the console words it)."""
        oldest = min((s.closed_at for s in self._pending.values()), default=None)
        return SyncView(uploaded=self.uploaded, pending=len(self._pending),
                        pending_bytes=sum(s.size for s in self._pending.values()),
                        oldest_pending_s=None if oldest is None else max(0.0, time.time() - oldest),
                        last_error=self.last_error,
                        stopped="" if self.fatal is None else describe_error(self.fatal))

    def report(self) -> SyncReport:
        return SyncReport(self.uploaded, len(self._pending), sum(s.size for s in self._pending.values()),
                          self.last_error, tuple(self._unreadable))

    # -- the loop --------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Runs until cancelled (a companion of the swarm), or until a fatal conflict."""
        while self.fatal is None:
            if not self._pending and not self._dirty:
                try:
                    async with asyncio.timeout(self.heartbeat_s):
                        await self._wake.wait()
                except TimeoutError:
                    # The heartbeat: a fresh `updated` tells a second writer of this name that this one
                    # lives (client.s3.lease), even while no segment closes.
                    self._dirty = True
                    continue
                self._wake.clear()
                continue
            await self._work()

    @property
    def heartbeat_s(self) -> float:
        return self.manifest.sync_interval_s if self.manifest.sync_interval_s > 0 else 60.0

    async def drain(self, timeout_s: float, *, state: str, skip: asyncio.Event | None = None) -> SyncReport:
        """At the end of the run: upload what is pending for at most `timeout_s` (or until `skip` is set),
        then record `state` ("finished" or "stopped") in the manifest once nothing is pending."""
        if self.fatal is None:
            self._final_state = state
            self._dirty = True
            async with asyncio.TaskGroup() as group:
                work = group.create_task(self._work())
                watchers = [group.create_task(asyncio.sleep(timeout_s))]
                if skip is not None:
                    watchers.append(group.create_task(_wait_for(skip)))
                await asyncio.wait([work, *watchers], return_when=asyncio.FIRST_COMPLETED)
                for task in (work, *watchers):
                    task.cancel()
        return self.report()

    async def _work(self) -> None:
        """Upload until nothing is pending, backing off on failures; a conflict is fatal."""
        while (self._pending or self._dirty) and self.fatal is None:
            try:
                await self._step()
            except ManifestConflict as exc:
                self.fatal = exc
                self.on_fatal(exc)
                return
            except (S3Error, S3AccessError) as exc:
                self.last_error = describe_error(exc)
            except Exception as exc:
                # Anything else from the S3 stack is retried too: the local disk holds the data, and a
                # days-long run must not die of a sync hiccup; the console shows what went wrong.
                self.last_error = describe_error(RuntimeError(f"{type(exc).__name__}: {exc}"))
            else:
                self._failures = 0
                self.last_error = ""
                continue
            self._failures += 1
            await asyncio.sleep(min(self.max_backoff_s, 2.0 ** (self._failures - 1)) * random.uniform(0.5, 1.0))

    async def _step(self) -> None:
        segment = next(iter(self._pending.values()), None)
        if segment is not None and segment.name not in self.manifest.segments:
            try:
                entry = await self._upload(segment)
            except OSError as exc:
                # The local file is gone or unreadable: nothing can upload it, so say so and go on.
                self._unreadable.append(f"{segment.path}: {exc.strerror or exc}")
                del self._pending[segment.name]
                return
            self.manifest.segments[segment.name] = entry
            self._dirty = True
        if self._dirty:
            await self.write_manifest()
        if segment is not None:
            del self._pending[segment.name]
            self.uploaded += 1
            if self.delete_uploaded:
                await asyncio.to_thread(_delete_local, segment)
        if not self._pending and self._final_state and self.manifest.state != self._final_state:
            self.manifest.state = self._final_state
            self._dirty = True

    # -- one segment -----------------------------------------------------------------------------------

    async def _upload(self, segment: PendingSegment) -> SegmentEntry:
        key = segment_key(segment.name, self.gzipped)
        content_type = "application/gzip" if self.gzipped else "application/x-ndjson"
        reader = await asyncio.to_thread(BodyReader, segment.path, self.gzipped, self.part_size)
        try:
            part, md5 = await asyncio.to_thread(reader.next_part)
            if reader.eof:
                etag, encryption = await self.store.put(key, part, md5, content_type=content_type)
                expected = single_etag(md5)
            else:
                etag, encryption, expected = await self._upload_multipart(key, content_type, reader, part, md5)
        finally:
            reader.close()
        await self._verify(key, reader.total, expected, etag, encryption)
        ids_blob = await asyncio.to_thread(_read_ids_blob, segment.ids_path)
        ids_md5 = hashlib.md5(ids_blob).digest()
        ids_etag, ids_encryption = await self.store.put(ids_key(segment.name), ids_blob, ids_md5,
                                                        content_type="application/gzip")
        if not ids_encryption.startswith("aws:kms") and not same_etag(ids_etag, single_etag(ids_md5)):
            raise S3Error(f"checksum mismatch on {ids_key(segment.name)}: S3 reports {ids_etag}")
        return SegmentEntry(
            name=segment.name, key=key, ids_key=ids_key(segment.name), records=segment.records,
            completion_tokens=segment.completion_tokens, bytes=segment.size, stored_bytes=reader.total,
            gzip=self.gzipped, sha256=reader.sha256.hexdigest(), etag=etag.strip('"'),
            ids_sha256=hashlib.sha256(ids_blob).hexdigest(), uploaded=time.time(),
        )

    async def _upload_multipart(self, key: str, content_type: str, reader: BodyReader, part: bytes,
                                md5: bytes) -> tuple[str, str, str]:
        upload_id = await self.store.create_multipart(key, content_type)
        md5s: list[bytes] = []
        etags: list[str] = []
        try:
            while True:
                md5s.append(md5)
                etags.append(await self.store.upload_part(key, upload_id, len(md5s), part, md5))
                if reader.eof:
                    break
                part, md5 = await asyncio.to_thread(reader.next_part)
            etag, encryption = await self.store.complete_multipart(key, upload_id, etags)
        except S3Error:
            # Best effort: an upload left behind is aborted at the next start-up anyway.
            with contextlib.suppress(S3Error):
                await self.store.abort_multipart(key, upload_id)
            raise
        return etag, encryption, multipart_etag(md5s)

    async def _verify(self, key: str, size: int, expected: str, reported: str, encryption: str) -> None:
        info = await self.store.head(key)
        if info is None:
            raise S3Error(f"{key} is missing right after its upload")
        if info.size != size:
            raise S3Error(f"{key}: S3 holds {info.size} bytes, {size} were sent")
        # With SSE-KMS the ETag is not an MD5; S3 has still checked each body against its Content-MD5.
        matches = same_etag(reported, expected) and same_etag(info.etag, expected)
        if not encryption.startswith("aws:kms") and not matches:
            raise S3Error(f"checksum mismatch on {key}: S3 reports ETag {info.etag}, the bytes sent give {expected}")

    # -- the manifest ----------------------------------------------------------------------------------

    async def write_manifest(self) -> None:
        """Store the manifest whole (one PUT: readers see the old or the new one, never a mix)."""
        key = manifest_key(self.manifest.writer)
        self.manifest.failed = self.failed_count()
        body = self.manifest.to_json()
        md5 = hashlib.md5(body).digest()
        # Remembered before sending: if the reply is lost (error, timeout, cancellation), a later If-Match
        # failure can tell our own stored body from another writer's.
        self._unconfirmed.append(single_etag(md5))
        try:
            etag, _ = await self.store.put(
                key, body, md5, content_type="application/json",
                if_match=self._etag if self._conditional and self._etag else None,
                if_none_match=self._conditional and not self._etag)
        except S3Conflict:
            current = await self.store.head(key)
            if current is None or not any(same_etag(current.etag, sent) for sent in self._unconfirmed):
                raise ManifestConflict(
                    f"another client writes {self.store.url.key(key)}: two clients run as writer "
                    f"{self.manifest.writer!r} (same host name and shard) on one prefix. Stop one of them; "
                    "give every host its own --shard K/N") from None
            # An earlier write of ours was stored but its reply was lost: go on from it.
            self._etag = current.etag
            return await self.write_manifest()
        except S3Error as exc:
            if exc.code == "NotImplemented" and self._conditional:
                self._conditional = False  # a store without conditional writes: per-writer keys still hold
                return await self.write_manifest()
            raise
        self._etag = etag
        self._unconfirmed.clear()
        self._dirty = False
