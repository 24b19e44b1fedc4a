"""`--max-requests-per-second`: request starts never exceed the rate (a lower bound on elapsed time, so the
test cannot fail from a slow machine), and bad rates are refused."""

from __future__ import annotations

import asyncio
import time

import pytest

from client.engine.rate import RequestRate


@pytest.mark.parametrize(("per_second", "starts", "at_least_s"), [
    (20.0, 21, 1.0),   # 20 in any 1 s window: the 21st start is a window after the first
    (4.0, 5, 1.0),
    (2.5, 3, 0.8),     # a burst of 2 per 0.8 s window
    (0.5, 2, 2.0),     # below 1/s: one start per 2 s
])
async def test_starts_stay_under_the_rate(per_second: float, starts: int, at_least_s: float) -> None:
    rate = RequestRate(per_second)
    stamps: list[float] = []

    async def worker() -> None:
        await rate.wait_turn()
        stamps.append(time.monotonic())

    async with asyncio.TaskGroup() as group:
        for _ in range(starts):
            group.create_task(worker())
    assert len(stamps) == starts
    assert stamps[-1] - stamps[0] >= at_least_s * 0.999


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_refuses_a_rate_that_is_not_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="positive number"):
        RequestRate(bad)
