"""The ETA rule, pure: how long the work left takes, from the lengths seen so far and the fleet's rate.

Work left, in output tokens: W = U x m + sum of r_i, where
- U: prompts not yet sent (requests waiting to retry count as not sent: they start again from nothing);
- m: the expected length of a fresh reply: the `client.estimate` projection's mean when the run was given
  one (`--estimate`), else the mean of the lengths seen (this run's finished replies, and on a resume the
  records already done);
- r_i: the expected rest of request i in flight, which has streamed s_i tokens: E[L - s_i | L > s_i] over
  the lengths seen (the mean residual life: a request that has run long is likely a long one). Where no
  length seen is longer than s_i (or fewer than MIN_LENGTHS are known), it is max(m - s_i, s_i / 2): a
  request past everything seen is assumed to run half as long again. Never past max_tokens.

Time: ETA = U x m / R + max r_i / p, where p is the pace of one request (output tok/s; the fleet's
streamed rate over the last 5 s divided by the requests it had in flight meanwhile) and R = n x p the
fleet's rate with the n requests in flight now. The first term is the prompts not yet sent at the
fleet's rate. The second is the drain: the run ends when the longest request of the last batch does, not
when the mean one would; the requests in flight now stand for that batch. (The work in flight, sum r_i
at the rate R, is mean r_i / p; adding the drain (max r_i - mean r_i) / p leaves max r_i / p.) Once every
prompt is sent, the ETA is the longest expected rest at the pace of one request; it falls to 0 only
when nothing is left. The pace is not held at today's through the drain: as the batch thins, each
request left decodes faster, by the shape client.core.pace learns from the fleet (pace by requests in
flight); the drain is then sum over the rests in order of (r_(j) - r_(j-1)) / p(n - j + 1). Without
that shape (too few points, no spread of batch sizes seen) the drain is max r_i / p.

With nothing in flight (`client.status` of a stopped run, a resume before its first token), the fleet
would start k = min(U, C) fresh requests, C = R / p its slots, with the rate R and the pace p measured
from the records: ETA = U x m / min(R, k x p) + (E[longest of k fresh replies] - m) / p. So 11 prompts
left take about as long as the longest of 11 replies, not 11 / (records per second). The two forms agree:
the moment those k requests start, the first one becomes (U - k) x m / R + E[longest] / p.

Lengths are kept in a histogram of geometric bins (LengthHistogram), so a million lengths cost a few
hundred counters and each rule's answer is O(bins).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from client.core.pace import RatioAt, drain_seconds

MIN_LENGTHS = 20  # below this many lengths seen, the residual rule falls back to the mean
_GROWTH = 1.08  # geometric bins above 16 tokens: at most 8% wide


def _edges() -> list[int]:
    edges = list(range(17))
    while edges[-1] < 1 << 21:
        edges.append(max(edges[-1] + 1, math.ceil(edges[-1] * _GROWTH)))
    return edges


EDGES = _edges()  # bin b holds lengths in [EDGES[b], EDGES[b + 1]); the last one is open


@dataclass
class LengthHistogram:
    """Counts and sums of reply lengths (output tokens) in geometric bins."""

    counts: list[int] = field(default_factory=lambda: [0] * len(EDGES))
    sums: list[float] = field(default_factory=lambda: [0.0] * len(EDGES))
    total: int = 0
    tokens: float = 0.0
    # (counts, sums) of the bins above each bin, rebuilt after a change: a snapshot asks for the rest of
    # every request in flight (a thousand on a big fleet), each then costs a lookup, not a pass over the bins
    _suffix: tuple[list[int], list[float]] | None = field(default=None, repr=False, compare=False)

    def add(self, length: int, times: int = 1) -> None:
        length = max(0, int(length))
        b = bisect.bisect_right(EDGES, length) - 1
        self.counts[b] += times
        self.sums[b] += length * times
        self.total += times
        self.tokens += length * times
        self._suffix = None

    def _above_bins(self) -> tuple[list[int], list[float]]:
        if self._suffix is None:
            counts, sums = [0] * (len(EDGES) + 1), [0.0] * (len(EDGES) + 1)
            for b in range(len(EDGES) - 1, -1, -1):
                counts[b] = counts[b + 1] + self.counts[b]
                sums[b] = sums[b + 1] + self.sums[b]
            self._suffix = counts, sums
        return self._suffix

    def extend(self, lengths: Sequence[int]) -> None:
        for length in lengths:
            self.add(length)

    @property
    def mean(self) -> float | None:
        return self.tokens / self.total if self.total else None

    def _bin(self, b: int) -> tuple[float, float]:
        lo = float(EDGES[b])
        hi = float(EDGES[b + 1]) if b + 1 < len(EDGES) else lo * _GROWTH
        return lo, hi

    def above(self, s: float) -> tuple[float, float]:
        """(count, sum) of the lengths above `s`; within s's own bin they are taken as spread evenly."""
        b = bisect.bisect_right(EDGES, s) - 1
        counts, sums = self._above_bins()
        count, total = float(counts[b + 1]), sums[b + 1]
        if self.counts[b]:
            lo, hi = self._bin(b)
            mean = self.sums[b] / self.counts[b]
            if mean > s:
                # the share of the bin's lengths above s, spread evenly between s and the bin's top
                share = min(1.0, (hi - s) / (hi - lo)) if hi > lo else 0.0
                part = self.counts[b] * share
                count += part
                total += part * max(mean, (s + hi) / 2)
        return count, total

    def expected_max(self, k: int) -> float | None:
        """E[the longest of k replies drawn from these lengths]; None when none is known."""
        if not self.total or k < 1:
            return None
        expected = 0.0
        below = 0
        for b, count in enumerate(self.counts):
            if not count:
                continue
            before = (below / self.total) ** k
            below += count
            expected += (self.sums[b] / count) * ((below / self.total) ** k - before)
        return expected


