"""Loop detection: does the tail of a reply repeat one block over and over?

A thinking model that loops (Qwen3's repetition failure) writes the same passage again and again until
max_tokens: the most expensive reply there is, and worth nothing. But code, SQL, CSV, JSON arrays, tables,
base64 and ASCII art repeat by nature, often differing only in their numbers, and a coding agent's data is
full of them. Stopping a good reply is silent damage (it is kept cut, never retried, and an export drops
it as a loop); stopping a loop late costs at most the training window's room. So the rule errs late, never
early. This module owns the test, pure and incremental so a stream can run it on every chunk:

- `RepetitionDetector` is fed a reply's text chunk by chunk (reasoning, then content), and
  `TokenRepetitionDetector` its token ids; `feed` returns a `Repetition` once the tail is one block
  repeated. A chunk costs a list append and a counter; the check runs once per `check_every` new units and
  is bounded by the rule, not by the reply's length, so the cost per chunk is O(1) amortised.
- `find_repetition` / `find_token_repetition` ask the same of a whole reply (the audit), and measure how
  far back the loop goes. The audit applies `TEXT_RULE`; the stream's loop stop applies `STREAM_RULE` (no
  counters) and arms its detector only once the reply has used 90% of its max_tokens (`stop_floor`,
  client.wire.endpoint): before that it keeps its window and never searches it.

The text rule (`RepetitionRule`, `TEXT_RULE`): the tail is a block of at most `max_block` (4,096)
characters repeated back to back at least `min_repeats` (8) times, and over at least a floor that depends on
what the block is:

- prose (the block reads as words: mostly letters, spaces between words or CJK, hardly any of the marks
  code and data are made of, no line indented by two spaces or a tab), repeated exactly: `min_span`,
  8,192 characters;
- prose whose repeats differ only in their counters (digits, number words such as "three" or
  "twenty-one", single letters, hex such as 0x1f or 3a, roman numerals): `counter_span`, 16,384;
- anything else (code, SQL, CSV, JSON, tables, logs, base64, runs of zeros, ASCII boxes), repeated exactly:
  `structured_span`, 32,768, i.e. the whole window is one block over and over. Repeats of structured text
  that differ in their counters never count: a table of 10,000 days looks like one row repeated with its
  digits changed, and so does a model that writes such rows forever; the window or max_tokens caps that one.

Not found, then: structured text that repeats with moving counters, a block longer than `max_block`, and a
loop that changes more than its counters from one repeat to the next.

Why: the issue's false stops were all structured text whose rows differ only in numbers (100 SQL INSERTs,
150 JSON objects with ids, a 60-day table), caught by reading digits as 0; and runs of zeros, zero-byte
base64, a repeated config object and an ASCII box, caught as exact repeats over 2,048 characters. A
thinking model's loop is a passage of reasoning, prose, that runs to max_tokens (tens of thousands of
characters), so prose gets the earlier floors. Legitimate prose repeated exactly over 8,192 characters, or
with only its counters changing over 16,384 ("99 bottles of beer" is ~12,000), is rarer than a loop;
legitimate structured output rarely holds one exact block over 32,768. The price: a loop is stopped later
than with the old 2,048-character floor (bench.loop_precision has the figures), at most the window's room.

How a check finds the period: a loop's block ends the same way each time, so the tail's last 16 units occur
again one period back. Each earlier occurrence within `max_block` (`rfind`, nearest first) is a candidate
period p. Its 64-unit suffix, then as much at the far end of the span (a run shorter than the floor fails
there at once), then spans growing fourfold from the end up to the floor are compared with themselves
shifted by p (slice comparisons, stopping at the first that differs); all candidates of a check together
compare at most a few windows' worth of units, and a stream remembers per period where its text is known
not to repeat, so a span that holds such a break is not compared again. The block is classified only once
it repeats exactly over `min_span`, or for the counter test: a prose block two of whose last four quarters
occur one period back (give or take a counter's change of length) has its last three blocks normalised
(words and marks as tokens, every counter as "#"); if they repeat, so must three blocks 2, 4, 8, ... blocks
back, and only then is the whole `counter_span` normalised and compared. A stream keeps the last
`max_block` + 64 units as one string and searches its key over the nearest 1,024 units (over all of
`max_block` every 4th check, so a longer block is found up to three checks later), and again 48 units
back, in case the last 16 held a counter; the whole-reply finder tries five key positions. The window is
joined only when a search finds a candidate. Token ids are packed as 4-byte words and compared exactly
(they are not classified: the token rule is `min_span` for every block), so both kinds run on C-level
`rfind` and comparison. bench.repetition has the cost per chunk, bench.loop_precision the precision.

Where it lives: the rule's data is client.loops.repetition_rule, what a block is (prose or structured, its
counters normalised) client.loops.text_kind, the period search client.loops.period_search; this module
holds the detectors a stream feeds and the finders of a whole reply.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterable, Sequence
from typing import AnyStr, Generic

from client.loops.period_search import (
    FAR_EVERY,
    ID_BYTES,
    KEY,
    NEAR,
    SHIFT,
    STREAM_CUTS,
    WHOLE_CUTS,
    has_candidate,
    id_period,
    repetition_at,
    span_of,
    text_period,
)
from client.loops.repetition_rule import (
    STREAM_RULE,
    TEXT_RULE,
    TOKEN_RULE,
    Kind,
    Repetition,
    RepetitionRule,
    stop_floor,
)

__all__ = ["STREAM_RULE", "TEXT_RULE", "TOKEN_RULE", "Kind", "Repetition", "RepetitionDetector", "RepetitionRule",
           "TokenRepetitionDetector", "find_repetition", "find_token_repetition", "stop_floor"]


def find_repetition(text: str, rule: RepetitionRule = TEXT_RULE) -> Repetition | None:
    """The repetition at the end of a whole text, its span measured over the whole text, or None."""
    found = text_period(text[-rule.window:], rule, WHOLE_CUTS)
    return None if found is None else repetition_at(text, found, len(text), rule)


def _packed(ids: Iterable[int]) -> bytes:
    return array("I", ids).tobytes()


def find_token_repetition(ids: Sequence[int], rule: RepetitionRule = TOKEN_RULE) -> Repetition | None:
    """The repetition at the end of a whole reply's ids, measured over all of them, or None."""
    packed = _packed(ids)
    p = id_period(packed[-rule.window * ID_BYTES:], rule)
    if p is None:
        return None
    span = span_of(packed, p, rule.needed("exact", p // ID_BYTES) * ID_BYTES, ID_BYTES)
    return Repetition(p // ID_BYTES, span // ID_BYTES, len(ids), tuple(ids[len(ids) - p // ID_BYTES:]))


class _Tail(Generic[AnyStr]):
    """The checked part of a stream: its last `max_block` + 16 units as one string, and enough parts for
    the window, joined only when a check has a candidate period."""

    __slots__ = ("_checks", "_counters", "_held", "_history", "_reach", "_recent", "_width", "_window", "fed",
                 "rule")

    def __init__(self, rule: RepetitionRule, empty: AnyStr, width: int) -> None:
        self.rule = rule
        self.fed = 0  # units checked so far
        self._width = width
        self._reach = (rule.max_block + KEY + SHIFT) * width
        self._window = rule.window * width
        self._counters = bool(rule.counter_span)
        self._checks = 0
        self._recent: AnyStr = empty
        self._history: deque[AnyStr] = deque()
        self._held = 0

    def add(self, fresh: AnyStr, search: bool = True) -> AnyStr | None:
        """Add the units since the last check; the window when the tail has a candidate period (searched
        `cut` units before the end), else None. Without `search`, only keeps the window (not armed yet)."""
        rule, width, window = self.rule, self._width, self._window
        self.fed += len(fresh) // width
        history = self._history
        history.append(fresh)
        self._held += len(fresh)
        while self._held - len(history[0]) >= window:
            self._held -= len(history.popleft())
        self._recent = recent = (self._recent + fresh)[-self._reach:]
        if not search or self.fed < rule.min_span:
            return None
        end = len(recent)
        # The key at the end, over the nearest 1,024 units, and over all of max_block every 4th check (a
        # search costs its length; a block over 1,024 needs 8 of them, so it is found at most 3 checks
        # later); else (a counter loop whose last 16 units hold a counter) the key 48 units back, over the
        # nearest 1,024 (a longer block's counter is rarely in its last 64).
        near = min(rule.max_block, NEAR)
        reach = rule.max_block if self._checks % FAR_EVERY == 0 else near
        self._checks += 1
        if has_candidate(recent, end, reach, width) or (
                self._counters and has_candidate(recent, end - SHIFT, near, width)):
            return recent[:0].join(history)[-window:]
        return None  # no candidate period: the usual case


class RepetitionDetector:
    """Fed a reply's text chunk by chunk; `feed` returns the Repetition once the tail repeats (and from then
    on), else None. Units are characters. Not `armed`, it keeps its window but never checks it: the stream's
    loop stop arms it only once the reply has used most of its budget (client.loops.repetition_rule.stop_floor),
    so that a repetition earlier in the reply is never looked for, let alone latched."""

    __slots__ = ("_breaks", "_every", "_fresh", "_parts", "_tail", "armed", "found", "rule")

    def __init__(self, rule: RepetitionRule = TEXT_RULE, *, armed: bool = True) -> None:
        self.rule = rule
        self.armed = armed
        self.found: Repetition | None = None
        self._every = rule.check_every
        self._breaks: dict[int, int] = {}  # per period, where the text is known not to repeat with it
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
                raw = self._tail.add(fresh, self.armed)
                if raw is not None:
                    hit = text_period(raw, self.rule, STREAM_CUTS, self._breaks, self._tail.fed - len(raw))
                    if hit is not None:
                        self.found = repetition_at(raw, hit, self._tail.fed, self.rule)
        return self.found


class TokenRepetitionDetector:
    """Fed a reply's token ids chunk by chunk (ids below 2**32); `feed` returns the Repetition once the tail
    repeats (and from then on), else None. Units are ids."""

    __slots__ = ("_every", "_pending", "_tail", "found", "rule")

    def __init__(self, rule: RepetitionRule = TOKEN_RULE) -> None:
        self.rule = rule
        self.found: Repetition | None = None
        self._every = rule.check_every
        self._pending: list[int] = []
        self._tail: _Tail[bytes] = _Tail(rule, b"", ID_BYTES)

    @property
    def fed(self) -> int:
        """Ids checked so far (those since the last check are pending)."""
        return self._tail.fed

    def feed(self, ids: Iterable[int]) -> Repetition | None:
        if self.found is None:
            pending = self._pending
            pending.extend(ids)
            if len(pending) >= self._every:
                fresh = _packed(pending)
                pending.clear()
                raw = self._tail.add(fresh)
                if raw is not None:
                    p = id_period(raw, self.rule)
                    if p is not None:
                        span = span_of(raw, p, self.rule.needed("exact", p // ID_BYTES) * ID_BYTES, ID_BYTES)
                        block = array("I", raw[len(raw) - p:]).tolist()
                        self.found = Repetition(p // ID_BYTES, span // ID_BYTES, self._tail.fed, tuple(block))
        return self.found
