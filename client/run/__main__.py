"""Entry point of `python -m client.run`."""

from __future__ import annotations

import sys

from client.run.main import main

if __name__ == "__main__":
    sys.exit(main())