def expected_rest(streamed: float, lengths: LengthHistogram, mean: float | None,
                  max_tokens: int | None = None) -> float | None:
    """E[the tokens still to come | `streamed` so far] by the rule of the module docstring."""
    rest: float | None = None
    if lengths.total >= MIN_LENGTHS:
        count, total = lengths.above(streamed)
        if count >= 1e-9:
            rest = max(0.0, total / count - streamed)
    if rest is None:
        if mean is None:
            return None
        rest = max(mean - streamed, streamed / 2)
    if max_tokens is not None:
        rest = min(rest, max(0.0, max_tokens - streamed))
    return rest


@dataclass(frozen=True, slots=True)
class EtaParts:
    """The ETA and the figures it came from (for --json, the console and the tests)."""

    seconds: float | None
    work_tokens: float | None  # U x m + sum r_i
    fresh_mean: float | None  # m
    longest_rest: float | None = None  # max r_i, or E[longest of k fresh replies] with nothing in flight
    rests: tuple[float, ...] = ()  # r_i of the requests in flight


def eta(*, unsent: int, in_flight: Sequence[float], lengths: LengthHistogram, pace: float | None,
        rate: float | None = None, prior_mean: float | None = None, max_tokens: int | None = None,
        pace_ratio: RatioAt | None = None) -> EtaParts:
    """The rule of the module docstring. `in_flight`: the tokens each request in flight has streamed.
    `pace`: one request's output tok/s now. `rate`: the fleet's output tok/s, needed only when nothing is
    in flight (with requests in flight it is their count x `pace`). `pace_ratio`: pace(k) / pace(now) as
    the batch thins (client.core.pace); without it the drain keeps today's pace."""
    mean = _capped_mean(lengths, prior_mean, max_tokens)
    unsent = max(0, unsent)
    if unsent == 0 and not in_flight:
        return EtaParts(0.0, 0.0, mean, 0.0)
    rests = [expected_rest(s, lengths, mean, max_tokens) for s in in_flight]
    known = [r for r in rests if r is not None]
    if (mean is None and unsent > 0) or len(known) < len(rests):
        return EtaParts(None, None, mean)
    fresh = mean or 0.0
    work = unsent * fresh + sum(known)
    if pace is None or pace <= 0:
        return EtaParts(None, work, mean, rests=tuple(known))
    if known:
        longest = max(known)
        drain = longest / pace if pace_ratio is None else drain_seconds(known, pace, pace_ratio)
        return EtaParts(unsent * fresh / (len(known) * pace) + drain, work, mean, longest, tuple(known))
    return _nothing_in_flight(unsent, fresh, work, mean, lengths, pace, rate, max_tokens)


def _capped_mean(lengths: LengthHistogram, prior_mean: float | None, max_tokens: int | None) -> float | None:
    mean = prior_mean if prior_mean is not None else lengths.mean
    return min(mean, float(max_tokens)) if mean is not None and max_tokens is not None else mean


def _nothing_in_flight(unsent: int, fresh: float, work: float, mean: float | None, lengths: LengthHistogram,
                       pace: float, rate: float | None, max_tokens: int | None) -> EtaParts:
    """Nothing in flight: the fleet would start min(U, C) fresh requests at once, and the longest of them
    sets the tail."""
    fleet_rate = rate if rate is not None and rate > 0 else pace
    k = min(unsent, max(1, round(fleet_rate / pace)))
    drawn = lengths.expected_max(k) if lengths.total >= MIN_LENGTHS else None
    longest = max(fresh, drawn if drawn is not None else fresh)
    if max_tokens is not None:
        longest = min(longest, float(max_tokens))
    seconds = unsent * fresh / min(fleet_rate, k * pace) + max(0.0, longest - fresh) / pace
    return EtaParts(seconds, work, mean, longest)
