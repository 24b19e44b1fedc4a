"""Lines for the person running a job (progress, notes, the summary) that may fail to be written, without
the job failing with them.

stdout and stderr are often redirected to a log (`> run.log 2>&1`) on a disk other than `--out`'s; that disk
filling (ENOSPC), a closed pipe (EPIPE, `| head`) or a terminal gone away (EIO, a dropped SSH session) must
not end a run whose results can still be written. `write_line` reports the failure instead of raising, and
gives the stream up for good: its descriptor is pointed at /dev/null, because the line that failed stays in
the stream's buffer, and Python flushes it again at exit, fails again and exits 120 instead of the run's
own status.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TextIO

_given_up: set[int] = set()  # id() of the streams that failed: nothing more is written to them


def write_line(stream: TextIO, text: str) -> OSError | None:
    """Write `text` and a newline to `stream` and flush it; the OSError that stopped it, or None when written.

    A stream that failed once is not written again (the same error is returned at once)."""
    if id(stream) in _given_up:
        return OSError("the stream failed earlier")
    try:
        print(text, file=stream, flush=True)
    except OSError as exc:
        give_up(stream)
        return exc
    except ValueError as exc:  # closed: what print says of a file that is gone
        give_up(stream)
        return OSError(str(exc))
    return None


def give_up(stream: TextIO) -> None:
    """Write nothing more to `stream`; what its buffer still holds goes to /dev/null (so the exit is clean)."""
    _given_up.add(id(stream))
    with contextlib.suppress(OSError, ValueError):
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)


def usable(stream: TextIO) -> bool:
    """False once a line to `stream` failed."""
    return id(stream) not in _given_up


def reason(error: OSError) -> str:
    """The failure in words: `No space left on device` rather than `[Errno 28] No space left on device`."""
    return error.strerror or str(error) or type(error).__name__


def note(message: str) -> None:
    """A line on stderr (stdout stays free for a tool's own output); lost, never raised, when stderr fails."""
    write_line(sys.stderr, message)


class ReportUnwritten(OSError):
    """A tool's report could not be written to stdout (`> /dev/full`, a closed pipe); client.core.entry maps it
    like any OSError: exit 4 when there is no room."""


def write_report(data: bytes | str) -> None:
    """Write a tool's report (its product, unlike the lines above) to stdout and flush it. A failure gives
    stdout up (so Python's own flush at exit cannot fail again) and raises ReportUnwritten, one line."""
    try:
        if isinstance(data, bytes):
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data)
        sys.stdout.flush()
    except OSError as exc:
        give_up(sys.stdout)
        raise ReportUnwritten(exc.errno or 0, f"the report could not be written to stdout: {reason(exc)}") from exc
