"""The entry of every tool (`client.run`, `client.audit`, `client.status`, `client.export`,
`client.estimate`): the one place an error becomes an exit code and one line, through the one map
(client.core.exit_codes.code_for). A tool's `main` returns the codes of its outcomes and raises the rest.

Ctrl-C and SIGTERM end the tool with one line and exit 130, never a traceback, whether they come while its
modules load or while it works (a KeyboardInterrupt raised with a message says that message instead). What
a stop leaves behind is the tool's own business: the export removes its OUT.part in the `finally` that the
interrupt runs through, with a second Ctrl-C held off until it is gone (`interrupts_held`). A full disk
is 4 wherever it is met: a file, or stdout itself (`> /dev/full`).

A dependency missing when the tool's modules load (a `python` outside the project's venv) is one line that
says to activate the venv, and exit 2 (`missing_dependency`). Only standard-library imports and the
project's own stdlib-only core here: this module must load in any Python."""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType

from client.core.errors import RegenError
from client.core.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE, code_for, message_for
from client.core.human_out import ReportUnwritten, give_up, reason, write_line

_FIRST_PARTY = frozenset({"argchecks", "client", "launch", "prompts", "simulator"})


def missing_dependency(exc: ModuleNotFoundError, tool: str) -> str | None:
    """The one line for a third-party module that cannot be imported, or None for one of the project's own."""
    top = (exc.name or "").partition(".")[0]
    if not top or top in _FIRST_PARTY:
        return None
    return (f"error: {tool} cannot start: this Python ({sys.executable}) has no module named '{exc.name}'. "
            "Activate the project's venv first (. .venv/bin/activate), or install the project into this "
            "Python (pip install -e '.[sim,export]').")


@contextlib.contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM wait while the block runs: a clean-up that the first stop started (removing a
    partial file) must not be cut short by the second, pressed a moment later. The signals that came are
    listed; the handlers in place before are back after. Outside the main thread (where Python takes no
    signal handler) it holds nothing."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return

    def note(sig: int, frame: FrameType | None) -> None:
        came.append(sig)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield came
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _say(line: str) -> None:
    write_line(sys.stderr, line)  # stderr that fails loses the line, never the code


def _flush_stdout() -> None:
    """What the tool printed is whole before the code says so: a failing flush is the report's failure."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        give_up(sys.stdout)
        raise ReportUnwritten(exc.errno or 0, f"the report could not be written to stdout: {reason(exc)}") from exc


def run_tool(module: str, stopped: str, argv: Sequence[str] | None = None, *, loading: str | None = None,
             advice: Mapping[int, str] | None = None) -> int:
    """Import `module`, run its `main(argv)`, and map how it ended onto the exit codes: Ctrl-C or SIGTERM is
    `stopped by Ctrl-C or SIGTERM; {stopped}` (`loading`, a whole line, while the modules still load) and
    130; an error of the tree or an OSError is its one line (and `advice[code]` after it) and its code."""
    # SIGTERM raises KeyboardInterrupt like Ctrl-C, so one path cleans up after both. SIGINT is set too: a
    # shell without job control starts a background command with SIGINT ignored, and Python then leaves it
    # ignored, so `kill -INT` would do nothing.
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _run(module, stopped, argv, loading, advice or {})
    finally:  # a caller in the same process (a test) gets its own handlers back
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(module: str, stopped: str, argv: Sequence[str] | None, loading: str | None,
         advice: Mapping[int, str]) -> int:
    loaded = False
    try:
        try:
            main: Callable[[Sequence[str] | None], int] = importlib.import_module(module).main
        except ModuleNotFoundError as exc:
            message = missing_dependency(exc, "python -m " + module.removesuffix(".main"))
            if message is None:
                raise
            _say(message)
            return EXIT_USAGE
        loaded = True
        code = main(argv)
        _flush_stdout()
        return code
    except KeyboardInterrupt as exc:
        _say(str(exc) or (loading if loading and not loaded else f"stopped by Ctrl-C or SIGTERM; {stopped}"))
        return EXIT_INTERRUPTED
    except Exception as exc:
        mapped = code_for(exc)
        if mapped is None:
            raise  # not a user-facing error: a bug, with its traceback
        # An OSError's line has its own advice (message_for); the tool's is for the tree's errors.
        extra = advice.get(mapped) if isinstance(exc, RegenError) else None
        _say(message_for(exc) + (f". {extra}" if extra else ""))
        return mapped
