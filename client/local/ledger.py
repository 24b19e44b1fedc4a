"""The local done-id ledger: each closed segment's `.ids` sidecar, read back at start-up.

A segment without its sidecar is the one a crash left open: its torn last line (if any) is cut off, its
ids are read from the records, and the sidecar is written. The ledger's line format is client.core.ids'.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from client.core.errors import map_write_error
from client.core.ids import decode_ledger, encode_ledger, line_id


@dataclass
class ScanReport:
    segments: int = 0
    records: int = 0
    repaired_bytes: int = 0
    corrupt_lines: int = 0
    duplicate_ids: int = 0
    rebuilt_sidecars: int = 0  # `.ids` files that did not decode, rebuilt from their segment


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


def scan_segment_ids(path: Path, report: ScanReport) -> list[str]:
    ids: list[str] = []
    with path.open("rb") as handle:
        for raw in handle:
            prompt_id = line_id(raw)
            if prompt_id is None:
                report.corrupt_lines += 1
                continue
            ids.append(prompt_id)
    return ids


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


def read_done_ids(segments: Path) -> tuple[set[str], ScanReport]:
    """Read the done-ID ledger from every segment, repairing what a crash left behind."""
    report = ScanReport()
    done: set[str] = set()
    if not segments.is_dir():
        return done, report
    for path in sorted(segments.glob("*.jsonl")):
        report.segments += 1
        ids_path = path.with_suffix(".ids")
        ids: list[str] | None = None
        if ids_path.exists():
            try:
                ids = read_ids(ids_path)
            except ValueError:  # not UTF-8 or not JSON (orjson's error is a ValueError): damaged
                report.rebuilt_sidecars += 1
        if ids is None:
            try:
                report.repaired_bytes += repair_torn_tail(path)
                ids = scan_segment_ids(path, report)
                write_ids(ids_path, ids)
            except OSError as exc:  # a resume on a disk that is still full lands here
                raise map_write_error(exc, f"cannot repair {path}: {exc.strerror or exc}") from exc
        report.records += len(ids)
        before = len(done)
        done.update(ids)
        report.duplicate_ids += len(ids) - (len(done) - before)
    return done, report
