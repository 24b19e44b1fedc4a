"""What `client.run --extend` would cost: a run made under a narrower `--train-window` (FROM's, `--extend-from`)
extended to this one, against generating the replies FROM cut again from token 0.

Per record of the calibration sample (pure arithmetic), with P prompt and L completion tokens, C the run's
max_tokens, b0 = min(C, N0 - P) and b1 = min(C, N - P) the reply budgets under the narrow window N0 and the
wide one N:
- a reply FROM cut (P < N0 and L > b0) is continued: min(L, b1) - b0 tokens are generated, where generating
  it again costs min(L, b1);
- a prompt that alone fills N0 but not N (N0 <= P < N) has no record in FROM: min(L, b1) tokens either way.

Projected onto each target per stratum as the purpose figures are (the same columns bootstrap, its seed and
intervals); the wall time is the tokens over the sample's throughput (its block bootstrap, paired by round)
and the GPU-hours that times the GPUs. The tail is not modelled: the continued replies are the long ones, so
the wall time is a floor. Nor is the prefill of each continuation's prompt and kept ids, which a server
computes again (a prefix cache may hold it).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from client.estimate.measure import Measurements, StratumSample
from client.estimate.model import Interval, Throughput, bootstrap_columns, bootstrap_rates, interval
from client.estimate.purpose import strata_samples

CUT, CONTINUED, REGENERATED, NEW_PROMPTS, NEW_PROMPT_TOKENS = range(5)


@dataclass(frozen=True, slots=True)
class ExtensionCost:
    label: str
    from_window: int
    to_window: int
    cut_replies: Interval  # replies FROM cut, continued by the extension
    continued_tokens: Interval  # what the extension generates for them
    regenerated_tokens: Interval  # what generating them again from token 0 costs
    continued_gpu_hours: Interval
    regenerated_gpu_hours: Interval
    new_prompts: float  # prompts that fill the narrow window alone and not the wide one (no record in FROM)
    new_prompt_tokens: Interval  # their replies, generated whole either way


def record_columns(completion: int, prompt: int, from_window: int, to_window: int,
                   max_tokens: int | None) -> tuple[float, float, float, float, float]:
    """(cut, continued tokens, regenerated tokens, new prompt, its tokens) of one record."""
    cap = max_tokens if max_tokens is not None else completion
    wide = min(completion, max(0, min(cap, to_window - prompt)))
    if prompt >= to_window:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    if prompt >= from_window:
        return 0.0, 0.0, 0.0, 1.0, float(wide)
    narrow = min(cap, from_window - prompt)
    if completion <= narrow:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    return 1.0, float(wide - narrow), float(wide), 0.0, 0.0


def _columns(sample: StratumSample, from_window: int, to_window: int, max_tokens: int | None) -> list[array[float]]:
    rows = [record_columns(x, p, from_window, to_window, max_tokens)
            for x, p in zip(sample.lengths, sample.prompt_lengths, strict=True)]
    return [array("d", (row[c] for row in rows)) for c in range(5)]


def extension_cost(label: str, counts: dict[str, int], found: Measurements, rate: Throughput, gpus: int,
                   from_window: int, to_window: int, max_tokens: int | None, rounds: int, seed: int, *,
                   within: bool = True) -> ExtensionCost | None:
    strata = [(count, _columns(sample, from_window, to_window, max_tokens))
              for count, sample in strata_samples(counts, found)]
    if not strata:
        return None
    points = [sum(count * sum(columns[c]) / len(columns[c]) for count, columns in strata) for c in range(5)]
    replicates = bootstrap_columns(strata, rounds, seed, within=within)
    rates = bootstrap_rates(rate.blocks, rounds, seed)
    hours = gpus / 3600

    def gpu_hours(c: int) -> Interval:
        point = points[c] / rate.tokens_per_s * hours if rate.tokens_per_s > 0 else 0.0
        return interval(point, [t / r * hours if r > 0 else 0.0 for t, r in zip(replicates[c], rates, strict=True)])

    return ExtensionCost(
        label=label, from_window=from_window, to_window=to_window,
        cut_replies=interval(points[CUT], replicates[CUT]),
        continued_tokens=interval(points[CONTINUED], replicates[CONTINUED]),
        regenerated_tokens=interval(points[REGENERATED], replicates[REGENERATED]),
        continued_gpu_hours=gpu_hours(CONTINUED), regenerated_gpu_hours=gpu_hours(REGENERATED),
        new_prompts=points[NEW_PROMPTS], new_prompt_tokens=interval(points[NEW_PROMPT_TOKENS],
                                                                    replicates[NEW_PROMPT_TOKENS]))


def extension_costs(targets: Sequence[tuple[str, dict[str, int]]], found: Measurements, rate: Throughput,
                    gpus: int, from_window: int, to_window: int, max_tokens: int | None, rounds: int, seed: int,
                    outside_sample: tuple[str, ...] = ()) -> tuple[ExtensionCost, ...]:
    made = (extension_cost(label, counts, found, rate, gpus, from_window, to_window, max_tokens, rounds, seed,
                           within=label not in outside_sample) for label, counts in targets if sum(counts.values()))
    return tuple(cost for cost in made if cost is not None)
