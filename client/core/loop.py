"""Which event loop runs the client: uvloop when it is installed (it cuts the per-chunk cost of the
event loop, see docs/benchmarks.md), else asyncio's own. `REGEN_LOOP=asyncio` forces the default."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    if os.environ.get("REGEN_LOOP", "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_async(main: Coroutine[Any, Any, T], *, fast_loop: bool = True) -> T:
    """`asyncio.run` with the chosen loop (Python 3.11's asyncio.run takes no loop factory; Runner does)."""
    with asyncio.Runner(loop_factory=event_loop_factory() if fast_loop else None) as runner:
        return runner.run(main)
