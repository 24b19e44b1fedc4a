"""client.estimate.model, table-driven: the batch makespan model, quantiles and intervals, and the
bootstrap replicates the estimate's intervals come from."""

from __future__ import annotations

import math

import pytest

from client.estimate.measure import StratumSample
from client.estimate.model import (
    EXACT_BOOTSTRAP_LIMIT,
    Interval,
    bootstrap_rates,
    bootstrap_totals,
    finite_population_shrink,
    interval,
    makespan,
    quantile,
    tail_draws,
)
from client.estimate.project import Row, Target, _precision, advised_sample


@pytest.mark.parametrize(("lengths", "slots", "per_slot", "kappa", "seconds"), [
    ([], 4, 10.0, 0.0, 0.0),
    ([10] * 4, 4, 10.0, 0.0, 1.0),  # one wave
    ([10] * 8, 4, 10.0, 0.0, 2.0),  # two waves
    ([30, 10, 10, 10], 2, 10.0, 0.0, 3.0),  # the long job runs while the short ones follow each other
    ([5, 5], 0, 5.0, 0.0, 2.0),  # no slots counts as one
    ([10, 10], 2, 10.0, 1.0, 1.0),  # a full batch runs at per_slot
    ([10], 2, 10.0, 1.0, 10 / 15),  # a lone job runs faster: (1 + 2) / (1 + 1) times per_slot
], ids=["empty", "one-wave", "two-waves", "long-job", "zero-slots", "full-batch", "lone-job-faster"])
def test_makespan(lengths: list[int], slots: int, per_slot: float, kappa: float, seconds: float) -> None:
    assert makespan(lengths, slots, per_slot, kappa) == pytest.approx(seconds)


@pytest.mark.parametrize(("ordered", "fraction", "value"), [
    ([], 0.5, 0.0),
    ([5.0], 0.9, 5.0),
    ([1.0, 2.0, 3.0], 0.5, 2.0),
    ([0.0, 10.0], 0.25, 2.5),
    ([1.0, 2.0, 3.0, 4.0], 1.0, 4.0),
    ([1.0, 2.0, 3.0, 4.0], 0.0, 1.0),
])
def test_quantile(ordered: list[float], fraction: float, value: float) -> None:
    assert quantile(ordered, fraction) == pytest.approx(value)


def test_interval_takes_the_central_share_of_the_replicates() -> None:
    replicates = [float(i) for i in range(101)][::-1]  # order does not matter
    assert interval(50.0, replicates) == Interval(50.0, pytest.approx(5.0), pytest.approx(95.0))
    assert interval(50.0, replicates, coverage=0.5) == Interval(50.0, pytest.approx(25.0), pytest.approx(75.0))
    assert interval(1.0, []) == Interval(1.0, 0.0, 0.0)


@pytest.mark.parametrize(("strata", "total"), [
    ([(10, [5, 5, 5])], 50.0),  # no spread: every replicate is count x length
    ([(10, [5, 5, 5]), (4, [2])], 58.0),
    ([(10, [])], 0.0),  # a stratum with no lengths adds nothing
    ([(3, [7] * (EXACT_BOOTSTRAP_LIMIT + 1))], 21.0),  # the normal approximation, with no spread
])
def test_bootstrap_totals_without_spread_are_exact(strata: list[tuple[int, list[int]]], total: float) -> None:
    assert bootstrap_totals(strata, rounds=20, seed=1) == pytest.approx([total] * 20)


def test_bootstrap_totals_spread_and_repeat() -> None:
    strata = [(100, [1, 10, 100])]
    first = bootstrap_totals(strata, rounds=200, seed=3)
    assert first == bootstrap_totals(strata, rounds=200, seed=3), "a seed gives the same replicates"
    assert 100 <= min(first) < max(first) <= 10_000
    assert sum(first) / len(first) == pytest.approx(100 * 111 / 3, rel=0.15)


@pytest.mark.parametrize(("blocks", "rate"), [
    ([(100.0, 1.0), (200.0, 2.0)], 100.0),  # every block at 100 tok/s
    ([(0.0, 0.0)], 0.0),  # no time measured
])
def test_bootstrap_rates(blocks: list[tuple[float, float]], rate: float) -> None:
    assert bootstrap_rates(blocks, rounds=10, seed=0) == pytest.approx([rate] * 10)


