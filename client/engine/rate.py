"""`--max-requests-per-second`: keep a run under a hosted endpoint's agreed request rate, retries included.

aiolimiter's leaky bucket, one request deep: starts are spaced 1/rate apart, so no window of 1/rate x N
seconds ever holds more than N starts. A waiting worker sleeps until its own turn (no polling, no lock).
"""

from __future__ import annotations

import math

from aiolimiter import AsyncLimiter


class RequestRate:
    """At most `per_second` request starts a second, evenly spaced."""

    def __init__(self, per_second: float) -> None:
        if not per_second > 0 or not math.isfinite(per_second):
            raise ValueError(f"a request rate must be a positive number, got {per_second}")
        self.per_second = per_second
        self._limiter = AsyncLimiter(max_rate=1, time_period=1.0 / per_second)

    async def wait_turn(self) -> None:
        await self._limiter.acquire()
