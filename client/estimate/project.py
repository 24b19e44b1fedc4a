"""Measurements + the prompt set's strata -> the projection: tokens, wall time, GPU-hours, what-ifs.

Every stratum of the target set is projected with its own sampled lengths (a stratum the sample
missed borrows the pooled lengths, with a warning), weighted by its true prompt count. GPU counts
scale the measured throughput and slot count linearly, which is what data-parallel replicas do. The
purpose figures (the trainer's window, loops, and what stopping them saves) are `client.estimate.purpose`'s.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from client.estimate.extension import ExtensionCost, extension_costs
from client.estimate.hardware import HardwareProjection
from client.estimate.measure import Measurements, StratumSample
from client.estimate.model import (
    Interval,
    Throughput,
    bootstrap_rates,
    bootstrap_totals,
    interval,
    tail_draws,
    tail_seconds,
)
from client.estimate.purpose import Purpose, purposes

PRECISION_GOAL = 0.05  # the output tokens' 90% interval, as a share of the projection, that the advice aims at


@dataclass(frozen=True, slots=True)
class Settings:
    gpus: int
    gpus_assumed: bool
    max_tokens: int | None
    what_if_max_tokens: tuple[int, ...]
    what_if_gpus: tuple[int, ...]
    rounds: int = 1000
    seed: int = 0
    train_window: int | None = None  # the trainer's window, prompt included (None: not reported)
    extend_from: int | None = None  # price extending a run made under this narrower window (client.estimate.extension)
    prompts_in_files: int | None = None  # what --prompts holds, the most a sample can draw (--set-size scales it up)
    outside_sample: tuple[str, ...] = ()  # labels of targets that hold none of the measured prompts ("remaining")


@dataclass(frozen=True, slots=True)
class Target:
    label: str
    prompts: int
    output_tokens: Interval
    reasoning_tokens: float
    content_tokens: float
    tool_tokens: float
    prompt_tokens: float
    tail_s: float
    wall_s: Interval
    gpu_hours: Interval


@dataclass(frozen=True, slots=True)
class CapRow:
    max_tokens: int
    output_tokens: float
    saved_share: float
    truncated_share: float
    wall_s: float
    gpu_hours: float
    beyond_sample: bool  # above the cap the sample ran with: tokens are a lower bound, truncation an upper one


@dataclass(frozen=True, slots=True)
class GpuRow:
    gpus: int
    wall_s: float
    gpu_hours: float


@dataclass(frozen=True, slots=True)
class Projection:
    throughput: Throughput
    slots: int
    targets: tuple[Target, ...]
    caps: tuple[CapRow, ...]
    gpu_rows: tuple[GpuRow, ...]
    warnings: tuple[str, ...]
    purpose: tuple[Purpose, ...] = ()  # per target: the trainer's window, loops, and what stopping them saves
    hardware: HardwareProjection | None = None  # other GPU kinds and counts (client.estimate.hardware): a model
    precision: Precision | None = None  # the first target's output tokens: how open the sample leaves them
    extension: tuple[ExtensionCost, ...] = ()  # per target: client.run --extend from --extend-from's window


@dataclass(frozen=True, slots=True)
class Precision:
    """How far the sample's lengths leave the first target's output tokens open, and the sample that would
    close them to PRECISION_GOAL: a heavy tail of long replies needs thousands of prompts, not hundreds."""

    share: float  # the wider half of the output tokens' 90% interval, over the projected tokens
    sampled: int  # prompts whose lengths were measured
    prompts: int  # prompts in the set
    advised_sample: int | None  # about this many measured prompts give PRECISION_GOAL (None: already there)


def advised_sample(share: float, sampled: int, prompts: int, goal: float = PRECISION_GOAL) -> int | None:
    """The sample size that brings a mean's interval from `share` to `goal`. A sample of n from N prompts
    leaves a variance in proportion to 1/n - 1/N (without replacement), so n' solves
    1/n' - 1/N = (1/n - 1/N) * (goal/share)^2; at most the whole set."""
    if share <= goal or sampled <= 0 or sampled >= prompts:
        return None
    inverse = (1 / sampled - 1 / prompts) * (goal / share) ** 2 + 1 / prompts
    return min(prompts, math.ceil(1 / inverse))


