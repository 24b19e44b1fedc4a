"""Entry point of `python -m client.export`."""

from __future__ import annotations

import sys

from client.export.main import main

if __name__ == "__main__":
    sys.exit(main())
