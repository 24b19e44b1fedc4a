"""The deadline of one non-streaming request, which takes the place of stall detection there.

A non-streaming answer sends no byte until it is whole, so "no byte for --idle-timeout seconds" would
fail every long reply. Instead each request gets `floor + SAFETY * max_tokens / rate`: the time its
`max_tokens` would take at a slow per-request decode rate, plus the idle timeout for queueing and
prefill. The rate is measured from the run's own finished non-streaming requests (completion tokens over
the request's time, so queueing and prefill count against it): the 10th percentile of the last
`WINDOW`, i.e. a slow request, not a typical one. Until `MIN_SAMPLES` have finished, a deliberately low
`INITIAL_RATE` holds. A request past its deadline fails as StreamStalled and is retried elsewhere.
"""

from __future__ import annotations

from collections import deque

INITIAL_RATE = 5.0  # tok/s per request: a 27B model at a full batch decodes far faster than this
SAFETY = 2.0
WINDOW = 256
MIN_SAMPLES = 8
QUANTILE = 0.1


class DecodeDeadline:
    """Per-request decode rates of finished requests -> the deadline of the next one."""

    def __init__(self, *, initial_rate: float = INITIAL_RATE, window: int = WINDOW) -> None:
        self.initial_rate = initial_rate
        self._rates: deque[float] = deque(maxlen=window)

    def observe(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            self._rates.append(tokens / seconds)

    @property
    def rate(self) -> float:
        """The slow per-request decode rate (tok/s) the deadline is planned for."""
        if len(self._rates) < MIN_SAMPLES:
            return self.initial_rate
        ordered = sorted(self._rates)
        return max(ordered[int(QUANTILE * (len(ordered) - 1))], 1e-3)

    def deadline(self, max_tokens: int, floor_s: float) -> float:
        return floor_s + SAFETY * max_tokens / self.rate
