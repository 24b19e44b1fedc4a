"""Result segments on local disk: append and flush per record, rotate, the done-ID ledger, failures.

Layout under --out:
    segments/<name>.jsonl   ResultRecord lines, appended and flushed one by one
    segments/<name>.ids     the segment's ids, one per line, written when the segment is closed
    failures/failures-<run>.jsonl   FailureRecord lines of one run (retried on the next run)

A segment is never appended to after its run closes it (or crashes): a new run opens new segments. Reading
the ledger back at start-up (and repairing what a crash left) is client.local.ledger's.

The sink is synchronous. Appending a line is one unbuffered write, done where the record is made (the
event loop). A segment that is full or old enough is only retired there; making it durable (fsync, close,
sidecar) is `rotate`'s, which the swarm calls from a worker thread (asyncio.to_thread), so a slow disk never
blocks the streams. `rotate` and `close` return the segments they closed; `announce` hands them to
`on_segment_closed` (the S3 uploader) in the caller's thread.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson

from client.core.errors import SinkError, map_write_error
from client.core.options import DEFAULT_SEGMENT_AGE_S
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
        max_segment_age_s: float = DEFAULT_SEGMENT_AGE_S,
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
        # Segments retired by the writer, waiting for `rotate` to make them durable, oldest first. The lock
        # guards the hand-over between the writer and the thread that rotates, nothing else.
        self._retired: list[tuple[BinaryIO, ClosedSegment, list[str]]] = []
        self._lock = threading.Lock()
        self._rotating = threading.Lock()  # segments are finished in order, one thread at a time
        self._error: SinkError | None = None
        # Records written without the server's token ids, loops apart (a loop stopped mid-stream never has
        # them): the summary says so under --token-ids auto.
        self.without_ids = 0
        self.written = 0

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
        if self._error is not None:
            raise self._error
        if self._broken:
            raise SinkError("the results sink failed earlier; refusing to write more")
        with self._lock:
            try:
                handle = self._handle or self._open_segment()
                _write_all(handle, line)
            except OSError as exc:
                self._broken = True
                raise SinkError(f"cannot append to {self._path}: {exc.strerror or exc}") from exc
            self._ids.append(record["id"])
            self.written += 1
            if "completion_token_ids" not in record and record.get("finish_reason") != "repetition":
                self.without_ids += 1
            self._bytes += len(line)
            self._tokens += int(record["usage"].get("completion_tokens", 0))
            if self._bytes >= self.max_segment_bytes:
                self._retire()

    def write_failure(self, record: FailureRecord) -> None:
        try:
            if self._failures is None:
                self._failures = self.failures_path.open("ab", buffering=0)
            _write_all(self._failures, orjson.dumps(record) + b"\n")
        except OSError as exc:
            raise SinkError(f"cannot append to {self.failures_path}: {exc.strerror or exc}") from exc

    def _retire(self) -> None:
        """Take the open segment out of writing (under the lock); the next record opens a new one."""
        handle, path = self._handle, self._path
        if handle is None or path is None:
            return
        self._handle = None
        if self._broken:
            with contextlib.suppress(OSError):
                handle.close()
            return
        segment = ClosedSegment(path, path.with_suffix(".ids"), len(self._ids), self._bytes, self._tokens)
        self._retired.append((handle, segment, self._ids))
        self._ids = []

    def rotate(self, *, force: bool = False) -> list[ClosedSegment]:
        """Retire the open segment once it is old enough (or `force`), and make every retired segment durable.
        Blocking: call it from a worker thread while the event loop writes. Raises SinkError."""
        with self._rotating:
            with self._lock:
                if self._handle is not None and (force or time.monotonic() - self._opened_at >= self.max_segment_age_s):
                    self._retire()
                retired, self._retired = self._retired, []
            closed: list[ClosedSegment] = []
            for index, (handle, segment, ids) in enumerate(retired):
                try:
                    closed.append(_finish_segment(handle, segment, ids))
                except SinkError as exc:
                    for other, _, _ in retired[index + 1:]:
                        with contextlib.suppress(OSError):
                            other.close()
                    self._error = self._error or exc
                    raise
            return closed

    def rotate_if_due(self) -> None:
        """`rotate` and `announce` in one call, for callers without a loop to come back to."""
        self.announce(self.rotate())

    def announce(self, segments: list[ClosedSegment]) -> None:
        if self.on_segment_closed is not None:
            for segment in segments:
                self.on_segment_closed(segment)

    def close(self, *, announce: bool = True) -> list[ClosedSegment]:
        """Close the open segment and the failures file; returns the segments closed. `announce=False`: from a
        worker thread, leaving `announce` to the event loop."""
        try:
            closed = self.rotate(force=True)
            if announce:
                self.announce(closed)
            return closed
        finally:
            if self._failures is not None:
                self._failures.close()
                self._failures = None
