"""Result segments on local disk: append and flush per record, rotate, the done-ID ledger, failures.

Layout under --out:
    segments/<name>.jsonl   ResultRecord lines, appended and flushed one by one
    segments/<name>.ids     the segment's ids, one per line, written when the segment is closed
    failures/failures-<run>.jsonl   FailureRecord lines of one run (retried on the next run)

A segment is never appended to after its run closes it (or crashes): a new run opens new segments. Reading
the ledger back at start-up (and repairing what a crash left) is client.local.ledger's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson

from client.core.errors import SinkError, map_write_error
from client.core.records import FailureRecord, ResultRecord
from client.local.ledger import write_ids

SEGMENTS_DIR = "segments"
FAILURES_DIR = "failures"


@dataclass(frozen=True, slots=True)
class ClosedSegment:
    path: Path
    ids_path: Path
    records: int
    size: int
    completion_tokens: int = 0


def _write_all(handle: BinaryIO, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = handle.write(view)
        if not written:
            raise OSError(28, "no progress writing (disk full?)")
        view = view[written:]


def _finish_segment(handle: BinaryIO, segment: ClosedSegment, ids: list[str]) -> ClosedSegment:
    """Make a closed segment durable, then write its sidecar: the sidecar exists only for a whole segment."""
    try:
        os.fsync(handle.fileno())
        handle.close()
        write_ids(segment.ids_path, ids)
    except OSError as exc:
        with contextlib.suppress(OSError):
            handle.close()
        raise SinkError(f"cannot close segment {segment.path}: {exc.strerror or exc}") from exc
    return segment


def host_name() -> str:
    """The short host name that segment names (and S3 manifest names) carry."""
    return socket.gethostname().split(".")[0] or "host"


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex()


class ResultSink:
    """Owns the open segment and the failures file of one run."""

    def __init__(
        self,
        out_dir: Path,
        *,
        run_id: str,
        shard_label: str = "0of1",
        max_segment_bytes: int = 256 << 20,
        max_segment_age_s: float = 300.0,
        on_segment_closed: Callable[[ClosedSegment], None] | None = None,
    ) -> None:
        self.out_dir = out_dir
        self.segments_dir = out_dir / SEGMENTS_DIR
        self.failures_path = out_dir / FAILURES_DIR / f"failures-{run_id}.jsonl"
        self._prefix = f"{host_name()}-{shard_label}-{run_id}"
        self.max_segment_bytes = max_segment_bytes
        self.max_segment_age_s = max_segment_age_s
        self.on_segment_closed = on_segment_closed
        self._sequence = 0
        self._handle: BinaryIO | None = None
        self._path: Path | None = None
        self._ids: list[str] = []
        self._bytes = 0
        self._tokens = 0
        self._opened_at = 0.0
        self._failures: BinaryIO | None = None
        # After a failed write the open segment's tail is unknown: its sidecar must not be written, so
        # the next run rescans (and repairs) the segment instead of trusting an id list.
        self._broken = False
        # Closing a segment (fsync, close, sidecar) runs on one worker thread when an event loop is
        # running, so a slow disk never blocks the streams; segments are finished in order.
        self._closer: ThreadPoolExecutor | None = None
        self._closing: list[tuple[Future[ClosedSegment], list[bool]]] = []
        self._close_error: SinkError | None = None

    @staticmethod
    def prepare(out_dir: Path) -> None:
        """Fail before any request is sent when --out cannot be written."""
        try:
            (out_dir / SEGMENTS_DIR).mkdir(parents=True, exist_ok=True)
            (out_dir / FAILURES_DIR).mkdir(parents=True, exist_ok=True)
            probe = out_dir / f".write-probe-{os.getpid()}"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as exc:
            raise map_write_error(exc, f"--out {out_dir} cannot be written: {exc.strerror or exc}",
                               ". Choose a writable directory.") from exc

    def _open_segment(self) -> BinaryIO:
        self._sequence += 1
        self._path = self.segments_dir / f"{self._prefix}-{self._sequence:05d}.jsonl"
        # Unbuffered: a line reaches the OS in one write or fails, never half-held in our own buffer.
        self._handle = self._path.open("ab", buffering=0)
        self._ids = []
        self._bytes = 0
        self._tokens = 0
        self._opened_at = time.monotonic()
        return self._handle

    def write_result(self, record: ResultRecord) -> None:
        line = orjson.dumps(record) + b"\n"
        self._raise_close_error()
        if self._broken:
            raise SinkError("the results sink failed earlier; refusing to write more")
        try:
            handle = self._handle or self._open_segment()
            _write_all(handle, line)
        except OSError as exc:
            self._broken = True
            raise SinkError(f"cannot append to {self._path}: {exc.strerror or exc}") from exc
        self._ids.append(record["id"])
        self._bytes += len(line)
        self._tokens += int(record["usage"].get("completion_tokens", 0))
        if self._bytes >= self.max_segment_bytes:
            self.close_segment()

    def write_failure(self, record: FailureRecord) -> None:
        try:
            if self._failures is None:
                self._failures = self.failures_path.open("ab", buffering=0)
            _write_all(self._failures, orjson.dumps(record) + b"\n")
        except OSError as exc:
            raise SinkError(f"cannot append to {self.failures_path}: {exc.strerror or exc}") from exc

    def rotate_if_due(self) -> None:
        """Close the open segment once it is old enough, so it can be synced (called periodically)."""
        self._raise_close_error()
        if self._handle is not None and time.monotonic() - self._opened_at >= self.max_segment_age_s:
            self.close_segment()

    def close_segment(self) -> None:
        handle, path = self._handle, self._path
        if handle is None or path is None:
            return
        self._handle = None
        if self._broken:
            with contextlib.suppress(OSError):
                handle.close()
            return
        segment = ClosedSegment(path, path.with_suffix(".ids"), len(self._ids), self._bytes, self._tokens)
        ids = self._ids
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            _finish_segment(handle, segment, ids)
            self._announce(segment)
            return
        if self._closer is None:
            self._closer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="segment-close")
        job = self._closer.submit(_finish_segment, handle, segment, ids)
        delivered = [False]
        self._closing.append((job, delivered))
        job.add_done_callback(lambda done: loop.call_soon_threadsafe(self._deliver, done, delivered))

    def _deliver(self, job: Future[ClosedSegment], delivered: list[bool]) -> None:
        if delivered[0]:
            return
        delivered[0] = True
        self._closing = [entry for entry in self._closing if entry[0] is not job]
        error = job.exception()
        if isinstance(error, SinkError):
            self._close_error = self._close_error or error
            return
        if error is not None:
            raise error
        self._announce(job.result())

    def _announce(self, segment: ClosedSegment) -> None:
        if self.on_segment_closed is not None:
            self.on_segment_closed(segment)

    def _raise_close_error(self) -> None:
        if self._close_error is not None:
            raise self._close_error

    def close(self) -> None:
        try:
            self.close_segment()
            if self._closer is not None:
                self._closer.shutdown(wait=True)
                self._closer = None
            for job, delivered in list(self._closing):
                self._deliver(job, delivered)
            self._raise_close_error()
        finally:
            if self._failures is not None:
                self._failures.close()
                self._failures = None
