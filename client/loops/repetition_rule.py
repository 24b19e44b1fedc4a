"""The loop rule's data: when a tail counts as a loop (`RepetitionRule`, the audit's `TEXT_RULE`, the stream
stop's `STREAM_RULE` and `stop_floor`, the ids' `TOKEN_RULE`) and what a found loop is (`Repetition`). Pure;
the search is client.loops.period_search, the text kinds client.loops.text_kind, the detectors
client.loops.repetition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Kind = Literal["exact", "counter", "structured"]


@dataclass(frozen=True, slots=True)
class RepetitionRule:
    """When a tail counts as a loop. Units are characters for text, ids for tokens."""

    max_block: int = 4096  # the longest repeated block
    min_repeats: int = 8  # times the block repeats back to back, at least
    min_span: int = 8192  # units of exact repetition of a prose block (for ids: of any block), at least
    counter_span: int = 16384  # units of a prose block repeated with its counters changing; 0: never a loop
    structured_span: int = 32768  # units of exact repetition of a block that is not prose; 0: never a loop
    check_every: int = 1024  # new units between two checks: a loop is found this late at most (a block
    # over 1,024 units: 4 checks)

    def __post_init__(self) -> None:
        for name in ("max_block", "min_repeats", "min_span", "check_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"RepetitionRule.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("counter_span", "structured_span"):
            if getattr(self, name) < 0:
                raise ValueError(f"RepetitionRule.{name} must be 0 or more, got {getattr(self, name)}")

    @property
    def window(self) -> int:
        """Units of the tail a detector keeps: enough for the longest block's repeats and every floor."""
        return max(self.max_block * self.min_repeats, self.min_span, self.counter_span, self.structured_span)

    def floor(self, kind: Kind) -> int:
        """The span a repetition of this kind must cover (0: this kind never counts)."""
        return {"exact": self.min_span, "counter": self.counter_span, "structured": self.structured_span}[kind]

    def needed(self, kind: Kind, block: int) -> int:
        """Units of repetition of a block of this length and kind before it counts: a stream stops it there."""
        return max(self.min_repeats * block, self.floor(kind))


# Characters of reasoning + content (about 4 a token): a block of up to ~1,000 tokens, 8 times; prose over
# ~2,000 tokens exactly or ~4,000 with moving counters; anything else only when ~8,000 tokens of the window
# are one block. Checked every ~256 tokens.
TEXT_RULE = RepetitionRule()
# The stream's loop stop (client.wire.endpoint): the text rule without counters. A reply whose repeats differ
# in their counters is what users ask for (count to 1,000 in words, a 500-item checklist, a times table, a
# 365-line plan): the audit may flag it, the stream never cuts it. And the detector is armed only at
# `stop_floor`: the stop saves at most the last tenth of a loop's budget, and pays for it only with a reply
# that has used nine tenths of its budget and whose last 8,192 characters of prose (32,768 of anything else)
# are one block repeated exactly: it would have reached max_tokens (or the window's room) a tenth later.
STREAM_RULE = RepetitionRule(counter_span=0)
STOP_SHARE = 0.9  # of a request's max_tokens, streamed before the loop stop looks at all


def stop_floor(max_tokens: int) -> int:
    """Completion tokens a reply must have streamed before the stream's loop stop is armed."""
    return max(1, math.ceil(STOP_SHARE * max_tokens))


# Token ids: exact, and not classified (ids carry no letters): a block of up to 256 ids, 8 times, over at
# least 512. Not the loop stop's rule (the stream watches text); for tools that only have ids.
TOKEN_RULE = RepetitionRule(max_block=256, min_repeats=8, min_span=512, counter_span=0, structured_span=0,
                            check_every=256)


@dataclass(frozen=True, slots=True)
class Repetition:
    """A tail that repeats: its block's length, the units the repetition covers, and where it was found."""

    block: int  # units of the repeated block (for "counter": its last occurrence)
    span: int  # units at the end that are the block over and over (a detector sees only its window)
    at: int  # units fed (or the reply's length) when it was found
    sample: str | tuple[int, ...]  # the block as written: its text, or its ids
    kind: Kind = "exact"  # prose repeated exactly, prose with changing counters, or structured text

    @property
    def repeats(self) -> float:
        return self.span / self.block


