"""The projection's arithmetic, pure and deterministic: sustained throughput, makespan, bootstrap.

Sustained throughput. Each finished request is an interval, from its first token to its end, that
produced `completion_tokens` at an even pace. Spreading every interval over time bins gives, per bin,
the tokens the fleet produced and the number of requests it was decoding. The fleet counts as
saturated in the bins where that concurrency (smoothed over one typical request duration) is at least
90% of its peak (its 95th percentile, so one lucky bin does not set the bar): the window runs from the
first such bin to the last, dips included, leaving out only gross gaps (under half the peak, such as a
restart of a partial run). The throughput is tokens over time in that window. So the ramp-up and the
tail of a short sample (when few long requests are left) do not dilute the figure, and a request that
straddles the window edge counts only with its share inside.

Pace and batch. A server decodes a lone request faster than one of a full batch. Each request's time
per token is regressed on the mean concurrency it saw during its life: time per token = a + b*c, the
shape of a decode step whose cost grows with the batch (as the simulated server's does, and as a GPU's
roughly does). Only the ratio k = b/a is kept; the pace at saturation stays the measured one.

Wall time. The whole set runs on the fleet's slots: the measured mean concurrency at saturation gives
the slot count C and the throughput T gives the per-slot pace T/C there; with fewer requests running
each goes faster, as (1 + kC) / (1 + kc). Simulating N jobs with lengths drawn from the sample gives
the makespan, which adds the tail (the last long requests on an otherwise idle fleet) to total/T. The
tail is taken from one simulation; the uncertainty interval comes from a stratified bootstrap of the
mean length and a block bootstrap of the throughput over contiguous stretches of the saturated window.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

SATURATION = 0.9
GAP = 0.5
MAX_BINS = 20_000
BLOCKS = 20
MAX_SIMULATED_JOBS = 100_000
MAX_BOOST = 20.0  # a lone request is at most this much faster than one of a full batch
EXACT_BOOTSTRAP_LIMIT = 5_000


@dataclass(frozen=True, slots=True)
class Throughput:
    tokens_per_s: float
    concurrency: float  # mean requests in decode over the saturated window
    peak_concurrency: float
    window_s: float
    span_s: float
    typical_s: float  # median request duration, first token to end
    blocks: tuple[tuple[float, float], ...]  # (tokens, seconds) of contiguous stretches of the window
    kappa: float = 0.0  # time per token grows as (1 + kappa * concurrency)
    start: float = 0.0  # the saturated window's first and last moment, on the spans' clock
    end: float = 0.0

    @property
    def per_slot(self) -> float:
        return self.tokens_per_s / self.concurrency if self.concurrency > 0 else 0.0


def _smooth(values: list[float], width: int) -> list[float]:
    if width <= 1:
        return values
    half = width // 2
    prefix = [0.0]
    for value in values:
        prefix.append(prefix[-1] + value)
    out = []
    for i in range(len(values)):
        lo, hi = max(0, i - half), min(len(values), i + half + 1)
        out.append((prefix[hi] - prefix[lo]) / (hi - lo))
    return out


def sustained_throughput(starts: Sequence[float], ends: Sequence[float], tokens: Sequence[int],
                         level: float = SATURATION) -> Throughput | None:
    """Fleet tokens/s while it was saturated (see the module docstring); None without usable spans."""
    if not starts:
        return None
    t0, t1 = min(starts), max(ends)
    span = t1 - t0
    durations = [max(0.0, e - s) for s, e in zip(starts, ends, strict=True)]
    typical = statistics.median(durations)
    if span <= 0 or typical <= 0:
        return None
    step = max(span / MAX_BINS, typical / 4)
    bins = max(1, math.ceil(span / step))
    busy, made = _binned_work(starts, ends, tokens, t0, step, bins)
    kappa = _batch_shape(starts, ends, tokens, busy, t0, step)
    concurrency = _smooth([x / step for x in busy], max(1, round(typical / step)))
    # A high quantile, not the maximum: one lucky bin must not set the bar for the whole run.
    active = sorted(c for c in concurrency if c > 0)
    peak = quantile(active, 0.95)
    high = [b for b in range(bins) if concurrency[b] >= level * peak]
    if not high or peak <= 0:
        return None
    # Every bin between the first and the last saturated one counts, dips included (picking only the
    # busiest bins would pick the fastest ones); only gross gaps, such as a restart, are left out.
    chosen = [b for b in range(high[0], high[-1] + 1) if concurrency[b] >= GAP * peak]
    window = len(chosen) * step
    return Throughput(
        tokens_per_s=sum(made[b] for b in chosen) / window,
        concurrency=sum(busy[b] for b in chosen) / window,
        peak_concurrency=peak, window_s=window, span_s=span, typical_s=typical,
        blocks=_blocks(chosen, made, step),
        kappa=min(kappa, MAX_BOOST / max(peak, 1.0)),
        start=t0 + chosen[0] * step, end=t0 + (chosen[-1] + 1) * step,
    )


def _binned_work(starts: Sequence[float], ends: Sequence[float], tokens: Sequence[int], t0: float, step: float,
                 bins: int) -> tuple[list[float], list[float]]:
    """Per bin, the request-seconds spent decoding and the tokens made, each request's spread evenly
    over its span; a request with no span lands its tokens in the bin where it ended."""
    busy = [0.0] * bins
    made = [0.0] * bins
    for s, e, n in zip(starts, ends, tokens, strict=True):
        if e <= s:
            made[min(bins - 1, int((e - t0) / step))] += n
            continue
        pace = n / (e - s)
        first, last = int((s - t0) / step), min(bins - 1, int((e - t0) / step))
        for b in range(first, last + 1):
            overlap = min(e, t0 + (b + 1) * step) - max(s, t0 + b * step)
            if overlap > 0:
                busy[b] += overlap
                made[b] += overlap * pace
    return busy, made


def _blocks(chosen: list[int], made: list[float], step: float) -> tuple[tuple[float, float], ...]:
    """The window cut into at most BLOCKS consecutive runs of bins, (tokens, seconds) each, for the
    block bootstrap of the rate: neighbouring bins are correlated, so they are resampled together."""
    count = min(BLOCKS, len(chosen))
    blocks = []
    for k in range(count):
        part = chosen[k * len(chosen) // count:(k + 1) * len(chosen) // count]
        blocks.append((sum(made[b] for b in part), len(part) * step))
    return tuple(blocks)


def _batch_shape(starts: Sequence[float], ends: Sequence[float], tokens: Sequence[int], busy: list[float],
                 t0: float, step: float) -> float:
    """k of "time per token = a * (1 + k * concurrency)", fitted over requests weighted by their tokens."""
    bins = len(busy)
    points: list[tuple[float, float, float]] = []
    for s, e, n in zip(starts, ends, tokens, strict=True):
        if e <= s or n < 2:
            continue
        seen = 0.0
        for b in range(int((s - t0) / step), min(bins - 1, int((e - t0) / step)) + 1):
            overlap = min(e, t0 + (b + 1) * step) - max(s, t0 + b * step)
            if overlap > 0:
                seen += overlap * busy[b] / step
        points.append(((e - s) / n, seen / (e - s), float(n)))
    weight = sum(w for _, _, w in points)
    if weight <= 0:
        return 0.0
    mean_x = sum(w * x for _, x, w in points) / weight
    mean_y = sum(w * y for y, _, w in points) / weight
    sxx = sum(w * (x - mean_x) ** 2 for _, x, w in points)
    if sxx <= 1e-9 * weight:
        return 0.0  # every request saw the same concurrency: the shape cannot be told
    slope = sum(w * (x - mean_x) * (y - mean_y) for y, x, w in points) / sxx
    intercept = mean_y - slope * mean_x
    return slope / intercept if slope > 0 and intercept > 0 else 0.0


def makespan(lengths: Sequence[int], slots: int, per_slot: float, kappa: float = 0.0) -> float:
    """Jobs take free slots in order; every running job advances at the pace of the current batch:
    `per_slot` tokens/s with all slots busy, (1 + kappa * slots) / (1 + kappa * c) times that with c."""
    slots = max(1, slots)
    boost = 1 + kappa * slots
    jobs = iter(lengths)
    # All running jobs advance together, so each is a mark on one shared progress axis (in tokens).
    marks = [float(length) for length in itertools.islice(jobs, slots)]
    heapq.heapify(marks)
    progress = elapsed = 0.0
    while marks:
        end = heapq.heappop(marks)
        elapsed += (end - progress) / (per_slot * boost / (1 + kappa * (len(marks) + 1)))
        progress = end
        following = next(jobs, None)
        if following is not None:
            heapq.heappush(marks, progress + following)
    return elapsed


def tail_draws(lengths: Sequence[int], weights: Sequence[float], jobs: int, slots: int, per_slot: float,
               seed: int, kappa: float = 0.0) -> list[float]:
    """Makespan minus the saturated time for `jobs` jobs drawn from the weighted lengths, for a few draws:
    which long answer happens to come last moves the tail a lot in a small set (and not in a large one)."""
    if jobs <= 0 or not lengths or per_slot <= 0:
        return [0.0]
    rng = random.Random(seed)
    count = min(jobs, MAX_SIMULATED_JOBS)
    tails = []
    for _ in range(max(1, min(5, MAX_SIMULATED_JOBS // count))):
        drawn = rng.choices(lengths, weights=weights, k=count)
        tails.append(max(0.0, makespan(drawn, slots, per_slot, kappa) - sum(drawn) / (per_slot * max(1, slots))))
    return tails


def tail_seconds(lengths: Sequence[int], weights: Sequence[float], jobs: int, slots: int, per_slot: float,
                 seed: int, kappa: float = 0.0) -> float:
    return statistics.fmean(tail_draws(lengths, weights, jobs, slots, per_slot, seed, kappa))


@dataclass(frozen=True, slots=True)
class Interval:
    point: float
    low: float
    high: float


def quantile(ordered: Sequence[float], fraction: float) -> float:
    if not ordered:
        return 0.0
    position = fraction * (len(ordered) - 1)
    lo = int(position)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


def interval(point: float, replicates: list[float], coverage: float = 0.9) -> Interval:
    ordered = sorted(replicates)
    tail = (1 - coverage) / 2
    return Interval(point, quantile(ordered, tail), quantile(ordered, 1 - tail))


def bootstrap_totals(strata: Sequence[tuple[int, Sequence[int]]], rounds: int, seed: int, *,
                     within: bool = True) -> list[float]:
    """Replicates of sum(count * mean length) over strata, resampling each stratum's lengths: the one-column
    case of `bootstrap_columns`, with its finite-population correction and its normal approximation."""
    return bootstrap_columns([(count, [lengths]) for count, lengths in strata], rounds, seed, within=within)[0]


def finite_population_shrink(count: int, sampled: int) -> float:
    """How much of a sample mean's spread is left when `sampled` of a stratum's `count` prompts were measured
    (sampling without replacement): sqrt(1 - n/N), 0 when the whole stratum was measured. A stratum that
    borrows more lengths than it holds (the pooled lengths, for a stratum the sample missed) keeps the full
    spread: those lengths are not its own."""
    if count <= 0 or sampled > count:
        return 1.0
    return math.sqrt(1.0 - sampled / count)


def bootstrap_rates(blocks: Sequence[tuple[float, float]], rounds: int, seed: int) -> list[float]:
    rng = random.Random(seed + 1)
    replicates = []
    for _ in range(rounds):
        picked = rng.choices(blocks, k=len(blocks))
        seconds = sum(s for _, s in picked)
        replicates.append(sum(t for t, _ in picked) / seconds if seconds > 0 else 0.0)
    return replicates


def bootstrap_columns(strata: Sequence[tuple[int, Sequence[Sequence[float]]]], rounds: int,
                      seed: int, *, within: bool = True) -> list[list[float]]:
    """Replicates of sum(count * mean) over strata for several per-record columns at once: per round, the
    columns of one stratum are resampled at the same records, so a ratio or a difference of two columns pairs
    up. Returns one list of `rounds` replicates per column.

    A stratum's resampled mean keeps `finite_population_shrink` of its distance from the sample's mean: a
    sample that is a large share of its stratum (a calibration of 1,000 of 3,000 prompts, a partial run's
    results) leaves less of the stratum unknown. `within=False` is for counts that hold none of the measured
    prompts (a partial run's remaining prompts): their whole mean is unknown, so no correction. A stratum with
    more than EXACT_BOOTSTRAP_LIMIT records uses the normal approximation of each column's mean, with one
    shared draw per round: columns of one stratum move together, which at that size matters little (the
    spread of its mean is small).
    """
    rng = random.Random(seed)
    width = _common_width(strata)
    moments = [_moments(count, columns, within) for count, columns in strata]
    replicates: list[list[float]] = [[] for _ in range(width)]
    for _ in range(rounds):
        totals = _one_round(moments, width, rng)
        for c in range(width):
            replicates[c].append(totals[c])
    return replicates


# count, columns, records, per-column means, per-column standard errors of the mean, finite-population shrink
_Moments = tuple[int, Sequence[Sequence[float]], int, list[float], list[float], float]


def _common_width(strata: Sequence[tuple[int, Sequence[Sequence[float]]]]) -> int:
    widths = {len(columns) for _, columns in strata}
    width = widths.pop() if len(widths) == 1 else 0
    if widths or (strata and width == 0):
        raise ValueError("every stratum needs the same number of columns, at least one")
    return width


def _moments(count: int, columns: Sequence[Sequence[float]], within: bool) -> _Moments:
    n = len(columns[0])
    if any(len(column) != n for column in columns):
        raise ValueError("the columns of a stratum must have one value per record")
    means = [sum(column) / n if n else 0.0 for column in columns]
    spreads = [statistics.pstdev(column) / math.sqrt(n) if n > 1 else 0.0 for column in columns]
    return count, columns, n, means, spreads, finite_population_shrink(count, n) if within else 1.0


def _one_round(moments: list[_Moments], width: int, rng: random.Random) -> list[float]:
    """One bootstrap replicate of every column's total. The draws are taken in stratum order, so one seed
    always gives the same replicates."""
    totals = [0.0] * width
    for count, columns, n, means, spreads, shrink in moments:
        if n == 0:
            continue
        if n > EXACT_BOOTSTRAP_LIMIT:
            z = rng.gauss(0.0, 1.0)
            for c in range(width):
                totals[c] += count * max(0.0, means[c] + z * spreads[c] * shrink)
        else:
            picked = [math.floor(rng.random() * n) for _ in range(n)]
            for c, column in enumerate(columns):
                resampled = sum(column[i] for i in picked) / n
                totals[c] += count * (means[c] + (resampled - means[c]) * shrink)
    return totals
