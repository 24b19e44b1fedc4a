"""Entry point of `python -m client.estimate`."""

from __future__ import annotations

import sys

from client.estimate.main import main

if __name__ == "__main__":
    sys.exit(main())
