"""Entry point of `python -m client.export` (Ctrl-C and SIGTERM: one line, exit 130; client.core.entry)."""

from __future__ import annotations

import sys

from client.core.entry import run_tool


def main() -> int:
    return run_tool("client.export.main", "OUT was not written (nothing partial is left): run the export again")


if __name__ == "__main__":
    sys.exit(main())
