"""The output lengths of the newest records of a local run: what a resume's ETA starts from.

A resume knows how long its replies run from the records already done (client.core.eta). Reading every
record of a run of a million would cost minutes of parsing on the client's own CPU; the newest segments
(by modification time) up to `limit` records are a sample as good for a mean and a tail, and cost a
fraction of a second. Torn or unreadable lines are skipped, as the reader skips them.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import IO, cast

import orjson

from client.results.reader import SEGMENTS_DIR

DEFAULT_LIMIT = 20_000


def _open(path: Path) -> IO[bytes]:
    if path.name.endswith(".gz"):
        return cast("IO[bytes]", gzip.open(path, "rb"))
    return path.open("rb")


def _length(raw: bytes) -> int | None:
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    usage = record.get("usage") if isinstance(record, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if type(tokens) is int and tokens >= 0 else None


def recent_lengths(out: Path, limit: int = DEFAULT_LIMIT) -> list[int]:
    """`usage.completion_tokens` of up to `limit` records of `out/segments`, newest segments first."""
    base = out / SEGMENTS_DIR
    if not base.is_dir():
        return []
    files = [*base.glob("*.jsonl"), *base.glob("*.jsonl.gz")]
    try:
        files.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    lengths: list[int] = []
    for path in files:
        try:
            with _open(path) as handle:
                for raw in handle:
                    if not raw.endswith(b"\n"):
                        break  # a torn last line
                    length = _length(raw)
                    if length is not None:
                        lengths.append(length)
                        if len(lengths) >= limit:
                            return lengths
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
            continue  # a segment cut short or gone meanwhile: the others still count
    return lengths
