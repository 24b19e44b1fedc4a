"""A sampling plan's mix, asked vs obtained, per `meta.source`: what the plan in run.json asked of each
source's prompts (each record's rule says which of the plan's draws it was under) against the settings the
records carry, with a two-sided binomial bound per cell, so a share outside chance is a finding.

`asked` needs the plan: run.json of a local run folder (an S3 prefix's is not read here; its rows show
the obtained mix only).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from statistics import NormalDist
from typing import Any

from client.audit.findings import Finding
from client.core.errors import ConfigError
from client.local.run_settings import read_run_file
from client.results.reader import is_s3

ALPHA = 1e-3  # the chance, over all cells together, that a run drawn as asked is flagged


def recorded_plan(location: str) -> Mapping[str, Any] | None:
    """run.json's `settings.sampling_plan` for a local run folder (None: none, unreadable, or in S3)."""
    if is_s3(location):
        return None
    try:
        record = read_run_file(Path(location))
    except ConfigError:
        return None
    plan = record.settings.get("sampling_plan") if record is not None else None
    return plan if isinstance(plan, Mapping) else None


def _rule_shares(plan: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Rule name ("" for no rule matched) -> each setting's share of that rule's draw."""
    def normal(weights: Mapping[str, Any]) -> dict[str, float]:
        total = sum(float(w) for w in weights.values())
        return {name: float(w) / total for name, w in weights.items()} if total > 0 else {}

    settings = plan.get("settings") or {}
    shares = {"": normal({name: s.get("weight", 1.0) for name, s in settings.items() if isinstance(s, Mapping)})}
    for rule in plan.get("rules") or []:
        if isinstance(rule, Mapping) and isinstance(rule.get("use"), Mapping):
            shares[str(rule.get("name"))] = normal(rule["use"])
    return shares


def mix_rows(draws: Counter[tuple[str, str, str]], plan: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per (source, setting): records, obtained share, asked share and whether the count is outside
    the binomial bound (alpha ALPHA, Bonferroni over the rows); asked and the bound are None without the plan."""
    per_source: dict[str, Counter[str]] = defaultdict(Counter)
    rules: dict[str, Counter[str]] = defaultdict(Counter)
    for (source, rule, setting), count in draws.items():
        per_source[source][setting] += count
        rules[source][rule] += count
    shares = _rule_shares(plan) if plan is not None else None
    cells: list[tuple[str, str]] = []
    for source in sorted(per_source):
        names = set(per_source[source])
        if shares is not None:
            names |= {name for rule in rules[source] for name in shares.get(rule, {})}
        cells += [(source, name) for name in sorted(names)]
    z = NormalDist().inv_cdf(1 - ALPHA / (2 * max(1, len(cells))))
    rows = []
    for source, name in cells:
        n = sum(per_source[source].values())
        got = per_source[source][name]
        row: dict[str, Any] = {"source": source, "setting": name, "records": got, "of": n,
                               "obtained": round(got / n, 4), "asked": None, "outside_chance": None}
        if shares is not None:
            asked = [(k, shares.get(rule, {}).get(name, 0.0)) for rule, k in rules[source].items()]
            mean = sum(k * p for k, p in asked)
            variance = sum(k * p * (1 - p) for k, p in asked)
            row["asked"] = round(mean / n, 4)
            row["outside_chance"] = abs(got - mean) > z * math.sqrt(variance) + 1e-9
        rows.append(row)
    return rows


def mix_finding(rows: list[dict[str, Any]]) -> Finding | None:
    off = [r for r in rows if r["outside_chance"]]
    if not off:
        return None
    cells = "; ".join(f"{r['source']}: {r['setting']} {r['obtained']:.1%} of {r['of']:,}, asked {r['asked']:.1%}"
                      for r in off[:5])
    return Finding("warn", f"the sampling plan's mix is outside chance (binomial bound, alpha {ALPHA:g}) in "
                           f"{len(off)} cell(s): {cells}; were the records made with the plan run.json names?")
