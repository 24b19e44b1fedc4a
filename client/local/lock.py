"""The exclusive lock on `--out`: one client per results directory, released on any exit.

The lock is an `fcntl.flock` on `OUT/.lock`, so the kernel drops it when the process dies, however it
dies (a kill -9 or a power cut leaves no lock behind). The file also says who holds it (host, pid, start
time, as one JSON object) so that a second client can name the holder in its refusal. A clean exit
empties the file; a file that still names a holder but is not locked was left by a client that is gone,
and the next client takes it over and says so.

The file is never deleted: deleting it would let a client that opened the old file and one that created a
new one both hold "the" lock.

Whether a run is live is judged one way for every tool: by the flock, never by the pid the file names (a
pid of a client that is gone may since belong to an unrelated process, e.g. pid 1 in a container).
`probe_lock` (for client.status) takes a shared lock for an instant to see whether anyone holds it; a
client that starts in that instant keeps trying for a moment before it gives up, so a probe never turns
a client away.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson

from client.core.errors import ConfigError, OutLocked, map_write_error

LOCK_FILE = ".lock"
_NAME_WAIT_STEPS, _NAME_WAIT_S = 20, 0.05


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds (or last held) a lock: written into the lock file by its holder."""

    host: str
    pid: int
    started: float

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
        return f"host {self.host}, pid {self.pid}, started {since}"

    def to_json(self) -> bytes:
        return orjson.dumps({"host": self.host, "pid": self.pid, "started": self.started}) + b"\n"

    @classmethod
    def parse(cls, blob: bytes) -> Holder | None:
        """The holder a lock file names; None when it is empty or unreadable (cleanly released, or torn)."""
        try:
            obj = orjson.loads(blob)
            return cls(str(obj["host"]), int(obj["pid"]), float(obj["started"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None

    @classmethod
    def me(cls) -> Holder:
        return cls(socket.gethostname(), os.getpid(), time.time())


def _read(handle: BinaryIO) -> bytes:
    handle.seek(0)
    return handle.read()


@contextlib.contextmanager
def hold_out_lock(out_dir: Path, *, note: Callable[[str], None] | None = None) -> Iterator[Holder]:
    """Hold the lock on `out_dir` (which must exist) for the body of the `with`.

    Raises OutLocked (a ConfigError: exit 2, nothing sent) when a live client holds it; `note` gets a line
    when the lock of a client that is gone is taken over.
    """
    path = out_dir / LOCK_FILE
    try:
        handle = path.open("a+b")
    except OSError as exc:
        raise ConfigError(f"--out {out_dir}: cannot open the lock file {path}: {exc.strerror or exc}") from exc
    with handle:
        try:
            # Blocked: by a live client, or by a status probe for an instant; a holder that has just locked
            # writes its name right after, so its name is read once the lock stays taken.
            for _ in range(_NAME_WAIT_STEPS):
                if _try_lock(handle, fcntl.LOCK_EX):
                    break
                time.sleep(_NAME_WAIT_S)
            else:
                holder = Holder.parse(_read(handle))
                who = holder.describe() if holder else "a client that is just starting"
                raise OutLocked(f"--out {out_dir} is in use by another client ({who}; lock file {path}). "
                                "Two clients on one --out would send the same prompts twice: wait for that one "
                                "to finish, stop it, or give this one another --out") from None
        except OSError as exc:
            raise ConfigError(f"--out {out_dir}: cannot lock {path}: {exc.strerror or exc} (a file system "
                              "without locks? choose a local directory)") from exc
        try:
            previous = Holder.parse(_read(handle))
            if previous is not None and note is not None:
                note(f"--out {out_dir}: taking over the lock left by a client that is gone ({previous.describe()})")
            me = Holder.me()
            try:
                handle.seek(0)
                handle.truncate()
                handle.write(me.to_json())
                handle.flush()
                os.fsync(handle.fileno())
            except OSError as exc:
                raise map_write_error(exc, f"--out {out_dir}: cannot write the lock file {path}: "
                                        f"{exc.strerror or exc}") from exc
            yield me
        finally:
            # Empty the file before the lock goes, so the next client knows this one ended cleanly.
            with contextlib.suppress(OSError):
                handle.seek(0)
                handle.truncate()
                handle.flush()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _try_lock(handle: BinaryIO, kind: int) -> bool:
    """Take the flock of `kind` without waiting; False when another open file holds a conflicting one."""
    try:
        fcntl.flock(handle.fileno(), kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def probe_lock(out_dir: Path) -> tuple[Holder | None, bool | None]:
    """Who `OUT/.lock` names, and whether a client holds the lock now, judged as `hold_out_lock` judges it:
    by the flock (a file that names a holder but is not locked was left by a client that is gone, whatever
    its pid is now). Holds a shared lock for an instant, never waits. Live is None when the file system
    cannot lock (then nothing can tell)."""
    path = out_dir / LOCK_FILE
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return None, False
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with handle:
        try:
            free = _try_lock(handle, fcntl.LOCK_SH)
        except OSError:
            return Holder.parse(_read(handle)), None
        try:
            return Holder.parse(_read(handle)), not free
        finally:
            if free:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def pid_alive(pid: int) -> bool:
    """Whether a process of this id runs on this machine (one we may not signal still runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
