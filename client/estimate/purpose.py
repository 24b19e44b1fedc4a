"""What the trainer keeps: output tokens past the training window, output tokens spent in loops, and what
the client's two stops (`client.run --train-window N` and its loop stop) would save on the full set.

Per record (pure arithmetic):
- Window N. The trainer keeps `input_ids[:N]`, prompt included. A reply of P prompt and L completion tokens
  has min(L, max(0, P + L - N)) tokens past the window; with `--train-window N` the run asks for at most
  N - P of them, so those are never generated. A prompt of N tokens or more would not be sent at all: all
  its L tokens are saved, and such prompts are counted apart.
- Loop stop. A reply loops when its reasoning + content ends in one block repeated (client.loops.repetition's
  text rule, as the audit reads it), or when a loop stop already ended it (finish_reason "repetition"). The
  loop starts `span` characters before the end. A stream's detector checks every `check_every` characters and
  fires at the first check once the tail holds the repeats the rule needs, max(min_repeats x block, the floor
  of the loop's kind: min_span, counter_span or structured_span) characters of them; the check lands on
  average half a check interval later. The characters after that
  point would not be generated; they count in tokens at the record's own rate (completion tokens over the
  characters of reasoning + content). A reply a loop stop already ended saves nothing more.
- Both. The loop stop shortens the reply, then the window caps what is left: L - min(L - loop, max(0, N - P)).

On a target set, each option's saved tokens are projected per stratum as the output tokens are (weighted by
the true counts, resampled within each stratum by the same bootstrap and seed, with the columns of a record
resampled together so shares and savings pair up). The wall time saved is the saved tokens over the
throughput (the same block bootstrap of the throughput) plus how much shorter the tail gets (the same tail
simulation, on the shortened lengths, paired draw by draw). GPU-hours saved = wall time saved x GPUs.
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from client.estimate.measure import Measurements, StratumSample
from client.estimate.model import Interval, Throughput, bootstrap_columns, bootstrap_rates, interval, tail_draws
from client.estimate.waste import past_window


@dataclass(frozen=True, slots=True)
class Saving:
    option: str  # "train window", "loop stop", "both"
    output_tokens: Interval  # not generated
    share: Interval  # of the target's output tokens
    tail_s: float  # how much shorter the tail gets (mean of the tail draws)
    wall_s: Interval
    gpu_hours: Interval


@dataclass(frozen=True, slots=True)
class Purpose:
    label: str
    prompts: int
    window: int | None
    past_window: Interval | None  # share of the output tokens past the window
    prompts_over_window: float | None  # prompts whose prompt alone fills the window (projected count)
    looping_replies: float  # share of the replies that loop
    loop_tokens: Interval  # share of the output tokens in replies that loop
    stopped_replies: float  # share of the replies a loop stop already ended
    savings: tuple[Saving, ...]


# Per record of a stratum: completion tokens, tokens the loop stop saves, the tokens of a reply that loops,
# whether it loops, then with a window the tokens past it and the tokens both save. Arrays of doubles: a
# partial run's stratum can hold a million records.
Columns: TypeAlias = "list[array[float]]"
COMPLETION, LOOP_STOP, LOOPING_TOKENS, LOOPING, PAST_WINDOW, BOTH = range(6)


def _columns(sample: StratumSample, window: int | None) -> tuple[Columns, float, float]:
    """(columns, share of prompts over the window, share of replies already stopped) of a stratum."""
    lengths, prompts, loops, looping = sample.lengths, sample.prompt_lengths, sample.loop_saved, sample.looping
    columns = [array("d", lengths), array("d", loops),
               array("d", (x if flag else 0 for x, flag in zip(lengths, looping, strict=True))), array("d", looping)]
    over = 0.0
    if window is not None:
        columns.append(array("d", (past_window(x, p, window) for x, p in zip(lengths, prompts, strict=True))))
        columns.append(array("d", (x - min(x - saved, max(0, window - p))
                                   for x, p, saved in zip(lengths, prompts, loops, strict=True))))
        over = sum(p >= window for p in prompts) / len(lengths)
    return columns, over, sample.stopped / len(lengths)


def _pooled(found: Measurements) -> StratumSample:
    pooled = StratumSample()
    for sample in found.strata.values():
        pooled.lengths.extend(sample.lengths)
        pooled.prompt_lengths.extend(sample.prompt_lengths)
        pooled.loop_saved.extend(sample.loop_saved)
        pooled.looping.extend(sample.looping)
        pooled.stopped += sample.stopped
    return pooled


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def strata_samples(counts: dict[str, int], found: Measurements) -> list[tuple[int, StratumSample]]:
    """Each stratum's prompt count with the records measured in it; a stratum the sample missed takes the
    pooled records, as its lengths do in the projection. Strata of no prompt or no record are left out."""
    pooled: StratumSample | None = None
    out: list[tuple[int, StratumSample]] = []
    for name, count in counts.items():
        sample = found.strata.get(name)
        if sample is None or not sample.lengths:
            pooled = pooled or _pooled(found)
            sample = pooled
        if count and sample.lengths:
            out.append((count, sample))
    return out


def _gather(counts: dict[str, int], found: Measurements,
            window: int | None) -> tuple[list[tuple[int, Columns]], float, float]:
    """(prompt count and columns per stratum, projected prompts over the window, projected stopped replies)."""
    strata: list[tuple[int, Columns]] = []
    over = stopped = 0.0
    for count, sample in strata_samples(counts, found):
        columns, over_share, stopped_share = _columns(sample, window)
        strata.append((count, columns))
        over += count * over_share
        stopped += count * stopped_share
    return strata, over, stopped


def _share_of(points: list[float], replicates: list[list[float]], c: int) -> Interval:
    """Column c as a share of the completion tokens, replicate by replicate (the columns were resampled
    together, so each ratio pairs up)."""
    return interval(_share(points[c], points[COMPLETION]),
                    [_share(part, whole) for part, whole in zip(replicates[c], replicates[COMPLETION], strict=True)])


@dataclass(frozen=True, slots=True)
class _Tails:
    """The tail simulation of the projection, on the same records and weights, once as measured and once
    shortened per option: the same seed draws the same records, so the two pair up draw by draw."""
    lengths: list[int]
    weights: list[float]
    prompts: int
    slots: int
    rate: Throughput
    seed: int
    base: list[float]

    @classmethod
    def of(cls, strata: list[tuple[int, Columns]], prompts: int, slots: int, rate: Throughput, seed: int) -> _Tails:
        lengths = [int(x) for _, columns in strata for x in columns[COMPLETION]]
        weights = [count / len(columns[COMPLETION]) for count, columns in strata for _ in columns[COMPLETION]]
        base = tail_draws(lengths, weights, prompts, slots, rate.per_slot, seed, rate.kappa)
        return cls(lengths, weights, prompts, slots, rate, seed, base)

    def shorter(self, saved: list[float]) -> list[float]:
        """Per draw, how much shorter the tail gets when each record's reply loses its `saved` tokens."""
        tails = tail_draws([int(x - s) for x, s in zip(self.lengths, saved, strict=True)], self.weights,
                           self.prompts, self.slots, self.rate.per_slot, self.seed, self.rate.kappa)
        return [b - t for b, t in zip(self.base, tails, strict=True)]


