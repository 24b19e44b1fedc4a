"""Read the result segments of a run as a stream: the one reader the offline tools share.

A results location is a run directory (`--out` of `client.run`, whose `segments/` holds the JSONL
segments), a directory of `*.jsonl` segments, one segment file, or an `s3://bucket/prefix` that the
run synced to. Lines are yielded one at a time with their file and line number and are never held all
at once. The reader only reads: a torn last line (a crash mid-write) or a line that is not JSON is
counted and named, never repaired, so an audit of a live run changes nothing under it.

From S3 it reads exactly the segments the writers' manifests list (an object no manifest lists is an
unfinished upload), each checked against its manifest entry's size and sha256: a damaged segment is
named in `ReadReport.damaged` and none of its lines are read (its ids are not done). One at a time: a
thread with its own event loop fetches the next segment while the caller reads the current one, so at
most a few segments are in memory.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import queue
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import orjson

from client.core.errors import ConfigError, RegenError
from client.core.ids import not_utf8
from client.core.records import LineProblem

SEGMENTS_DIR = "segments"
_BUFFER = 1 << 20


@dataclass(frozen=True, slots=True)
class ResultLine:
    """One raw result line and where it was read."""

    where: str  # file path or s3 key
    line: int
    raw: bytes


@dataclass
class ReadReport:
    """What the reader saw besides the good records."""

    segments: int = 0
    lines: int = 0
    torn_tails: int = 0
    corrupt: int = 0
    examples: list[LineProblem] = field(default_factory=list)
    damaged: list[LineProblem] = field(default_factory=list)  # S3 segments whose bytes are not the manifest's
    # The records the location holds, counted before reading them (for a progress's time left): the
    # manifests' counts on S3, the `.ids` sidecars' lines (or the segment's own) on disk; None: unknown.
    expected: int | None = None

    def bad(self, item: LineProblem, *, torn: bool) -> None:
        if torn:
            self.torn_tails += 1
        else:
            self.corrupt += 1
        if len(self.examples) < 10:
            self.examples.append(item)


def is_s3(location: str) -> bool:
    return location.startswith("s3://")


def segment_files(location: Path) -> list[Path]:
    """The segment files of a local results location, in name order (names start with the writer)."""
    if location.is_file():
        return [location]
    if not location.is_dir():
        raise ConfigError(f"{location}: no such results directory or segment file")
    base = location / SEGMENTS_DIR if (location / SEGMENTS_DIR).is_dir() else location
    files = sorted([*base.glob("*.jsonl"), *base.glob("*.jsonl.gz")])
    if not files:
        raise ConfigError(f"{location}: no result segments (*.jsonl) found in {base}")
    return files


def _open(path: Path) -> IO[bytes]:
    if path.name.endswith(".gz"):
        return cast("IO[bytes]", gzip.open(path, "rb"))
    return path.open("rb", buffering=_BUFFER)


def _lines(handle: IO[bytes], where: str, report: ReadReport) -> Iterator[ResultLine]:
    for number, raw in enumerate(handle, start=1):
        report.lines += 1
        if not raw.endswith(b"\n"):
            # The writer appends whole lines; a last line without its newline is a write cut short.
            report.bad(LineProblem(where, number, "torn last line (the writer stopped mid-line); ignored"), torn=True)
            return
        if raw.strip():
            yield ResultLine(where, number, raw)


def iter_lines(location: str, report: ReadReport | None = None, *,
               s3_endpoint_url: str | None = None) -> Iterator[ResultLine]:
    """Every result line of a results location, segment by segment."""
    report = report if report is not None else ReadReport()
    if is_s3(location):
        yield from _iter_s3(location, report, s3_endpoint_url)
        return
    files = segment_files(Path(location))
    report.expected = expected_records(files)
    for path in files:
        report.segments += 1
        start = report.lines
        try:
            with _open(path) as handle:
                yield from _lines(handle, str(path), report)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            # A compressed segment cut short or damaged: its whole lines before the damage were read.
            line = report.lines - start + 1
            report.bad(LineProblem(str(path), line, f"the compressed segment is damaged or ends early ({exc}); "
                                                    "the lines before it are read"), torn=True)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def expected_records(files: list[Path]) -> int | None:
    """How many lines the segments hold, without parsing them: each closed segment's `.ids` sidecar has one
    id a record, the one a writer still has open is counted itself; None for a compressed segment."""
    total = 0
    for path in files:
        if path.name.endswith(".gz"):
            return None
        sidecar = path.with_suffix(".ids")
        try:
            counted = sidecar if sidecar.is_file() and sidecar.stat().st_mtime >= path.stat().st_mtime else path
            with counted.open("rb") as handle:
                total += sum(block.count(b"\n") for block in iter(lambda: handle.read(_BUFFER), b""))
        except OSError:
            return None
    return total


def iter_records(location: str, report: ReadReport | None = None, *,
                 s3_endpoint_url: str | None = None) -> Iterator[tuple[ResultLine, dict[str, Any]]]:
    """Parsed result records (JSON objects with a string id); anything else is counted in `report`."""
    report = report if report is not None else ReadReport()
    for item in iter_lines(location, report, s3_endpoint_url=s3_endpoint_url):
        try:
            obj = orjson.loads(item.raw)
        except orjson.JSONDecodeError as exc:
            report.bad(LineProblem(item.where, item.line, not_utf8(item.raw) or f"not valid JSON: {exc}"), torn=False)
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
            report.bad(LineProblem(item.where, item.line, "not a result record (no string id)"), torn=False)
            continue
        yield item, obj


_Handoff = tuple[str, bytes, str | None] | BaseException | None


def _iter_s3(location: str, report: ReadReport, endpoint_url: str | None) -> Iterator[ResultLine]:
    from client.s3.manifest import body_problem
    from client.s3.resume import read_manifests
    from client.s3.store import S3Store, S3Url

    url = S3Url.parse(location)
    handoff: queue.Queue[_Handoff] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: _Handoff) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    async def fetch() -> None:
        async with S3Store(url, endpoint_url=endpoint_url) as store:
            manifests = await read_manifests(store)
            entries = sorted((e for manifest, _ in manifests for e in manifest.segments.values()), key=lambda e: e.name)
            manifest_of = {e: manifest.writer for manifest, _ in manifests for e in manifest.segments}
            if not entries:
                raise ConfigError(f"{url}: no uploaded result segments (no manifest under manifests/ lists any)")
            report.expected = sum(entry.records for entry in entries)
            for entry in entries:
                got = await store.get(entry.key)
                if got is None:
                    raise ConfigError(f"{url}{entry.key}: listed in a manifest but not in the bucket")
                problem = body_problem(entry, got[0])
                if problem is not None:
                    handoff_item: _Handoff = (entry.key, b"", f"{problem}; its {entry.records:,} record(s) "
                                              f"were not read (writer {manifest_of[entry.name]})")
                else:
                    handoff_item = (entry.key, gzip.decompress(got[0]) if entry.gzip else got[0], None)
                if not await asyncio.to_thread(put, handoff_item):
                    return

    def work() -> None:
        try:
            asyncio.run(fetch())
        except BaseException as exc:  # handed to the reading thread, which raises it there
            put(exc)
            return
        put(None)

    threading.Thread(target=work, name="results-s3-reader", daemon=True).start()
    try:
        while True:
            item = handoff.get()
            if item is None:
                return
            if isinstance(item, ConfigError):
                raise item
            if isinstance(item, RegenError | OSError):
                raise ConfigError(f"{url}: cannot read the results: {item}") from item
            if isinstance(item, BaseException):
                raise item
            key, data, problem = item
            report.segments += 1
            if problem is not None:
                report.damaged.append(LineProblem(f"{url}{key}", 0, problem))
                continue
            yield from _lines(io.BytesIO(data), f"{url}{key}", report)
    finally:
        stop.set()
