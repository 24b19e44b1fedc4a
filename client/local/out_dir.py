"""Whether `--out` may hold a run: new, empty, or already a run's directory.

A run writes `segments/`, `failures/`, `run.json` and `.lock` into `--out`. A directory that holds other
files and none of those is most likely a path given by mistake (a home directory, a data folder), and a
run written among someone's files is hard to tell apart from them and to remove. So such a directory is
refused before anything is written, unless the user says it is meant (`--allow-nonempty-out`).

A run that creates `--out` and ends holding nothing in it (an unreachable endpoint, a refused preflight, a
bad option found late) removes what it made (`NewOut`), so a failed start leaves no empty run folder behind
to be mistaken for a run, or to be refused as one later.
"""

from __future__ import annotations

import contextlib
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


# What a run makes in --out before it writes anything: removed again when it is all still empty.
_EMPTY_PARTS = ("segments", "failures")
_LOCK = ".lock"


class NewOut:
    """`out` and the parents a run is about to create (none when it exists already); `remove_if_unused`
    takes them away again when the run left nothing in them."""

    def __init__(self, out: Path) -> None:
        self.out = out
        top: Path | None = None
        with contextlib.suppress(OSError):
            probe = out
            while not probe.exists() and probe != probe.parent:
                top, probe = probe, probe.parent
        self.top = top  # the highest directory this run creates, or None

    def remove_if_unused(self) -> bool:
        """Remove `out` (and the parents the run created) when it holds only empty `segments/`, `failures/`
        and the run's own `.lock` (empty once the lock is released); True when removed. Call after the lock."""
        if self.top is None or not self.out.is_dir():
            return False
        try:
            names = {entry.name for entry in self.out.iterdir()}
            if not names <= {*_EMPTY_PARTS, _LOCK}:
                return False
            if any(any((self.out / part).iterdir()) for part in _EMPTY_PARTS if part in names):
                return False
            if _LOCK in names and (self.out / _LOCK).stat().st_size:
                return False  # it names a client: not ours to remove
            for part in _EMPTY_PARTS:
                if part in names:
                    (self.out / part).rmdir()
            (self.out / _LOCK).unlink(missing_ok=True)
            directory = self.out
            while True:
                directory.rmdir()
                if directory == self.top:
                    return True
                directory = directory.parent
        except OSError:
            return False  # something else came in meanwhile (or cannot be removed): left as it is
