"""Entry point of `python -m client.run`. Ctrl-C or SIGTERM while the modules still load (about a second on
a slow machine) ends the process as a stop before start does: exit 130 with one line, no traceback."""

from __future__ import annotations

import signal
import sys

_STOPPED = "stopped by Ctrl-C or SIGTERM before the run started; nothing was sent"


def _run() -> int:
    # From the first line on, SIGTERM raises KeyboardInterrupt like Ctrl-C (client.run.stop keeps that policy).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        from client.run.main import main
    except KeyboardInterrupt:
        print(_STOPPED, file=sys.stderr, flush=True)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(_run())
