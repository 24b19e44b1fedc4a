"""Entry point of `python -m client.estimate` (Ctrl-C and SIGTERM: one line, exit 130; client.core.entry)."""

from __future__ import annotations

import sys

from client.core.entry import run_tool
from client.core.exit_codes import EXIT_NO_ROOM


def main() -> int:
    return run_tool("client.estimate.main", "the estimate was not finished: run it again",
                    advice={EXIT_NO_ROOM: "Free space and run it again."})


if __name__ == "__main__":
    sys.exit(main())
