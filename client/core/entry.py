"""The entry of every offline tool (`client.audit`, `client.status`, `client.export`, `client.estimate`):
Ctrl-C and SIGTERM end the tool with one line and exit 130, never a traceback, whether they come while
its modules load or while it works. What a stop leaves behind is the tool's own business: the export
removes its OUT.part in the `finally` that the interrupt runs through."""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable

from client.core.exit_codes import EXIT_INTERRUPTED


def run_tool(module: str, stopped: str) -> int:
    """Import `module`, run its `main()`, and turn Ctrl-C or SIGTERM into `stopped` on stderr and exit 130."""
    # SIGTERM raises KeyboardInterrupt like Ctrl-C, so one path cleans up after both.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        main: Callable[[], int] = importlib.import_module(module).main
        return main()
    except KeyboardInterrupt:
        print(f"stopped by Ctrl-C or SIGTERM; {stopped}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
