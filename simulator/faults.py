"""Injected failures: which one (if any) strikes a request, and where in its stream.

Draws come from one seeded `random.Random` per server, in request arrival order, and never from the
request content, so a retry of the same request can succeed where the first attempt failed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

from simulator.config import FaultRates


class FaultKind(Enum):
    NONE = "none"
    FAIL_500 = "fail_500"
    FAIL_429 = "fail_429"
    DROP_STREAM = "drop_stream"
    STALL_STREAM = "stall_stream"
    ERROR_EVENT = "error_event"

    @property
    def mid_stream(self) -> bool:
        return self in (FaultKind.DROP_STREAM, FaultKind.STALL_STREAM, FaultKind.ERROR_EVENT)


@dataclass(frozen=True)
class Fault:
    """The failure planned for one request; `at_fraction` places a mid-stream fault in its output."""

    kind: FaultKind = FaultKind.NONE
    at_fraction: float = 0.0

    def trigger_token(self, total_tokens: int) -> int:
        """Strike once this many tokens have been streamed (at least one, and before the end)."""
        return max(1, min(total_tokens - 1, int(total_tokens * self.at_fraction)))


NO_FAULT = Fault()


class FaultInjector:
    """Draws a `Fault` per request; the five rates are independent shares of one uniform draw."""

    def __init__(self, rates: FaultRates, seed: int) -> None:
        self.rates = rates
        self._rng = random.Random(seed ^ 0xFA17)

    def draw(self) -> Fault:
        if not self.rates.any():
            return NO_FAULT
        r = self._rng.random()
        where = self._rng.random()
        edge = 0.0
        for kind, rate in (
            (FaultKind.FAIL_500, self.rates.fail_500),
            (FaultKind.FAIL_429, self.rates.fail_429),
            (FaultKind.DROP_STREAM, self.rates.drop_stream),
            (FaultKind.STALL_STREAM, self.rates.stall_stream),
            (FaultKind.ERROR_EVENT, self.rates.error_event),
        ):
            edge += rate
            if r < edge:
                return Fault(kind, 0.1 + 0.8 * where)
        return NO_FAULT
