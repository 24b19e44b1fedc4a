"""Prompt ids: the one stable hash, the one reader of a raw line's id, and the one id-ledger format.

A raw line comes from a file anyone may have written, so it may hold bytes that are not UTF-8: the
readers here then answer "no id" and `not_utf8` words the problem, so that the caller reports the line
like any other bad record instead of stopping on a decode error.

Any JSON string is a valid id, so nothing here may assume an id is free of quotes, backslashes or line
breaks. The ledger (`.ids` sidecars on disk, the gzipped id indexes in S3) stores each id JSON-encoded on
its own line, so an id with `\\n`, `\\r`, U+2028 or U+0085 inside stays one line. Ledgers written before
this format held raw ids; a line that does not start with `"` is read as such a raw id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import orjson

# Matches the id when it is the record's first key and needs no unescaping, as in most files; any other
# line is parsed in full by `line_id`.
_LEADING_ID = re.compile(rb'\A\s*\{\s*"id"\s*:\s*"([^"\\]*)"')


def id_hash(prompt_id: str) -> int:
    """A stable unsigned 64-bit hash of an id: the same on every host, run and Python version.

    Shards (`--shard K/N` owns the ids with `id_hash % N == K`), the audit's and the export's duplicate
    checks all use this one function, so a shard computed offline matches the one the run took.
    """
    return int.from_bytes(hashlib.blake2b(prompt_id.encode(), digest_size=8).digest(), "big")


def shard_of(prompt_id: str, count: int) -> int:
    """The shard K of N that owns `prompt_id`."""
    return id_hash(prompt_id) % count


def leading_id(line: bytes) -> str | None:
    """The id of a raw JSON line when it is the first key and has no escapes; else None (not "no id")."""
    match = _LEADING_ID.match(line)
    if match is None:
        return None
    try:
        return match.group(1).decode()
    except UnicodeDecodeError:
        # Not UTF-8, so not JSON either: the full parse that follows finds the line bad and says so.
        return None


def not_utf8(line: bytes) -> str | None:
    """Why a raw line is not UTF-8 (the first bad byte and where it is), or None when it is UTF-8.

    orjson's own message for such a line ("surrogates not allowed ... column 1") points at neither the
    byte nor its place, so readers word this problem themselves."""
    try:
        line.decode()
    except UnicodeDecodeError as exc:
        return (f"not valid UTF-8: byte 0x{line[exc.start]:02x} at byte {exc.start + 1} of the line "
                "(JSON lines must be UTF-8)")
    return None


def line_id(line: bytes) -> str | None:
    """The string `id` of a raw JSON line: read from its start when that is enough, else parsed in full.
    None when the line is not a JSON object with a string id."""
    found = leading_id(line)
    if found is not None:
        return found
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    value = obj.get("id") if isinstance(obj, dict) else None
    return value if isinstance(value, str) else None


def encode_ledger(ids: Iterable[str]) -> bytes:
    """Ids as ledger bytes: one JSON string per `\\n`-terminated line."""
    return b"".join(orjson.dumps(prompt_id) + b"\n" for prompt_id in ids)


def decode_ledger(data: bytes) -> list[str]:
    """Ledger bytes -> ids. Splits on `\\n` only: a raw legacy id may hold any other line-break character."""
    ids: list[str] = []
    for line in data.split(b"\n"):
        if not line:
            continue
        if line.startswith(b'"'):
            value = orjson.loads(line)
            if not isinstance(value, str):
                raise ValueError(f"id ledger line is not a JSON string: {line[:80]!r}")
            ids.append(value)
        else:
            ids.append(line.decode())
    return ids
