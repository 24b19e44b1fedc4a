"""The local done-id ledger: each closed segment's `.ids` sidecar, read back at start-up.

A segment without its sidecar is the one a crash left open: its torn last line (if any) is cut off, its
ids are read from the records, and the sidecar is written. The ledger's line format is client.core.ids'.

The sidecar never claims what its segment does not hold. A segment untouched since its sidecar was written
(the sidecar is not the older file) is taken as it is, without reading it. Any other (edited, copied
without its times, repaired) has its lines parsed in full (orjson, about 100 MB/s on a busy 2-core
machine) and only the ids of whole records are done. A line that is not a whole record (a flipped byte, an
edit) is moved aside to `<segment>.damaged` beside it, named with its line, and the sidecar is rewritten,
so its prompt (or one whose line was deleted by hand) is generated again; every whole line stays where it
was. A byte flipped by the disk itself, without a write, leaves the segment's time as it was and is not
looked for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from client.core.errors import map_write_error
from client.core.ids import decode_ledger, encode_ledger


@dataclass
class ScanReport:
    segments: int = 0
    records: int = 0
    repaired_bytes: int = 0
    corrupt_lines: int = 0  # lines that were not whole records, moved aside
    duplicate_ids: int = 0
    rebuilt_sidecars: int = 0  # `.ids` files that did not decode, rebuilt from their segment
    unbacked_ids: int = 0  # ids a sidecar listed without a whole record in its segment: generated again
    damaged: list[str] = field(default_factory=list)  # one line per damaged line: file, line, where it went
    set_aside: list[str] = field(default_factory=list)  # the names (stems) of the segments rewritten


DAMAGED_SUFFIX = ".damaged"
_NAMED_LINES = 5  # damaged lines named one by one per segment; the rest are counted


def repair_torn_tail(path: Path) -> int:
    """Cut a last line that lacks its newline (a write cut short by a crash). Returns bytes removed."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        block = 1 << 16
        position = size
        while position > 0:
            start = max(0, position - block)
            handle.seek(start)
            chunk = handle.read(position - start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                handle.truncate(keep)
                return size - keep
            position = start
        handle.truncate(0)
        return size


def read_ids(ids_path: Path) -> list[str]:
    """The ids of one `.ids` sidecar."""
    return decode_ledger(ids_path.read_bytes())


def write_ids(ids_path: Path, ids: list[str]) -> None:
    temporary = ids_path.with_suffix(".ids.tmp")
    with temporary.open("wb") as handle:
        handle.write(encode_ledger(ids))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, ids_path)


def whole_id(line: bytes) -> str | None:
    """The id of a whole record: the line parses in full as a JSON object with a string id; else None."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    value = record.get("id") if isinstance(record, dict) else None
    return value if isinstance(value, str) else None


def _check_segment(path: Path) -> tuple[list[str], list[int]]:
    """The ids of the segment's whole records, and the numbers of its lines that are not whole."""
    ids: list[str] = []
    damaged: list[int] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            prompt_id = whole_id(raw)
            if prompt_id is None:
                damaged.append(number)
            else:
                ids.append(prompt_id)
    return ids, damaged


def _set_aside(path: Path) -> list[str]:
    """Move the lines of `path` that are not whole records to `<stem>.damaged` (appended) and keep the rest
    in order; returns the kept ids. The crash order of client.local.segment_rewrite: the new segment and
    the set-aside lines are on disk before the sidecar goes, and a start without a sidecar rebuilds it."""
    aside = path.with_suffix(DAMAGED_SUFFIX)
    temporary = path.with_suffix(".jsonl.tmp")
    kept: list[str] = []
    with path.open("rb") as source, temporary.open("wb") as target, aside.open("ab") as damaged:
        for raw in source:
            prompt_id = whole_id(raw) if raw.strip() else None
            if prompt_id is not None:
                target.write(raw)
                kept.append(prompt_id)
            elif raw.strip():
                damaged.write(raw if raw.endswith(b"\n") else raw + b"\n")
        for handle in (target, damaged):
            handle.flush()
            os.fsync(handle.fileno())
    ids_path = path.with_suffix(".ids")
    ids_path.unlink(missing_ok=True)
    os.replace(temporary, path)
    write_ids(ids_path, kept)
    return kept


def _verified_ids(path: Path, listed: list[str] | None, report: ScanReport) -> list[str]:
    """The done ids of one segment: those of its whole records, whatever its sidecar (`listed`) says; the
    sidecar is (re)written when it is missing or differs, and damaged lines are moved aside."""
    ids, damaged = _check_segment(path)
    if damaged:
        ids = _set_aside(path)
        report.corrupt_lines += len(damaged)
        report.set_aside.append(path.stem)
        aside = path.with_suffix(DAMAGED_SUFFIX).name
        report.damaged.extend(f"{path}:{number}: not a whole record; moved aside to {aside}"
                              for number in damaged[:_NAMED_LINES])
        if len(damaged) > _NAMED_LINES:
            report.damaged.append(f"{path}: {len(damaged) - _NAMED_LINES} more damaged line(s) moved aside to {aside}")
    if listed is not None:
        unbacked = set(listed).difference(ids)
        if unbacked:
            report.unbacked_ids += len(unbacked)
            report.damaged.append(f"{path.with_suffix('.ids')}: {len(unbacked)} id(s) without a whole record in "
                                  f"{path.name} (e.g. {sorted(unbacked)[0]!r}); not done here "
                                  "(generated again unless S3 holds them whole)")
    if listed != ids and not damaged:
        write_ids(path.with_suffix(".ids"), ids)
    return ids


def _untouched(path: Path, ids_path: Path) -> bool:
    """True when the segment was not written since its sidecar (which is written after the segment's last
    line): an edit, a flipped byte written back or a deleted line changes its time, and a copy that does not
    keep times is checked in full once. Its bytes are not read: a resume stays as cheap as the sidecars."""
    # Not older, rather than newer: a file system with coarse times gives both the same time when the
    # sidecar follows the last line within one tick; no hand edit comes that soon.
    return ids_path.stat().st_mtime_ns >= path.stat().st_mtime_ns


def read_done_ids(segments: Path) -> tuple[set[str], ScanReport]:
    """Read the done-ID ledger from every segment, repairing what a crash or damage left behind."""
    report = ScanReport()
    done: set[str] = set()
    if not segments.is_dir():
        return done, report
    for path in sorted(segments.glob("*.jsonl")):
        report.segments += 1
        ids_path = path.with_suffix(".ids")
        listed: list[str] | None = None
        if ids_path.exists():
            try:
                listed = read_ids(ids_path)
            except ValueError:  # not UTF-8 or not JSON (orjson's error is a ValueError): damaged
                report.rebuilt_sidecars += 1
        try:
            if listed is not None and _untouched(path, ids_path):
                ids = listed
            else:
                if listed is None:
                    report.repaired_bytes += repair_torn_tail(path)
                ids = _verified_ids(path, listed, report)
                os.utime(ids_path)  # checked: newer than its segment, so the next start takes it as it is
        except OSError as exc:  # a resume on a disk that is still full lands here
            raise map_write_error(exc, f"cannot repair {path}: {exc.strerror or exc}") from exc
        report.records += len(ids)
        before = len(done)
        done.update(ids)
        report.duplicate_ids += len(ids) - (len(done) - before)
    return done, report
