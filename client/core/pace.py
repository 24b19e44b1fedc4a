"""How one request's pace depends on how many requests share the fleet: the shape the ETA's drain follows.

A decode step serves every running request at once, and its time grows with the batch: t(k) = a + b x k
(weights read once a step, plus each request's own cache and compute). One request's pace is then
1 / t(k): as the last batch of a run thins, the requests left decode faster. An ETA that holds the pace
of a full batch through the drain overstates the tail by up to t(full) / t(1) (2x on the simulator's
defaults; more when a starved host, not the GPU, sets the rate).

The fleet's own figures give the shape: each observation is the mean number of requests in flight over
an interval and the tokens each of them streamed a second meanwhile. A least-squares line of 1/pace on k
gives a and b (b >= 0: a request never slows the others down by leaving). Only the shape is used, as
ratios pace(k) / pace(now), so a level that moves (the host's load, a server restarted) does not bias it.

The line is trusted down to half the smallest batch observed, and held there below: a run's last batch
thins as it drains, so the batches it will see next are just below those seen, and the next points
extend the range; a line carried further (down to one request, from a fleet seen only full) could
promise a speed no server has shown. With too few points, or a spread of batches too narrow to
tell a slope, the pace is flat (the rule before this module) until the tail itself shows the slope.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MIN_POINTS = 6  # observations before a slope is trusted
MIN_SPREAD = 1.25  # largest / smallest batch observed before a slope is trusted
KEEP = 240  # observations kept: the recent ones describe the batches the drain will see
REACH = 2.0  # the line holds down to the smallest batch observed / REACH


@dataclass
class PaceModel:
    """Observations of (requests in flight, tok/s of one request), and the pace ratio they imply."""

    points: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=KEEP))

    def observe(self, in_flight: float, pace: float) -> None:
        if in_flight > 0 and pace > 0:
            self.points.append((in_flight, pace))

    def line(self) -> tuple[float, float] | None:
        """(a, b) of 1/pace = a + b x k, or None when the points cannot tell a slope."""
        if len(self.points) < MIN_POINTS:
            return None
        ks = [k for k, _ in self.points]
        if max(ks) < MIN_SPREAD * min(ks):
            return None
        n = len(self.points)
        mean_k = sum(ks) / n
        mean_t = sum(1 / p for _, p in self.points) / n
        var = sum((k - mean_k) ** 2 for k in ks)
        cov = sum((k - mean_k) * (1 / p - mean_t) for k, p in self.points)
        b = max(0.0, cov / var) if var > 0 else 0.0
        a = mean_t - b * mean_k
        if a <= 0:
            # all of the step time per request: the fleet's throughput is flat in k (a host-bound rate)
            a, b = 1e-12, mean_t / mean_k
        return a, b

    def ratio(self, now_in_flight: float) -> RatioAt:
        """pace(k) / pace(now_in_flight), held below the smallest batch observed / REACH."""
        line = self.line()
        if line is None or now_in_flight <= 0:
            return RatioAt(None, now_in_flight, 0.0)
        floor = min(k for k, _ in self.points) / REACH
        return RatioAt(line, now_in_flight, floor)


@dataclass(frozen=True, slots=True)
class RatioAt:
    """pace(k) / pace(now) for the drain; 1 everywhere when no slope is known."""

    line: tuple[float, float] | None
    now: float
    floor: float

    def __call__(self, k: float) -> float:
        if self.line is None:
            return 1.0
        a, b = self.line
        k = max(k, min(self.floor, self.now))
        return (a + b * self.now) / (a + b * k)


def drain_seconds(rests: list[float], pace: float, ratio: RatioAt) -> float:
    """Time until the longest of `rests` (tokens each request in flight still has) is done, each request
    at `pace` x ratio(k) while k requests are left: the batch thins as the shorter ones end."""
    ordered = sorted(rests)
    seconds, done = 0.0, 0.0
    for i, rest in enumerate(ordered):
        left = len(ordered) - i
        seconds += (rest - done) / (pace * ratio(left))
        done = rest
    return seconds
