"""Entry point of `python -m client.status` (Ctrl-C and SIGTERM: one line, exit 130; client.core.entry)."""

from __future__ import annotations

import sys

from client.core.entry import run_tool


def main() -> int:
    return run_tool("client.status.main", "nothing was changed")


if __name__ == "__main__":
    sys.exit(main())
