"""Whether `--out` may hold a run: new, empty, or already a run's directory.

A run writes `segments/`, `failures/`, `run.json` and `.lock` into `--out`. A directory that holds other
files and none of those is most likely a path given by mistake (a home directory, a data folder), and a
run written among someone's files is hard to tell apart from them and to remove. So such a directory is
refused before anything is written, unless the user says it is meant (`--allow-nonempty-out`).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from client.core.errors import ConfigError

RUN_ENTRIES = ("run.json", "segments", "failures", ".lock")
_NAMED = 3


def holds_a_run(out: Path) -> bool:
    return any((out / name).exists() for name in RUN_ENTRIES)


def check_out_dir(out: Path, *, allow_nonempty: bool = False) -> None:
    """ConfigError when `out` is a directory with entries and no run in it (and `allow_nonempty` is off)."""
    if allow_nonempty or not out.is_dir() or holds_a_run(out):
        return
    try:
        entries = sorted(entry.name for entry in itertools.islice(out.iterdir(), 1000))
    except OSError:
        return  # unreadable: the write probe that follows names the problem
    if not entries:
        return
    shown = ", ".join(entries[:_NAMED]) + (", ..." if len(entries) > _NAMED else "")
    count = f"{len(entries)}{'+' if len(entries) == 1000 else ''}"
    raise ConfigError(f"--out {out} holds {count} entr{'y' if len(entries) == 1 else 'ies'} ({shown}) and no "
                      "run (no run.json, segments/ or failures/). A run writes segments/, failures/, run.json "
                      "and .lock into --out: give a new or empty directory, or pass --allow-nonempty-out to "
                      "write among those files")
