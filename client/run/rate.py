"""`--max-requests-per-second`: keep a run under a hosted endpoint's agreed request rate, retries included.

asyncio-throttle keeps the sliding window. Its `acquire` polls, so only one worker at a time may wait in
it (the others wait on a lock, asleep): the polling is one timer at the rate's own cadence, not one per
worker.
"""

from __future__ import annotations

import asyncio
import math

from asyncio_throttle import Throttler  # type: ignore[attr-defined]


class RequestRate:
    """At most `per_second` request starts in any window of `period` seconds (rates below 1 widen it)."""

    def __init__(self, per_second: float) -> None:
        if not per_second > 0 or not math.isfinite(per_second):
            raise ValueError(f"a request rate must be a positive number, got {per_second}")
        self.per_second = per_second
        burst = max(1, math.floor(per_second))
        period = burst / per_second
        self._throttler = Throttler(rate_limit=burst, period=period, retry_interval=min(0.05, period / burst))
        self._lock = asyncio.Lock()

    async def wait_turn(self) -> None:
        async with self._lock:
            await self._throttler.acquire()  # type: ignore[no-untyped-call]
