"""The loop detector's text rule as it was before the precision fix (the baseline of bench.loop_precision).

A verbatim copy of the text path of client/loops/repetition.py at the time: a block of at most 1,024
characters repeated at least 8 times over at least 2,048, compared exactly or with every digit read as 0
(when the folded block holds 16 letters). Its false stops on structured text are what the current rule
fixes; it is kept here, unchanged, so that the benchmark can measure both on the same corpus.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import AnyStr, Generic

_KEY = 16  # units of the tail searched for one period back
_CANDIDATES = 64  # candidate periods tried per check, nearest first (bounds a check's cost)


@dataclass(frozen=True, slots=True)
class RepetitionRule:
    """When a tail counts as a loop. Units are characters for text, ids for tokens."""

    max_block: int = 1024  # the longest repeated block
    min_repeats: int = 8  # times the block repeats back to back, at least
    min_span: int = 2048  # units the repetition covers, at least
    check_every: int = 1024  # new units between two checks: a loop is found at most this late
    fold_digits: bool = True  # also compare with every digit read as 0 (text only)
    min_letters: int = 16  # letters a block needs when it repeats only with its digits folded

    def __post_init__(self) -> None:
        for name in ("max_block", "min_repeats", "min_span", "check_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"RepetitionRule.{name} must be at least 1, got {getattr(self, name)}")
        if self.min_letters < 0:
            raise ValueError(f"RepetitionRule.min_letters must be 0 or more, got {self.min_letters}")

    @property
    def window(self) -> int:
        """Units of the tail a detector keeps: enough for the longest block's repeats."""
        return max(self.max_block * self.min_repeats, self.min_span)


# Characters of reasoning + content (about 4 a token): a block of up to ~256 tokens, 8 times, over at
# least ~512 tokens, checked every ~256 tokens.
TEXT_RULE = RepetitionRule()


@dataclass(frozen=True, slots=True)
class Repetition:
    """A tail that repeats: its block's length, the units the repetition covers, and where it was found."""

    block: int  # units of the repeated block
    span: int  # units at the end that are the block over and over (a detector sees only its window)
    at: int  # units fed (or the reply's length) when it was found
    sample: str | tuple[int, ...]  # the block as written: its text, or its ids

    @property
    def repeats(self) -> float:
        return self.span / self.block


def _fold(text: str) -> str:
    """Every ASCII digit as 0. Nine `str.replace` scans: `str.translate` takes ~50x longer on text that is
    not pure ASCII, a regex ~5x."""
    for digit in "123456789":
        text = text.replace(digit, "0")
    return text


def _letters(text: str) -> int:
    return sum(map(str.isalpha, text))


def _period(raw: AnyStr, rule: RepetitionRule, width: int) -> tuple[int, bool] | None:
    """(p in bytes or characters, whether only the folded text repeats) for the smallest candidate period
    the rule accepts, else None. `width`: 1 for text (the current module also packs ids)."""
    n = len(raw)
    if n < rule.min_span * width:
        return None
    key_len = _KEY * width
    key = raw[n - key_len:]
    lo = max(0, n - key_len - rule.max_block * width)
    hi = n - 1
    for _ in range(_CANDIDATES):
        j = raw.rfind(key, lo, hi)
        if j < 0:
            return None
        hi = j + key_len - 1
        p = n - key_len - j
        span = max(rule.min_repeats * p, rule.min_span * width)
        if p % width or span > n:
            continue
        tail = raw[n - span:]
        if tail[:-p] == tail[p:]:
            return p, False  # exact, whatever the block holds: also "=====", "0.000000..."
        if isinstance(tail, str) and rule.fold_digits:
            folded = _fold(tail)
            if folded[:-p] == folded[p:]:
                # Rows that differ in their numbers are no loop, and the multiples of p are the same rows.
                return (p, True) if _letters(folded[-p:]) >= rule.min_letters else None
    return None


def _span(whole: AnyStr, p: int, known: int, width: int) -> int:
    """How far back `whole` has period p (bytes or characters), given that its last `known` do: bisection
    on where the periodic tail starts, in whole units (past that start the shifted comparison holds)."""
    n = len(whole)
    if whole[:n - p] == whole[p:]:
        return n
    good, bad = (n - known) // width, 0  # start units known to hold, and known not to
    while good - bad > 1:
        mid = (good + bad) // 2
        if whole[mid * width:n - p] == whole[mid * width + p:]:
            good = mid
        else:
            bad = mid
    return n - good * width


def find_repetition(text: str, rule: RepetitionRule = TEXT_RULE) -> Repetition | None:
    """The repetition at the end of a whole text, its span measured over the whole text, or None."""
    found = _period(text[-rule.window:], rule, 1)
    if found is None:
        return None
    p, folded = found
    known = max(rule.min_repeats * p, rule.min_span)
    return Repetition(p, _span(_fold(text) if folded else text, p, known, 1), len(text), text[len(text) - p:])


class _Tail(Generic[AnyStr]):
    """The checked part of a stream: its last `max_block` + 16 units as one string, and enough parts for
    the window, joined only when a check has a candidate period."""

    __slots__ = ("_held", "_history", "_reach", "_recent", "_width", "fed", "rule")

    def __init__(self, rule: RepetitionRule, empty: AnyStr, width: int) -> None:
        self.rule = rule
        self.fed = 0  # units checked so far
        self._width = width
        self._reach = (rule.max_block + _KEY) * width
        self._recent: AnyStr = empty
        self._history: deque[AnyStr] = deque()
        self._held = 0

    def check(self, fresh: AnyStr) -> tuple[int, bool, AnyStr] | None:
        """Add the units since the last check; (p, folded, window) when the tail repeats."""
        rule, width = self.rule, self._width
        self.fed += len(fresh) // width
        history = self._history
        history.append(fresh)
        self._held += len(fresh)
        window = rule.window * width
        while self._held - len(history[0]) >= window:
            self._held -= len(history.popleft())
        self._recent = recent = (self._recent + fresh)[-self._reach:]
        if self.fed < rule.min_span or recent.rfind(recent[-_KEY * width:], 0, len(recent) - 1) < 0:
            return None  # no candidate period: the usual case
        raw = recent[:0].join(history)[-window:]
        period = _period(raw, rule, width)
        return None if period is None else (period[0], period[1], raw)


class RepetitionDetector:
    """Fed a reply's text chunk by chunk; `feed` returns the Repetition once the tail repeats (and from then
    on), else None. Units are characters."""

    __slots__ = ("_every", "_fresh", "_parts", "_tail", "found", "rule")

    def __init__(self, rule: RepetitionRule = TEXT_RULE) -> None:
        self.rule = rule
        self.found: Repetition | None = None
        self._every = rule.check_every
        self._parts: list[str] = []
        self._fresh = 0
        self._tail: _Tail[str] = _Tail(rule, "", 1)

    @property
    def fed(self) -> int:
        """Characters checked so far (those since the last check are pending)."""
        return self._tail.fed

    def feed(self, text: str) -> Repetition | None:
        if self.found is None:
            self._parts.append(text)
            self._fresh += len(text)
            if self._fresh >= self._every:
                fresh = "".join(self._parts)
                self._parts.clear()
                self._fresh = 0
                hit = self._tail.check(fresh)
                if hit is not None:
                    p, folded, raw = hit
                    known = max(self.rule.min_repeats * p, self.rule.min_span)
                    span = _span(_fold(raw) if folded else raw, p, known, 1)
                    self.found = Repetition(p, span, self._tail.fed, raw[len(raw) - p:])
        return self.found