def _precision(target: Target, rows: Sequence[Row], in_files: int | None, warnings: list[str]) -> Precision | None:
    point = target.output_tokens.point
    sampled = sum(len(sample) for _, _, sample, stats in rows if stats is not None)
    if point <= 0 or sampled == 0:
        return None
    share = max(point - target.output_tokens.low, target.output_tokens.high - point) / point
    advised = advised_sample(share, sampled, target.prompts)
    if advised is not None:
        if in_files is not None and advised > in_files:
            widen = (f"about {advised:,} prompts would narrow that to \u00b1{PRECISION_GOAL:.0%}, more than the "
                     f"{in_files:,} --prompts holds: give a larger file shaped like the set")
        elif advised > target.prompts // 2:
            widen = f"only measuring most of the set would narrow that to \u00b1{PRECISION_GOAL:.0%}"
        else:
            widen = (f"a calibration sample of about {advised:,} prompts (--sample {advised}) would narrow that to "
                     f"\u00b1{PRECISION_GOAL:.0%}")
        warnings.append(f"the {sampled:,} sampled lengths leave the output tokens within \u00b1{share:.0%} (90%); "
                        + widen)
    return Precision(share, sampled, target.prompts, advised)


# (stratum, prompts in the target, the lengths that stand for it, its measured sums if it was sampled)
Row = tuple[str, int, list[int], StratumSample | None]


def _pooled(strata: dict[str, StratumSample]) -> list[int]:
    return [length for sample in strata.values() for length in sample.lengths]


def _lengths_for(counts: dict[str, int], found: Measurements, warnings: list[str]) -> list[Row]:
    pooled = _pooled(found.strata)
    rows: list[Row] = []
    for name, count in counts.items():
        sample = found.strata.get(name)
        if sample is None or not sample.lengths:
            if count:
                warnings.append(f"stratum {name!r} ({count:,} prompts) has no sampled result; "
                                "it is projected with the pooled lengths")
            rows.append((name, count, pooled, None))
        else:
            rows.append((name, count, list(sample.lengths), sample))
    return rows


def _weights(rows: Sequence[Row]) -> tuple[list[int], list[float]]:
    lengths: list[int] = []
    weights: list[float] = []
    for _, count, sample, _ in rows:
        if sample and count:
            lengths.extend(sample)
            weights.extend([count / len(sample)] * len(sample))
    return lengths, weights


def _capped_total(rows: Sequence[Row], cap: int | None) -> tuple[float, float]:
    """(output tokens, share truncated) of the target when every reply is cut at `cap`."""
    tokens = truncated = 0.0
    prompts = 0
    for _, count, sample, _ in rows:
        if not sample:
            continue
        prompts += count
        capped = [min(length, cap) for length in sample] if cap else sample
        tokens += count * sum(capped) / len(capped)
        if cap:
            truncated += count * sum(1 for length in sample if length >= cap) / len(sample)
    return tokens, truncated / prompts if prompts else 0.0


def _target(label: str, counts: dict[str, int], found: Measurements, rate: Throughput, slots: int,
            settings: Settings, warnings: list[str]) -> tuple[Target, list[Row]]:
    rows = _lengths_for(counts, found, warnings)
    prompts = sum(counts.values())
    total, _ = _capped_total(rows, None)
    lengths, weights = _weights(rows)
    tails = tail_draws(lengths, weights, prompts, slots, rate.per_slot, settings.seed, rate.kappa)
    tail = statistics.fmean(tails)
    totals = bootstrap_totals([(count, sample) for _, count, sample, _ in rows], settings.rounds, settings.seed,
                              within=label not in settings.outside_sample)
    rates = bootstrap_rates(rate.blocks, settings.rounds, settings.seed)
    walls = [t / r + tails[i % len(tails)] if r > 0 else float("inf")
             for i, (t, r) in enumerate(zip(totals, rates, strict=True))]
    wall = total / rate.tokens_per_s + tail
    parts = [0.0, 0.0, 0.0, 0.0]
    for _, count, sample, stats in rows:
        if stats is not None and sample:
            for i, value in enumerate((stats.reasoning, stats.content, stats.tools, stats.prompt)):
                parts[i] += count * value / len(sample)
    hours = settings.gpus / 3600
    target = Target(
        label=label, prompts=prompts, output_tokens=interval(total, totals),
        reasoning_tokens=parts[0], content_tokens=parts[1], tool_tokens=parts[2], prompt_tokens=parts[3],
        tail_s=tail, wall_s=interval(wall, walls), gpu_hours=interval(wall * hours, [w * hours for w in walls]),
    )
    return target, rows


