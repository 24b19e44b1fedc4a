"""`python -m launch.plan`: see launch.plan.cli."""

from __future__ import annotations

import sys

from launch.plan.cli import main

if __name__ == "__main__":
    sys.exit(main())
