"""The audit's MTP section: the distribution of the servers' own accept length, overall and per source.

A record carries `spec` when its server reported speculative-decoding figures (SGLang with
`--token-ids on`): `accept_length` is the tokens per verify step (accepted drafts plus the bonus token),
the bar a new drafter trained on this data has to beat. A record's source is its prompt's
`meta.source` (records without one are counted under `(no meta.source)`). Per source: records with
figures, the mean, p10 / median / p90 of the per-request figure (`mean/request`: each reply counts once,
short ones as much as long ones), and the figure per verify step (`tokens/step`: completion tokens over
verify steps, what the servers' throughput saw). The live view's `MTP accept length` is the servers' own
per-step figure, so it is the `tokens/step` column that it matches.
"""

from __future__ import annotations

import itertools
from array import array
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

NO_SOURCE = "(no meta.source)"
OVERALL = "all"
BUCKETS = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)  # lower edges; the last bucket is open


@dataclass
class _Source:
    lengths: array[float] = field(default_factory=lambda: array("f"))
    tokens: int = 0
    steps: int = 0

    def add(self, length: float, tokens: int, steps: int) -> None:
        self.lengths.append(length)
        self.tokens += tokens
        self.steps += steps

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.lengths)
        n = len(ordered)

        def at(fraction: float) -> float:
            return round(ordered[min(n - 1, int(fraction * n))], 3) if n else 0.0

        buckets = [0] * len(BUCKETS)
        for value in ordered:
            buckets[max(0, sum(value >= edge for edge in BUCKETS) - 1)] += 1
        return {"records": n, "mean": round(sum(ordered) / n, 3) if n else 0.0, "p10": at(0.1),
                "median": at(0.5), "p90": at(0.9),
                "token_weighted": round(self.tokens / self.steps, 3) if self.steps else None,
                "buckets": dict(zip(_bucket_names(), buckets, strict=True))}


def _bucket_names() -> list[str]:
    names = [f"{lo:g}-{hi:g}" for lo, hi in itertools.pairwise(BUCKETS)]
    return [*names, f"{BUCKETS[-1]:g}+"]


@dataclass
class AcceptLengths:
    """Per-source accept lengths of one pass over the results."""

    sources: dict[str, _Source] = field(default_factory=dict)
    overall: _Source = field(default_factory=_Source)

    def add(self, record: dict[str, Any]) -> None:
        spec = record.get("spec")
        length = spec.get("accept_length") if isinstance(spec, dict) else None
        if not isinstance(length, (int, float)) or isinstance(length, bool) or length <= 0:
            return
        steps = spec.get("verify_ct") if isinstance(spec, dict) else None
        usage = record.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if not (isinstance(steps, int) and isinstance(tokens, int) and steps > 0):
            steps = tokens = 0
        meta = record.get("meta")
        source = meta.get("source") if isinstance(meta, dict) else None
        name = source if isinstance(source, str) and source else NO_SOURCE
        self.sources.setdefault(name, _Source()).add(float(length), tokens, steps)
        self.overall.add(float(length), tokens, steps)

    def summary(self) -> dict[str, Any] | None:
        if not self.overall.lengths:
            return None
        return {OVERALL: self.overall.summary(),
                "by_source": {name: source.summary() for name, source in sorted(self.sources.items())}}


def render(data: dict[str, Any] | None, console: Console) -> None:
    """The accept-length table (nothing when no record carries MTP figures)."""
    if data is None:
        return
    table = Table(title="MTP accept length (tokens per verify step, as the servers measured it: the bar a new "
                        "drafter has to beat; mean/request averages the replies, tokens/step all their steps, "
                        "as the live view's figure does)", title_justify="left")
    for column in ("source", "records", "mean/request", "p10", "median", "p90", "tokens/step", *_bucket_names()):
        table.add_column(column, justify="left" if column == "source" else "right")
    rows = [(OVERALL, data[OVERALL]), *data["by_source"].items()]
    for name, row in rows:
        weighted = row["token_weighted"]
        shares = [f"{count / row['records']:.0%}" if row["records"] else "-" for count in row["buckets"].values()]
        table.add_row(name, f"{row['records']:,}", f"{row['mean']:.2f}", f"{row['p10']:.2f}", f"{row['median']:.2f}",
                      f"{row['p90']:.2f}", "-" if weighted is None else f"{weighted:.2f}", *shares)
    console.print(table)
