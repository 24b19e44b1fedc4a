"""How right the loop stop and the audit are: legitimate replies cut, loops missed, and the loop tokens saved,
before and after, on the labelled corpus of bench/loop_corpus (legitimate replies that repeat by nature
or were asked to, at their real sizes of 4-36K characters; loops run to max_tokens, 16-65K characters).

The stream stop, fed in chunks of `--chunk` characters at `--chars-per-token` characters a token, under two
budgets: each loop runs to its own max_tokens (its length; legitimate replies get `--max-tokens`), and a
training window (`--window` tokens of room: every reply ends there at the latest). Two rules, in one run:

- before: the stop as it was (the text rule, client.loops.repetition.TEXT_RULE, armed from the first
  character: prose 8,192 / counters 16,384 / structured 32,768 characters);
- after: the stream rule armed at 90% of max_tokens, exact repeats only (bench/loop_stream.py, as
  client.wire.endpoint runs it).

The audit: before, the text rule on the whole reply (a repeating tail is a loop); after, client.audit.loops'
verdict, which adds the near-repeat finder and reads how the reply ended (a legitimate reply ended with
`stop`, a loop ran to `length`): a legitimate reply it flags is `suspected`, not a loop.

Waste: the tokens the loops cost with the stop, against what they cost without one (each loop to its
max_tokens, or to the window's room); a loop missed costs all of it.

    python -m bench.loop_precision [--chunk 4] [--max-tokens 16384] [--window 4000] [--chars-per-token 4]
        [--cases] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.loop_corpus import Case, legitimate, loops
from bench.loop_stream import stream
from bench.report import emit
from client.audit.loops import judge
from client.loops.repetition import RepetitionDetector, find_repetition


def before_stream(text: str, max_tokens: int, per: float, chunk: int) -> int | None:
    """Characters fed when the stop as it was fired (the text rule from the first character), else None."""
    room = min(len(text), math.floor(max_tokens * per))
    detector = RepetitionDetector()
    for i in range(0, room, chunk):
        if detector.feed(text[i:min(room, i + chunk)]) is not None:
            return min(room, i + chunk)
    return None


def after_stream(text: str, max_tokens: int, per: float, chunk: int) -> int | None:
    return stream(text, max_tokens, chars_per_token=per, chunk=chunk).stop


@dataclass(frozen=True)
class Outcome:
    case: Case
    stop: dict[str, int | None]  # per budget ("run", "window"): characters fed at the stop, else None
    audit: str | None  # the audit's verdict: "loop", "suspected" or None


Stream = Callable[[str, int, float, int], int | None]


def run(cases: Sequence[Case], stop: Stream, audit: Callable[[Case], str | None],
        args: argparse.Namespace) -> list[Outcome]:
    out = []
    for case in cases:
        own = math.ceil(len(case.text) / args.chars_per_token) if case.loops else args.max_tokens
        stops = {"run": stop(case.text, own, args.chars_per_token, args.chunk),
                 "window": stop(case.text, args.window, args.chars_per_token, args.chunk)}
        out.append(Outcome(case, stops, audit(case)))
    return out


def audit_before(case: Case) -> str | None:
    return "loop" if find_repetition(case.text) is not None else None


def audit_after(case: Case) -> str | None:
    return judge(case.text, "length" if case.loops else "stop")[0]


def waste(bad: list[Outcome], budget: str, args: argparse.Namespace) -> tuple[float, float]:
    """Tokens the loops cost with the stop, and without it."""
    per = args.chars_per_token
    spent = without = 0.0
    for o in bad:
        cap = len(o.case.text) / per if budget == "run" else min(args.window, len(o.case.text) / per)
        stop = o.stop[budget]
        spent += cap if stop is None else min(cap, stop / per)
        without += cap
    return spent, without


def summary(name: str, good: list[Outcome], bad: list[Outcome], args: argparse.Namespace) -> str:
    cells = [name]
    for budget in ("run", "window"):
        cut = [o for o in good if o.stop[budget] is not None]
        missed = [o for o in bad if o.stop[budget] is None]
        spent, without = waste(bad, budget, args)
        cells += [f"{len(cut)} of {len(good)}", f"{len(missed)} of {len(bad)}",
                  f"{without - spent:,.0f} of {without:,.0f} ({1 - spent / without:.1%})"]
    cells += [f"{sum(o.audit == 'loop' for o in good)} of {len(good)}",
              f"{sum(o.audit == 'suspected' for o in good)}", f"{sum(o.audit != 'loop' for o in bad)} of {len(bad)}"]
    return "| " + " | ".join(cells) + " |"


def per_case(before: list[Outcome], after: list[Outcome]) -> list[str]:
    lines = ["| case | group | loop? | characters | before: stop (run / window) | after: stop (run / window) "
             "| audit before | audit after |", "|---|---|---|---:|---|---|---|---|"]

    def where(o: Outcome) -> str:
        return " / ".join("-" if s is None else f"{s:,}" for s in o.stop.values())

    for old, new in zip(before, after, strict=True):
        case = new.case
        lines.append(f"| {case.name} | {case.group or 'first'} | {'loop' if case.loops else 'legitimate'} | "
                     f"{len(case.text):,} | {where(old)} | {where(new)} | {old.audit or '-'} | {new.audit or '-'} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_precision", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk", type=int, default=4, help="characters per streamed chunk (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=16384,
                        help="a legitimate reply's max_tokens without a window (default: %(default)s)")
    parser.add_argument("--window", type=int, default=4000,
                        help="the window's room: a 4,096-token window less a prompt (default: %(default)s)")
    parser.add_argument("--chars-per-token", type=float, default=4.0, help="(default: %(default)s)")
    parser.add_argument("--cases", action="store_true", help="also a table per case")
    parser.add_argument("--out", type=Path, help="append the tables to this file")
    args = parser.parse_args(argv)
    good, bad = legitimate(), loops()
    lines = [f"{len(good)} legitimate replies ({min(len(c.text) for c in good):,}-{max(len(c.text) for c in good):,} "
             f"characters), {len(bad)} loops ({min(len(c.text) for c in bad):,}-{max(len(c.text) for c in bad):,}); "
             f"chunks of {args.chunk} characters, {args.chars_per_token:g} characters a token; legitimate replies "
             f"under max_tokens {args.max_tokens:,}, loops under their own; window room {args.window:,} tokens", "",
             "| rule | stream, no window: legitimate cut | loops missed | loop tokens saved | stream, window: "
             "legitimate cut | loops missed | loop tokens saved | audit: legitimate counted as loops "
             "| legitimate flagged as suspected | audit: loops missed |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    outcomes = []
    for name, stop, audit in (("before: the text rule, armed from the start", before_stream, audit_before),
                              ("after: armed at 90% of max_tokens, exact only; audit by finish", after_stream,
                               audit_after)):
        good_out, bad_out = run(good, stop, audit, args), run(bad, stop, audit, args)
        outcomes.append(good_out + bad_out)
        lines.append(summary(name, good_out, bad_out, args))
    if args.cases:
        lines += ["", *per_case(outcomes[0], outcomes[1])]
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
