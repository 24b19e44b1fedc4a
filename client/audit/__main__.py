"""Entry point of `python -m client.audit`."""

from __future__ import annotations

import sys

from client.audit.main import main

if __name__ == "__main__":
    sys.exit(main())
