"""Rolling upload of closed segments to S3, and this writer's manifest.

One long-lived coroutine (`SegmentUploader.run`, a companion in the swarm's TaskGroup) uploads the
segments the sink closes, oldest first (each one by client.s3.segment_upload: body, id index, checks),
then the manifest, written whole after each upload. The sink's callback only records the segment and
wakes the uploader, so the request loop never waits for S3.

When S3 fails, the uploader backs off (up to `max_backoff_s`) and tries the same segment again, for as
long as the run lasts; the run goes on writing locally meanwhile. At the end, `drain` gets a bounded
time. A segment leaves the pending list only once a manifest listing it is stored; only then may its
local files be deleted (with --delete-uploaded). A segment that cannot go up at all (its local file is
gone, or it is over what one PUT takes on a store without multipart uploads) leaves the list with its
reason, and the segments behind it go on.

The manifest is written with a conditional PUT (If-Match the ETag we last wrote), so a second client
using the same writer name (same host and shard) is caught instead of silently overwriting ours. With a
shard lease (client.s3.shard_lease), `register` claims it first, each manifest write while running renews
it, and the final one releases it.

The heartbeat (`heartbeat`, a companion of its own beside `run`, and beside the final drain) renews the
lease and rewrites the manifest once per sync interval on its own timer, never behind a data upload: a
segment PUT held for longer than the lease lasts must not let a second client judge this writer gone.
Manifest writes (and so lease writes) go one at a time, under one lock; a data upload never holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from client.core.errors import ManifestConflict, RegenError, SegmentTooLarge
from client.core.stats import SyncView
from client.local.sink import ClosedSegment
from client.s3.manifest import Manifest, manifest_key, same_etag, single_etag
from client.s3.segment_upload import SINGLE_PUT_LIMIT, PendingSegment, SegmentPut
from client.s3.shard_lease import ShardLease
from client.s3.store import S3AccessError, S3Conflict, S3Error, S3Store, describe_error


@dataclass(frozen=True, slots=True)
class SyncReport:
    uploaded: int
    pending: int
    pending_bytes: int
    last_error: str
    unreadable: tuple[str, ...]
    too_large: tuple[str, ...] = ()  # segments over one PUT on a store without multipart: not in S3


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
        before_register: Callable[[], Awaitable[Iterable[PendingSegment]]] | None = None,
        max_backoff_s: float = 60.0,
        single_put_limit: int = SINGLE_PUT_LIMIT,
        note: Callable[[str], None] = lambda line: None,
        lease: ShardLease | None = None,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.lease = lease
        self.note = note
        # `note`: a line for the console, said once (e.g. the store refuses multipart uploads).
        self.put = SegmentPut(store, gzipped=gzipped, part_size=part_size, single_put_limit=single_put_limit,
                              note=note)
        self.delete_uploaded = delete_uploaded
        self.failed_count = failed_count  # the run's failed prompts, stored in each manifest
        self.max_backoff_s = max_backoff_s
        self.fatal: RegenError | None = None
        self.uploaded = 0
        self.last_error = ""
        self._etag = manifest_etag
        self._conditional = True
        self._unconfirmed: list[str] = []  # ETags of manifest bodies sent whose reply was lost
        self._pending: dict[str, PendingSegment] = {}
        self._unreadable: list[str] = []
        self._too_large: list[str] = []
        self._dirty = False
        self._manifest_lock = asyncio.Lock()  # the heartbeat's writes and the uploads' go one at a time
        self._final_state = ""
        self._failures = 0
        self._wake = asyncio.Event()
        # The start-up clean-up held back until nothing can refuse the start (client.s3.resume.commit); it
        # returns the segments an earlier run closed but did not upload, which go up first.
        self._before_register = before_register

    async def register(self) -> None:
        """Claim this writer's shard and name once the start cannot be refused any more: the shard's lease
        (ManifestConflict when a live writer took it meanwhile), the held-back clean-up, then the manifest
        stored as running (a refused start leaves the prefix as it found it)."""
        if self.lease is not None:
            takeover = await self.lease.claim()
            if takeover:
                self.note(takeover)
        if self._before_register is not None:
            for segment in await self._before_register():
                self.add(segment)
            self._before_register = None
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
                          self.last_error, tuple(self._unreadable), tuple(self._too_large))

    # -- the loop --------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Runs until cancelled (a companion of the swarm); a conflict over the manifest is raised, which
        ends the swarm's TaskGroup with it (another writer owns this name: nothing more may go up)."""
        while True:
            if self.fatal is not None:
                raise self.fatal
            if not self._pending and not self._dirty:
                await self._wake.wait()
                self._wake.clear()
                continue
            await self._work()

    @property
    def heartbeat_s(self) -> float:
        return self.manifest.sync_interval_s if self.manifest.sync_interval_s > 0 else 60.0

    async def heartbeat(self) -> None:
        """Runs until cancelled (a companion of the swarm, beside `run`): once per sync interval, renew the
        lease and rewrite the manifest, so that a second client of this name or shard sees this writer
        live (client.s3.lease) even while one segment upload takes longer than the lease lasts. A lease
        taken over meanwhile is raised (ManifestConflict), which ends the swarm's TaskGroup with it."""
        while True:
            await asyncio.sleep(self.heartbeat_s)
            await self.beat()

    async def beat(self) -> None:
        """One heartbeat; a failure to reach S3 is shown and tried again at the next one."""
        if self.fatal is not None:
            raise self.fatal
        try:
            async with self._manifest_lock:
                # Once the run has ended, the final manifest write (and the lease's release) is the
                # uploads' own: a heartbeat then would only race it.
                if self.manifest.state == "running":
                    await self._renew_and_put()
        except ManifestConflict as exc:
            self.fatal = exc
            self._wake.set()  # `run` raises it too, whichever the TaskGroup hears first
            raise
        except (S3Error, S3AccessError) as exc:
            self.last_error = describe_error(exc)
        except Exception as exc:
            # As in `_work`: a sync hiccup must not end a days-long run; the console shows it.
            self.last_error = describe_error(RuntimeError(f"{type(exc).__name__}: {exc}"))

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
                # The last uploads may be slow too: the lease must not lapse behind them.
                beating = group.create_task(self._beat_quietly())
                await asyncio.wait([work, *watchers], return_when=asyncio.FIRST_COMPLETED)
                for task in (work, *watchers, beating):
                    task.cancel()
        return self.report()

    async def _beat_quietly(self) -> None:
        """The heartbeat during the drain: a conflict is kept in `fatal` (the drain's work sees it too)."""
        with contextlib.suppress(ManifestConflict):
            await self.heartbeat()

    async def _work(self) -> None:
        """Upload until nothing is pending, backing off on failures; a conflict is fatal."""
        while (self._pending or self._dirty) and self.fatal is None:
            try:
                await self._step()
            except ManifestConflict as exc:
                self.fatal = exc
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
                entry = await self.put.upload(segment)
            except OSError as exc:
                # The local file is gone or unreadable: nothing can upload it, so say so and go on.
                self._unreadable.append(f"{segment.path}: {exc.strerror or exc}")
                del self._pending[segment.name]
                return
            except SegmentTooLarge as exc:
                # No retry can help: say so (the console's last error, the summary) and go on.
                self._too_large.append(str(exc))
                self.put.note(f"error: {exc}")
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

    # -- the manifest ----------------------------------------------------------------------------------

    async def write_manifest(self) -> None:
        """Store the manifest whole (one PUT: readers see the old or the new one, never a mix); while
        running, the shard's lease is renewed first, and once the run has ended it is released after."""
        async with self._manifest_lock:
            if self.manifest.state == "running":
                await self._renew_and_put(clean=True)
                return
            await self._put_manifest(clean=True)
            if self.lease is not None:
                await self.lease.release()

    async def _renew_and_put(self, *, clean: bool = False) -> None:
        if self.lease is not None:
            retaken = await self.lease.renew()
            if retaken:
                self.note(retaken)
        await self._put_manifest(clean=clean)

    async def _put_manifest(self, *, clean: bool) -> None:
        """One manifest PUT; `clean`: it stores every change made so far (a heartbeat's PUT may have
        serialized the manifest before an upload changed it, so it leaves the change to be written)."""
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
            return await self._put_manifest(clean=clean)
        except S3Error as exc:
            if exc.code == "NotImplemented" and self._conditional:
                self._conditional = False  # a store without conditional writes: per-writer keys still hold
                return await self._put_manifest(clean=clean)
            raise
        self._etag = etag
        self._unconfirmed.clear()
        if clean:
            self._dirty = False