def _saving(option: str, c: int, strata: list[tuple[int, Columns]], points: list[float],
            replicates: list[list[float]], tails: _Tails, rates: list[float], hours: float) -> Saving:
    """What one option (its saved tokens in column c) saves: tokens, their share, wall time and GPU-hours."""
    shorter = tails.shorter([x for _, columns in strata for x in columns[c]])
    wall = points[c] / tails.rate.tokens_per_s + statistics.fmean(shorter)
    walls = [s / r + shorter[i % len(shorter)] if r > 0 else 0.0
             for i, (s, r) in enumerate(zip(replicates[c], rates, strict=True))]
    return Saving(option, interval(points[c], replicates[c]), _share_of(points, replicates, c),
                  statistics.fmean(shorter), interval(wall, walls),
                  interval(wall * hours, [w * hours for w in walls]))


def purpose(label: str, counts: dict[str, int], found: Measurements, rate: Throughput, slots: int, gpus: int,
            window: int | None, rounds: int, seed: int, *, within: bool = True) -> Purpose:
    """The purpose figures of one target (prompts per stratum); see the module docstring. `within`: the target's
    prompts include the measured ones (bootstrap_columns)."""
    strata, over, stopped = _gather(counts, found, window)
    prompts = sum(count for count, _ in strata)
    width = 6 if window is not None else 4
    points = [sum(count * sum(columns[c]) / len(columns[c]) for count, columns in strata) for c in range(width)]
    replicates = bootstrap_columns(strata, rounds, seed, within=within) if strata else [[] for _ in range(width)]
    tails = _Tails.of(strata, prompts, slots, rate, seed)
    rates = bootstrap_rates(rate.blocks, rounds, seed)
    options = [("loop stop", LOOP_STOP)]
    if window is not None:
        options = [("train window", PAST_WINDOW), *options, ("both", BOTH)]
    savings = tuple(_saving(option, c, strata, points, replicates, tails, rates, gpus / 3600) for option, c in options)
    return Purpose(
        label=label, prompts=prompts, window=window,
        past_window=_share_of(points, replicates, PAST_WINDOW) if window is not None else None,
        prompts_over_window=over if window is not None else None,
        looping_replies=_share(points[LOOPING], prompts), loop_tokens=_share_of(points, replicates, LOOPING_TOKENS),
        stopped_replies=_share(stopped, prompts), savings=savings,
    )


def purposes(targets: Sequence[tuple[str, dict[str, int]]], found: Measurements, rate: Throughput, slots: int,
             gpus: int, window: int | None, rounds: int, seed: int,
             outside_sample: tuple[str, ...] = ()) -> tuple[Purpose, ...]:
    return tuple(purpose(label, counts, found, rate, slots, gpus, window, rounds, seed,
                         within=label not in outside_sample)
                 for label, counts in targets if sum(counts.values()))
