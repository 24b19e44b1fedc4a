"""A labelled corpus for the loop stop: replies that repeat by nature and must never be stopped, and replies
that loop and must be. Deterministic (every case is built from its own seeded generator).

Each case is a reply as the detector reads it, reasoning then content, written the way a model writes
them: a few paragraphs of thinking, then the answer with its code block, then a closing remark. The
legitimate ones are what a coding agent's data set is full of (SQL INSERTs, CSV, JSON arrays of objects
with ids, markdown tables over many days, enumerations, code with repeated lines, base64 of zero bytes, a
list of zeros, a repeated JSON object of config, ASCII boxes, test and log output, hex dumps), in sizes
up to about 20,000 characters. The loops start after a normal opening (`loop_start`) and run the way a
model runs until max_tokens: exact repeats, repeats whose counter moves in digits, words, letters or hex,
two blocks alternating, long blocks (1,739 characters x 12), paragraphs of reasoning, in English and in
Chinese; and degenerate loops of structured text (zeros, one JSON line) that only the longest floor
catches. `issue` marks the cases reported in the issue "Guards that are right" (cases 1 and 2), with the
sizes it gave.

The later issue's classes (replies asked to repeat, at 9-33K characters, and loops the exact and counter
rules miss, at 65,536) are in `asked` and merged here, `group` "asked" or "missed".

The corpus serves the loop stop's precision benchmark (bench.loop_precision) and its tests; it lives with
the benchmarks so that they need nothing of tests/. Its modules: `writing` (reasoning as a thinking model
writes it, and a loop run after a normal opening), `legitimate`, `looping`, `asked`; here the cases as one
labelled corpus.

    from bench.loop_corpus import LEGITIMATE, LOOPS, by_name
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from bench.loop_corpus.asked import ASKED, MISSED
from bench.loop_corpus.legitimate import BUILDS as legitimate_builds
from bench.loop_corpus.looping import BUILDS as loop_builds
from bench.loop_corpus.writing import reasoning

__all__ = ["LEGITIMATE", "LOOPS", "Case", "by_name", "legitimate", "loops", "reasoning"]


@dataclass(frozen=True)
class Case:
    """One reply: its text (reasoning + content), and where its loop starts (None: it does not loop)."""

    name: str
    text: str
    loop_start: int | None = None
    issue: bool = False  # reported in the issue, at the size it gave
    what: str = ""
    group: str = ""  # "asked" or "missed": the later issue's classes (bench.loop_corpus.asked)

    @property
    def loops(self) -> bool:
        return self.loop_start is not None



@cache
def legitimate() -> tuple[Case, ...]:
    return (*(Case(name, build(), None, issue, (build.__doc__ or "").strip())
              for name, (build, issue) in legitimate_builds.items()),
            *(Case(name, made(), None, False, (made.__doc__ or "").strip(), "asked") for name, made in ASKED.items()))


@cache
def loops() -> tuple[Case, ...]:
    cases = []
    for name, (build, issue) in loop_builds.items():
        text, start = build()
        cases.append(Case(name, text, start, issue, (build.__doc__ or name.replace("_", " ")).strip()))
    for name, made in MISSED.items():
        text, start = made()
        cases.append(Case(name, text, start, False, (made.__doc__ or "").strip(), "missed"))
    return tuple(cases)


LEGITIMATE = [case.name for case in legitimate()]
LOOPS = [case.name for case in loops()]


def by_name(name: str) -> Case:
    """A case by its name."""
    for found in (*legitimate(), *loops()):
        if found.name == name:
            return found
    raise KeyError(name)
