"""Entry point of `python -m client.run` and `regen-run`. Ctrl-C or SIGTERM while the modules still load
(about a second on a slow machine) ends the process as a stop before start does: exit 130 with one line,
no traceback; a dependency missing at that point (a `python` outside the venv) is one line saying to
activate it, exit 2. The job itself is client.run.main's."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from client.core.entry import missing_dependency

_STOPPED = "stopped by Ctrl-C or SIGTERM before the run started; nothing was sent"


def main(argv: Sequence[str] | None = None) -> int:
    # From the first line on, SIGTERM raises KeyboardInterrupt like Ctrl-C (client.run.stop keeps that policy).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        from client.run.main import main as run
    except KeyboardInterrupt:
        print(_STOPPED, file=sys.stderr, flush=True)
        return 130
    except ModuleNotFoundError as exc:
        message = missing_dependency(exc, "python -m client.run")
        if message is None:
            raise
        print(message, file=sys.stderr, flush=True)
        return 2
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