def set_lengths(counts: dict[str, int], found: Measurements) -> tuple[list[int], list[float]]:
    """The sampled lengths and their weights (each stratum's true count over its sample size), as the tail
    simulation draws them for a set of `counts` prompts per stratum."""
    return _weights(_lengths_for(counts, found, []))


def default_caps(current: int | None, longest: int) -> tuple[int, ...]:
    """The run's cap, three halvings below it and one doubling above."""
    reference = current or max(16, longest)
    return tuple(sorted({max(1, reference >> shift) for shift in (3, 2, 1)} | {reference, reference * 2}))


def default_gpus(gpus: int) -> tuple[int, ...]:
    return tuple(sorted({max(1, gpus // 2), gpus, gpus * 2, gpus * 4}))


def project(targets: Sequence[tuple[str, dict[str, int]]], found: Measurements, rate: Throughput,
            settings: Settings) -> Projection:
    """Project each (label, prompts per stratum) target; what-if tables are for the first one."""
    warnings: list[str] = []
    slots = max(1, round(rate.concurrency))
    made = [_target(label, counts, found, rate, slots, settings, warnings) for label, counts in targets]
    first, rows = made[0]
    precision = _precision(first, rows, settings.prompts_in_files, warnings)
    lengths, weights = _weights(rows)
    hours = 1 / 3600
    caps = []
    base_tokens = first.output_tokens.point
    for cap in settings.what_if_max_tokens:
        beyond = settings.max_tokens is not None and cap > settings.max_tokens
        tokens, truncated = _capped_total(rows, None if beyond else cap)
        capped = [min(x, cap) for x in lengths]
        tail = tail_seconds(capped, weights, first.prompts, slots, rate.per_slot, settings.seed, rate.kappa)
        wall = tokens / rate.tokens_per_s + tail
        if beyond:
            truncated = _capped_total(rows, settings.max_tokens)[1]
        caps.append(CapRow(cap, tokens, 1 - tokens / base_tokens if base_tokens else 0.0, truncated, wall,
                           wall * settings.gpus * hours, beyond))
    gpu_rows = []
    for gpus in settings.what_if_gpus:
        scale = gpus / settings.gpus
        scaled_slots = max(1, round(slots * scale))
        # More replicas of the same server: each lone request is as much faster as before (kappa * slots holds).
        tail = tail_seconds(lengths, weights, first.prompts, scaled_slots, rate.per_slot, settings.seed,
                            rate.kappa * slots / scaled_slots)
        wall = first.output_tokens.point / (rate.tokens_per_s * scale) + tail
        gpu_rows.append(GpuRow(gpus, wall, wall * gpus * hours))
    if rate.window_s < 3 * rate.typical_s:
        warnings.append(f"the fleet was saturated for only {rate.window_s:.2f}s, about "
                        f"{rate.window_s / rate.typical_s:.1f} request lifetimes: the throughput, and so the wall "
                        "time, is rough. Send a larger --sample (at least 5x the fleet's decode slots)")
    found_purpose = purposes(targets, found, rate, slots, settings.gpus, settings.train_window, settings.rounds,
                             settings.seed, settings.outside_sample)
    extension = (extension_costs(targets, found, rate, settings.gpus, settings.extend_from, settings.train_window,
                                 settings.max_tokens, settings.rounds, settings.seed, settings.outside_sample)
                 if settings.extend_from is not None and settings.train_window is not None else ())
    return Projection(rate, slots, tuple(t for t, _ in made), tuple(caps), tuple(gpu_rows), tuple(warnings),
                      found_purpose, precision=precision, extension=extension)
