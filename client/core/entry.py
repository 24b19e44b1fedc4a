"""The entry of every offline tool (`client.audit`, `client.status`, `client.export`, `client.estimate`):
Ctrl-C and SIGTERM end the tool with one line and exit 130, never a traceback, whether they come while
its modules load or while it works. What a stop leaves behind is the tool's own business: the export
removes its OUT.part in the `finally` that the interrupt runs through.

A dependency missing when the tool's modules load (a `python` outside the project's venv) is one line that
says to activate the venv, and exit 2 (`missing_dependency`, which `client.run`'s entry uses too). Only
standard-library imports here: this module must load in any Python."""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable

from client.core.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE

_FIRST_PARTY = frozenset({"argchecks", "client", "launch", "prompts"})


def missing_dependency(exc: ModuleNotFoundError, tool: str) -> str | None:
    """The one line for a third-party module that cannot be imported, or None for one of the project's own."""
    top = (exc.name or "").partition(".")[0]
    if not top or top in _FIRST_PARTY:
        return None
    return (f"error: {tool} cannot start: this Python ({sys.executable}) has no module named '{exc.name}'. "
            "Activate the project's venv first (. .venv/bin/activate), or install the project into this "
            "Python (pip install -e '.[sim,export]').")


def run_tool(module: str, stopped: str) -> int:
    """Import `module`, run its `main()`, and turn Ctrl-C or SIGTERM into `stopped` on stderr and exit 130."""
    # SIGTERM raises KeyboardInterrupt like Ctrl-C, so one path cleans up after both. SIGINT is set too: a
    # shell without job control starts a background command with SIGINT ignored, and Python then leaves it
    # ignored, so `kill -INT` would do nothing (client.run hears it through its own handler either way).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            main: Callable[[], int] = importlib.import_module(module).main
        except ModuleNotFoundError as exc:
            message = missing_dependency(exc, "python -m " + module.removesuffix(".main"))
            if message is None:
                raise
            print(message, file=sys.stderr, flush=True)
            return EXIT_USAGE
        return main()
    except KeyboardInterrupt:
        print(f"stopped by Ctrl-C or SIGTERM; {stopped}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
