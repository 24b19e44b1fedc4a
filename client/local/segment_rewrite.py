"""The one way a local segment is rewritten without some of its lines: `--redo-edited` takes edited prompts'
results out (client.local.edited), and an S3 resume takes out the ids another writer already uploaded
(client.s3.resume). The order keeps a crash harmless: a temporary file, fsync, then the `.ids` sidecar is
removed before the rename (a start that finds no sidecar rebuilds it from the segment), then written anew.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from client.core.ids import line_id
from client.local.ledger import write_ids


@dataclass(frozen=True, slots=True)
class Rewrite:
    dropped: list[str]  # the ids of the lines taken out
    kept: int  # lines left with an id
    removed: bool = False  # nothing was left, and the segment was deleted (`remove_if_empty`)


def rewrite_segment(segment: Path, drop: Callable[[bytes], bool], *, remove_if_empty: bool = False) -> Rewrite:
    """`segment` without the lines `drop` picks; untouched when it picks none (blocking: call in a thread)."""
    dropped: list[str] = []
    kept_ids: list[str] = []
    temporary = segment.with_suffix(".jsonl.tmp")
    with segment.open("rb") as source, temporary.open("wb") as target:
        for line in source:
            key = line_id(line)
            if drop(line):
                if key is not None:
                    dropped.append(key)
                continue
            target.write(line)
            if key is not None:
                kept_ids.append(key)
        target.flush()
        os.fsync(target.fileno())
    if not dropped:
        temporary.unlink()
        return Rewrite([], len(kept_ids))
    ids_path = segment.with_suffix(".ids")
    ids_path.unlink(missing_ok=True)  # if this is cut short, the next start rebuilds the sidecar
    if remove_if_empty and not kept_ids:
        temporary.unlink()
        segment.unlink()
        return Rewrite(dropped, 0, removed=True)
    os.replace(temporary, segment)
    write_ids(ids_path, kept_ids)
    return Rewrite(dropped, len(kept_ids))
