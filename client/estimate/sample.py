"""The calibration sample: strata of a prompt set, and a random sample stratified across them.

A prompt's stratum is its `meta.source`, else the name of the file it came from; under a sampling plan,
that and the setting the prompt draws (`by_setting`: the draw is a function of the plan, the run's seed and
the prompt's id, so the whole set's count per setting is exact, not sampled). Two streaming passes
over the prompt files (validated by the client's own PromptSource, so the sample holds only prompts a
run would send): the first counts each stratum, the second keeps the records at positions drawn in
advance. Allocation is proportional (largest remainder) with at least two per stratum, so every
stratum can be bootstrapped; the projection weights strata by their true counts, so a small stratum
that was over-sampled does not tilt the total.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from client.core.errors import map_write_error
from client.core.records import LineProblem, Prompt
from client.core.sampling_plan import SamplingPlan
from client.local.source import PromptSource, SourceCounts

MIN_PER_STRATUM = 2
SETTING_MARK = " \u00b7 setting "  # between a stratum's source and its setting: "chat \u00b7 setting think"

Stratifier = Callable[[Prompt], str]


def stratum_of(prompt: Prompt) -> str:
    meta = prompt.meta
    source = meta.get("source") if isinstance(meta, dict) else None
    return source if isinstance(source, str) and source else Path(prompt.source).name


def by_setting(plan: SamplingPlan, seed: int | None) -> Stratifier:
    """Strata of source and drawn setting, so each setting is projected from its own lengths."""
    def stratum(prompt: Prompt) -> str:
        return stratum_of(prompt) + SETTING_MARK + plan.draw(seed, prompt.id, prompt.meta).setting.name
    return stratum


def setting_of(stratum: str) -> str | None:
    """The setting a stratum of `by_setting` holds (None: a stratum without one)."""
    _, mark, setting = stratum.rpartition(SETTING_MARK)
    return setting if mark else None


@dataclass(frozen=True, slots=True)
class Census:
    """Valid prompts per stratum, in first-seen order, and what the reader skipped."""

    strata: dict[str, int]
    invalid: int
    duplicates: int
    problems: tuple[LineProblem, ...]

    @property
    def total(self) -> int:
        return sum(self.strata.values())


def scale_counts(strata: dict[str, int], size: int) -> dict[str, int]:
    """The strata of a set of `size` prompts shaped like `strata` (largest remainder): --set-size projects
    a set of that many prompts from a file that holds a sample of it."""
    total = sum(strata.values())
    if total == 0:
        return dict.fromkeys(strata, 0)
    exact = {name: size * count / total for name, count in strata.items()}
    scaled = {name: int(value) for name, value in exact.items()}
    order = sorted(strata, key=lambda name: exact[name] - scaled[name], reverse=True)
    for name in order[:size - sum(scaled.values())]:
        scaled[name] += 1
    return scaled


def _source(paths: Iterable[Path], on_problem: Callable[[LineProblem], None] | None = None) -> PromptSource:
    return PromptSource(list(paths), set(), on_problem=on_problem)


def census(paths: Iterable[Path], on_stratum: Callable[[Prompt, str], None] | None = None,
           stratifier: Stratifier = stratum_of) -> Census:
    """Count valid prompts per stratum; `on_stratum` sees every prompt with its stratum."""
    source = _source(paths)
    strata: dict[str, int] = {}
    for prompt in source:
        name = stratifier(prompt)
        strata[name] = strata.get(name, 0) + 1
        if on_stratum is not None:
            on_stratum(prompt, name)
    counts: SourceCounts = source.counts
    return Census(strata, counts.invalid, counts.duplicates, tuple(counts.problems[:20]))


def allocate(strata: dict[str, int], size: int) -> dict[str, int]:
    """Sample size per stratum: proportional to its count, largest remainder first, at least
    MIN_PER_STRATUM (or the whole stratum when it is smaller)."""
    total = sum(strata.values())
    if total == 0:
        return {name: 0 for name in strata}
    size = min(size, total)
    exact = {name: size * count / total for name, count in strata.items()}
    shares = {name: int(value) for name, value in exact.items()}
    left = size - sum(shares.values())
    for name in sorted(exact, key=lambda n: exact[n] - shares[n], reverse=True)[:left]:
        shares[name] += 1
    return {name: min(strata[name], max(shares[name], MIN_PER_STRATUM)) for name in strata}


def _record(prompt: Prompt) -> dict[str, Any]:
    record: dict[str, Any] = {"id": prompt.id, "messages": prompt.messages}
    if prompt.tools is not None:
        record["tools"] = prompt.tools
    if prompt.meta is not None:
        record["meta"] = prompt.meta
    return record


def draw(paths: Iterable[Path], strata: dict[str, int], sizes: dict[str, int], seed: int,
         stratifier: Stratifier = stratum_of) -> Iterator[tuple[Prompt, str]]:
    """The prompts at positions drawn uniformly without replacement within each stratum."""
    rng = random.Random(seed)
    wanted = {name: set(rng.sample(range(strata[name]), sizes.get(name, 0))) for name in strata}
    seen = dict.fromkeys(strata, 0)
    for prompt in _source(paths):
        name = stratifier(prompt)
        position = seen.get(name, 0)
        seen[name] = position + 1
        if position in wanted.get(name, ()):
            yield prompt, name


def write_records(out: Path, chosen: Iterable[tuple[Prompt, str]]) -> dict[str, str]:
    """Write the drawn prompts as PromptRecord JSONL to `out`; returns id -> stratum."""
    strata: dict[str, str] = {}
    try:
        with out.open("wb") as handle:
            for prompt, name in chosen:
                handle.write(orjson.dumps(_record(prompt), option=orjson.OPT_APPEND_NEWLINE))
                strata[prompt.id] = name
    except OSError as exc:  # no room is exit 4, like the results (client.core.exit_codes); no half sample left
        out.unlink(missing_ok=True)
        raise map_write_error(exc, f"the calibration sample {out} could not be written ({exc.strerror or exc})",
                              "; choose another --out") from exc
    return strata
