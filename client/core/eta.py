"""The ETA rule, pure: how long the work left takes, from the lengths seen so far and the fleet's rate.

Work left, in output tokens: W = U x m + sum of r_i, where
- U: prompts not yet sent (requests waiting to retry count as not sent: they start again from nothing);
- m: the expected length of a fresh reply: the `client.estimate` projection's mean when the run was given
  one (`--estimate`), else the mean of the lengths seen (this run's finished replies, and on a resume the
  records already done);
- r_i: the expected rest of request i in flight, which has streamed s_i tokens: E[L - s_i | L > s_i] (the
  mean residual life: a request that has run long is likely a long one), over the lengths seen and the
  requests still running, which are lengths known only to be at least what they have streamed
  (client.core.residual: read from finished replies alone, it is biased short while the long ones are
  still running). Past every length seen (or with fewer than MIN_LENGTHS known), it is
  max(m - s_i, s_i / 2): a request past everything seen is assumed to run half as long again. Never past
  max_tokens.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from client.core.pace import RatioAt, drain_seconds
from client.core.residual import ResidualTable, beyond_everything

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
    def add(self, length: int, times: int = 1) -> None:
        length = max(0, int(length))
        b = bisect.bisect_right(EDGES, length) - 1
        self.counts[b] += times
        self.sums[b] += length * times
        self.total += times
        self.tokens += length * times

    def extend(self, lengths: Sequence[int]) -> None:
        for length in lengths:
            self.add(length)

    @property
    def mean(self) -> float | None:
        return self.tokens / self.total if self.total else None

    def bins(self) -> Iterable[tuple[float, int]]:
        """(mean length, count) of each bin that holds any."""
        return ((self.sums[b] / count, count) for b, count in enumerate(self.counts) if count)

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
                  max_tokens: int | None = None, in_flight: Sequence[float] = ()) -> float | None:
    """E[the tokens still to come | `streamed` so far] by the rule of the module docstring; `in_flight`: what
    every request in flight has streamed (this one among them)."""
    return _rests([streamed], lengths, mean, max_tokens, in_flight)[0]


def _rests(queries: Sequence[float], lengths: LengthHistogram, mean: float | None, max_tokens: int | None,
           in_flight: Sequence[float]) -> list[float | None]:
    table = ResidualTable(lengths.bins(), in_flight, mean) if lengths.total >= MIN_LENGTHS else None
    rests: list[float | None] = []
    for streamed in queries:
        rest = table.rest(streamed) if table is not None else beyond_everything(streamed, mean)
        if rest is not None and max_tokens is not None:
            rest = min(rest, max(0.0, max_tokens - streamed))
        rests.append(rest)
    return rests


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
    rests = _rests(in_flight, lengths, mean, max_tokens, in_flight)
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
