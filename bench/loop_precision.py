"""How right the loop stop is: false stops, missed loops, and how late a loop is stopped, before and after.

Runs the stream detector (fed in chunks of `--chunk` characters, about one token each) and the audit's
whole-reply finder over the labelled corpus of tests/loop_corpus.py: legitimate replies that repeat by
nature (SQL, CSV, JSON arrays with ids, tables over many days, code, base64 of zero bytes, zeros, boxes,
...) and loops (exact, with counters in digits, words, letters or hex, alternating, long blocks, paragraphs
of reasoning, CJK, the simulator's, and degenerate structured ones). Two rules, in the same run:

- before: the rule as it was (bench/loop_baseline.py, a verbatim copy: a block of at most 1,024 characters,
  8 repeats over 2,048, digits read as 0);
- after: the current default (client.core.repetition.TEXT_RULE).

Per rule: legitimate replies stopped (silent damage: the reply is kept cut, finish_reason repetition, and
an export drops it) and the characters they lose; loops missed; for the loops caught, the characters
generated past the loop's start before the stop, and the tokens generated against two references, at
`--chars-per-token` characters a token: a run that lets the loop go on to `--max-tokens`, and a run with
`--train-window`, which caps every reply there anyway (so the stop saves only what it ends before the
window's end; the prompt is not counted). A loop missed costs the whole of either.

    python -m bench.loop_precision [--chunk 4] [--max-tokens 32768] [--window 4096] [--chars-per-token 4]
        [--cases] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import bench.loop_baseline as baseline
from bench.report import emit
from client.core import repetition
from tests.loop_corpus import Case, legitimate, loops


class _Found(Protocol):
    @property
    def at(self) -> int: ...


class _Detector(Protocol):
    def feed(self, text: str) -> _Found | None: ...


@dataclass(frozen=True)
class Rule:
    name: str
    detector: Callable[[], _Detector]
    audit: Callable[[str], object | None]


RULES = (
    Rule("before (1,024-char blocks, 2,048 span, digits as 0)", baseline.RepetitionDetector,
         baseline.find_repetition),
    Rule("after (prose 8,192 / counters 16,384 / structured 32,768)", repetition.RepetitionDetector,
         repetition.find_repetition),
)


def stop_at(rule: Rule, text: str, chunk: int) -> tuple[int | None, str]:
    """Characters fed when the stream's detector fired (or None), and the kind of loop it found."""
    detector = rule.detector()
    for i in range(0, len(text), chunk):
        found = detector.feed(text[i:i + chunk])
        if found is not None:
            return min(len(text), i + chunk), str(getattr(found, "kind", ""))
    return None, ""


@dataclass(frozen=True)
class Outcome:
    case: Case
    stop: int | None  # characters fed when the stream stopped it
    kind: str  # the kind of loop the stream found (the current rule's)
    audit: bool  # the whole-reply finder calls it a loop
    audit_cut: bool  # ... or calls the reply a loop when it is cut somewhere (every 1,000 characters)


def run(rule: Rule, cases: Sequence[Case], chunk: int) -> list[Outcome]:
    outcomes = []
    for case in cases:
        stop, kind = stop_at(rule, case.text, chunk)
        cut = any(rule.audit(case.text[:end]) is not None for end in range(1000, len(case.text), 1000))
        outcomes.append(Outcome(case, stop, kind, rule.audit(case.text) is not None, cut))
    return outcomes


def _tokens(chars: float, per: float) -> float:
    return chars / per


def summary(rule: Rule, good: list[Outcome], bad: list[Outcome], args: argparse.Namespace) -> str:
    per, cap, window = args.chars_per_token, args.max_tokens, args.window
    stopped = [o for o in good if o.stop is not None]
    lost = sum(len(o.case.text) - (o.stop or 0) for o in stopped)
    caught = [o for o in bad if o.stop is not None]
    late = [(o.stop or 0) - (o.case.loop_start or 0) for o in caught]
    # Tokens generated per loop: the reply up to the stop, or all of the reference when it is missed.
    generated_cap = [min(cap, _tokens(o.stop, per)) if o.stop is not None else cap for o in bad]
    generated_window = [min(window, _tokens(o.stop, per)) if o.stop is not None else window for o in bad]
    saved_cap = 1 - sum(generated_cap) / (cap * len(bad))
    saved_window = 1 - sum(generated_window) / (window * len(bad))
    return (f"| {rule.name} | {len(stopped)} of {len(good)} | {lost:,} | {sum(o.audit for o in good)} / "
            f"{sum(o.audit or o.audit_cut for o in good)} | "
            f"{len(bad) - len(caught)} of {len(bad)} | {sum(not o.audit for o in bad)} | "
            f"{statistics.median(late):,.0f} ({min(late):,}-{max(late):,}) | "
            f"{statistics.median(_tokens(x, per) for x in late):,.0f} | "
            f"{statistics.mean(generated_cap):,.0f} ({saved_cap:.1%}) | "
            f"{statistics.mean(generated_window):,.0f} ({saved_window:.1%}) |")


