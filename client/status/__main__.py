"""Entry point of `python -m client.status`."""

from __future__ import annotations

import sys

from client.status.main import main

if __name__ == "__main__":
    sys.exit(main())
