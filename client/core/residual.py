"""The expected rest of a request in flight, pure: E[L - s | L > s] from the lengths seen and the requests
still running, by a product-limit (Kaplan-Meier) estimate of the length distribution.

Finished replies are lengths; a request in flight that has streamed c tokens is a length known only to
be at least c (censored). Reading E[L - s | L > s] from the finished lengths alone is biased short
whenever many requests are still running: they are the long ones. The extreme is a run whose prompts all
started together (a fleet with more slots than prompts, a resume's first batch): the replies that have
ended are the shortest, and the requests in flight have streamed about as much as the longest of them.
For a request just below the longest finished length, the finished lengths alone say its rest is a few
tokens, while the hundred requests running beside it, all at least as long, say the lengths go on. A
heavy-tailed run showed it: "eta 0s" with 7 s left, on every line of its last 40%.

The product-limit estimate counts both: at each length x where d replies ended with n lengths at risk
(finished at x or later, plus requests in flight that have streamed x or more), the survival falls by
(1 - d / n). Above the last finished length the requests still running hold the rest of the mass, and
nothing seen says how long they run: that mass is given the rule for a request past everything seen,
half as long again as it has run (or the mean less what it has streamed, when more). On a long run the
finished lengths far outnumber the requests in flight and the estimate is the plain one; the two differ
only where the run itself has not yet shown its tail.

Finished lengths come binned (client.core.eta.LengthHistogram): each bin ends at its mean. The table is
built once per ETA (O(bins + n log n) for n in flight) and each request's rest is then a lookup.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence


def beyond_everything(streamed: float, mean: float | None) -> float | None:
    """The rest of a request past every length seen: half as long again, or the mean less what it has
    streamed when that is more."""
    if mean is None:
        return None
    return max(mean - streamed, streamed / 2)


class ResidualTable:
    """E[L - s | L > s] for any s, from finished lengths (as (length, count) pairs) and censored ones."""

    def __init__(self, finished: Iterable[tuple[float, int]], censored: Sequence[float],
                 mean: float | None) -> None:
        self._mean = mean
        events: dict[float, list[int]] = {}
        for length, count in finished:
            if count > 0:
                events.setdefault(float(length), [0, 0])[0] += count
        for streamed in censored:
            events.setdefault(float(streamed), [0, 0])[1] += 1
        self.xs: list[float] = sorted(events)
        at_risk = sum(d + c for d, c in events.values())
        survival = 1.0
        self._after: list[float] = []  # survival just after each x (its replies ended)
        for x in self.xs:
            ended, running = events[x]
            if ended:
                survival *= 1.0 - ended / at_risk
            at_risk -= ended + running
            self._after.append(survival)
        # _area[k]: the integral of the survival from xs[k] on, the tail beyond the last x included
        self._area = [0.0] * len(self.xs)
        if self.xs:
            self._area[-1] = self._after[-1] * (beyond_everything(self.xs[-1], mean) or 0.0)
        for k in range(len(self.xs) - 2, -1, -1):
            self._area[k] = self._area[k + 1] + self._after[k] * (self.xs[k + 1] - self.xs[k])

    def rest(self, streamed: float) -> float | None:
        """E[L - streamed | L > streamed]; past everything seen (or with nothing left that long), the rule
        of beyond_everything."""
        k = bisect.bisect_right(self.xs, streamed) - 1
        surviving = 1.0 if k < 0 else self._after[k]
        if k + 1 >= len(self.xs) or surviving <= 1e-12:
            return beyond_everything(streamed, self._mean)
        area = surviving * (self.xs[k + 1] - streamed) + self._area[k + 1]
        return max(0.0, area / surviving)