def per_case(before: list[Outcome], after: list[Outcome], args: argparse.Namespace) -> list[str]:
    lines = ["| case | kind | characters | loop starts at | before: stopped at | after: stopped at "
             "| after: past the loop's start (tokens) |", "|---|---|---:|---:|---:|---:|---:|"]
    for old, new in zip(before, after, strict=True):
        case = new.case
        start = case.loop_start
        past = "" if start is None or new.stop is None else \
            f"{new.stop - start:,} ({_tokens(new.stop - start, args.chars_per_token):,.0f})"
        mark = " (issue)" if case.issue else ""
        lines.append(f"| {case.name}{mark} | {'loop' if case.loops else 'legitimate'} | {len(case.text):,} | "
                     f"{'' if start is None else f'{start:,}'} | {_where(old)} | {_where(new)} | {past} |")
    return lines


def by_kind(after: list[Outcome], args: argparse.Namespace) -> list[str]:
    """The current rule's lateness per kind of loop."""
    lines = ["| kind of loop (after) | loops | characters past the loop's start, median (range) "
             "| tokens past the start, median |", "|---|---:|---:|---:|"]
    for kind, what in (("exact", "prose, repeated exactly"), ("counter", "prose, its counters moving"),
                       ("structured", "code or data, repeated exactly")):
        late = [(o.stop or 0) - (o.case.loop_start or 0) for o in after if o.case.loops and o.kind == kind]
        if late:
            lines.append(f"| {what} | {len(late)} | {statistics.median(late):,.0f} ({min(late):,}-{max(late):,}) | "
                         f"{_tokens(statistics.median(late), args.chars_per_token):,.0f} |")
    return lines


def _where(outcome: Outcome) -> str:
    if outcome.stop is None:
        return "missed" if outcome.case.loops else "-"
    return f"{outcome.stop:,}" if outcome.case.loops else f"**{outcome.stop:,}**"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_precision", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk", type=int, default=4, help="characters per streamed chunk (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=32768, help="a loop's run without a stop (default: "
                        "%(default)s)")
    parser.add_argument("--window", type=int, default=4096, help="the training window (default: %(default)s)")
    parser.add_argument("--chars-per-token", type=float, default=4.0, help="(default: %(default)s)")
    parser.add_argument("--cases", action="store_true", help="also a table per case")
    parser.add_argument("--out", type=Path, help="append the tables to this file")
    args = parser.parse_args(argv)
    good, bad = legitimate(), loops()
    lines = [f"{len(good)} legitimate replies ({sum(len(c.text) for c in good):,} characters), {len(bad)} loops; "
             f"chunks of {args.chunk} characters, {args.chars_per_token:g} characters a token, max_tokens "
             f"{args.max_tokens:,}, window {args.window:,}", "",
             "| rule | legitimate replies stopped | characters they lose | audit: legitimate called loops "
             "(whole / or cut anywhere) "
             "| loops missed | audit: loops missed | characters past the loop's start at the stop, median "
             "(range) | tokens past the start, median | tokens per loop, max_tokens run (saved) "
             "| tokens per loop, window run (saved) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    outcomes = []
    for rule in RULES:
        good_out, bad_out = run(rule, good, args.chunk), run(rule, bad, args.chunk)
        outcomes.append(good_out + bad_out)
        lines.append(summary(rule, good_out, bad_out, args))
    lines += ["", *by_kind(outcomes[1], args)]
    if args.cases:
        lines += ["", *per_case(outcomes[0], outcomes[1], args)]
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