@pytest.mark.parametrize(("lengths", "jobs", "per_slot"), [([], 10, 1.0), ([5], 0, 1.0), ([5], 10, 0.0)])
def test_tail_draws_without_work_are_zero(lengths: list[int], jobs: int, per_slot: float) -> None:
    assert tail_draws(lengths, [1.0] * len(lengths), jobs, slots=4, per_slot=per_slot, seed=0) == [0.0]


def test_a_long_job_last_makes_a_tail() -> None:
    tails = tail_draws([1, 1000], [0.5, 0.5], jobs=8, slots=4, per_slot=10.0, seed=0)
    assert tails and all(t >= 0 for t in tails) and max(tails) > 0


@pytest.mark.parametrize(("count", "sampled", "shrink"), [
    (100, 0, 1.0),
    (100, 75, 0.5),  # a quarter of the stratum unknown: half the spread of the mean
    (100, 100, 0.0),  # the whole stratum measured
    (10, 20, 1.0),  # borrowed lengths (more than the stratum holds) are not its own: full spread
    (0, 5, 1.0),
])
def test_finite_population_shrink(count: int, sampled: int, shrink: float) -> None:
    assert finite_population_shrink(count, sampled) == pytest.approx(shrink)


def test_a_stratum_measured_whole_has_no_spread_and_a_large_share_narrows_it() -> None:
    assert bootstrap_totals([(3, [1, 10, 100])], rounds=50, seed=2) == pytest.approx([111.0] * 50)
    lengths = list(range(1, 101))
    wide = bootstrap_totals([(10**9, lengths)], rounds=400, seed=5)
    narrow = bootstrap_totals([(400, lengths)], rounds=400, seed=5)  # a quarter of the stratum measured
    spread = [(max(xs) - min(xs)) / count for xs, count in ((wide, 10**9), (narrow, 400))]  # of the mean
    assert spread[1] == pytest.approx(spread[0] * math.sqrt(0.75), rel=1e-5), "same draws, sqrt(1 - n/N) apart"
    # Prompts none of which were measured (a partial run's remaining ones) keep the whole spread.
    outside = bootstrap_totals([(400, lengths)], rounds=400, seed=5, within=False)
    assert (max(outside) - min(outside)) / 400 == pytest.approx(spread[0], rel=1e-5)


@pytest.mark.parametrize(("share", "sampled", "prompts", "advised"), [
    (0.04, 300, 3000, None),  # already within the goal
    (0.10, 300, 10**12, 1200),  # twice too wide in a huge set: four times the sample
    (0.20, 500, 1000, 942),  # half the set measured: the rest of the variance is what shrinks
    (0.90, 10, 20, 20),  # at most the whole set
    (0.10, 3000, 3000, None),  # the whole set measured
])
def test_advised_sample(share: float, sampled: int, prompts: int, advised: int | None) -> None:
    assert advised_sample(share, sampled, prompts) == advised


def _open_target(prompts: int) -> Target:
    tokens = Interval(1000.0, 800.0, 1200.0)  # +-20%
    return Target(label="whole set", prompts=prompts, output_tokens=tokens, reasoning_tokens=0, content_tokens=0,
                  tool_tokens=0, prompt_tokens=0, tail_s=0, wall_s=tokens, gpu_hours=tokens)


@pytest.mark.parametrize(("prompts", "in_files", "says"), [
    (10**9, None, "a calibration sample of about 1,600 prompts (--sample 1600) would narrow that to \u00b15%"),
    (10**9, 10**9, "(--sample 1600)"),
    # --set-size from a file of 264: the advised sample is more than the file can give
    (914_000, 264, "about 1,598 prompts would narrow that to \u00b15%, more than the 264 --prompts holds"),
    (300, None, "only measuring most of the set would"),
])
def test_the_precision_note_names_a_sample_the_prompts_can_give(prompts: int, in_files: int | None,
                                                                says: str) -> None:
    rows: list[Row] = [("chat", prompts, [1, 2] * 50, StratumSample())]
    warnings: list[str] = []
    found = _precision(_open_target(prompts), rows, in_files, warnings)
    assert found is not None and found.sampled == 100 and found.share == pytest.approx(0.2)
    assert len(warnings) == 1 and "within \u00b120% (90%)" in warnings[0] and says in warnings[0], warnings
