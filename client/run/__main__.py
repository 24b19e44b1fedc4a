"""Entry point of `python -m client.run` and `regen-run` (client.core.entry): Ctrl-C or SIGTERM while the
modules still load (about a second on a slow machine) ends the process as a stop before start does: exit
130 with one line, no traceback; a dependency missing at that point (a `python` outside the venv) is one
line saying to activate it, exit 2. Every error is mapped onto the exit codes there, once; the job itself is
client.run.main's."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from client.core.entry import run_tool
from client.core.exit_codes import EXIT_NO_ROOM

_LOADING = "stopped by Ctrl-C or SIGTERM before the run started; nothing was sent"
_STOPPED = "run the same command again to continue where this one stopped"
_NO_ROOM = ("Every line already written is intact; free space (or fix permissions) and run the same command "
            "again to continue.")


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("client.run.main", _STOPPED, argv, loading=_LOADING, advice={EXIT_NO_ROOM: _NO_ROOM})


if __name__ == "__main__":
    sys.exit(main())
