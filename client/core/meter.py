"""Rates over sliding windows from monotone counters: the samples and the arithmetic, nothing else.

A counter read now is compared with its value at the start of the window. Samples are taken at most
once per `every_s` (so a run of days keeps a few hundred), and kept for the longest window asked. Before
a window has passed since the start, the rate is over the time since the start, so a figure appears
with the first tokens instead of after the window fills.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

Values = tuple[float | None, ...]


class WindowedRates:
    """Samples of several counters (one per endpoint, say); `None` marks a counter not known yet."""

    def __init__(self, started: float, *, every_s: float = 1.0, keep_s: float = 330.0) -> None:
        self.every_s = every_s
        self.keep_s = keep_s
        self._samples: deque[tuple[float, Values]] = deque([(started, ())])

    def sample(self, now: float, values: Sequence[float | None]) -> None:
        """Record the counters at `now`, unless the last sample is fresher than `every_s`."""
        if now - self._samples[-1][0] < self.every_s:
            return
        self._samples.append((now, tuple(values)))
        horizon = now - self.keep_s
        while len(self._samples) > 2 and self._samples[1][0] <= horizon:
            self._samples.popleft()

    def rates(self, now: float, values: Sequence[float | None], window_s: float, *,
              from_zero: bool = True) -> list[float | None]:
        """Per counter: its rise per second over the window ending now, measured from the newest sample at
        or before the window's start (or, when none is that old, the oldest one). `from_zero`: the counter
        was 0 when the run started (our own counts); otherwise (a server's lifetime total) it needs a
        sample of its own first. None when there is no base yet."""
        start = now - window_s
        out: list[float | None] = []
        for index, value in enumerate(values):
            if value is None:
                out.append(None)
                continue
            base: tuple[float, float] | None = None
            for position, (when, sampled) in enumerate(self._samples):
                before = sampled[index] if index < len(sampled) else None
                if before is None and position == 0 and from_zero:
                    before = 0.0
                if before is None:
                    continue
                if when <= start or base is None:
                    base = (when, before)
                if when > start:
                    break
            if base is None or now - base[0] <= 0:
                out.append(None if base is None else 0.0)
                continue
            out.append(max(0.0, value - base[1]) / (now - base[0]))
        return out
