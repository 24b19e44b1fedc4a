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
  far back the loop goes. The stream and the audit apply the same rule.

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
"""

from __future__ import annotations

import re
from array import array
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import AnyStr, Generic, Literal

_KEY = 16  # units of the tail searched for one period back
_SUFFIX = 64  # units of a candidate's block compared before the block itself
_CANDIDATES = 64  # candidate periods tried per check, nearest first (bounds a check's cost)
_BUDGET = 4  # units compared per check, at most this many windows
_ID_BYTES = 4  # a token id packed as one unsigned 32-bit word
_SAMPLE = 2048  # characters of a block read to classify it
_SLACK = 32  # characters a counter's change of length may shift what precedes it
_SHIFT = 48  # characters the counter test moves its key back when the last 16 held a counter
# Where the key ends, before the end: a stream tries two (its next check is another phase of a loop); a
# whole reply has one phase, so five, 16 apart (a short block holds a counter in most 16 characters).
_STREAM_CUTS = (0, _SHIFT)
_WHOLE_CUTS = (0, 16, 32, _SHIFT, 64)
_NEAR = 1024  # units a stream's check searches its key over, but every _FAR_EVERY-th
_FAR_EVERY = 4  # a stream's check searches over all of max_block this often
_COUNTER_TESTS = 1  # counter tests a key's candidates may run
_BREAKS = 1024  # periods whose break a stream remembers (then it forgets them all: memory stays small)
_KNOWN = 16  # candidates with a known break a check passes over before it gives up
# Keys of the known breaks: p for exact repeats, -q for a normalised period, _BY_BLOCK - p for the counter
# test of a block of p characters.
_BY_BLOCK = -(1 << 30)
_EDGE_TOKENS = 8  # tokens dropped from each end of a normalised window (a cut may split a counter)

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


# --- what a block is -------------------------------------------------------------------------------------

_ASCII_LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SPACE = b" \t\n\r\f\v"
# Marks that code and data are made of and prose hardly uses.
_MARKS = b'{}[]<>|=;"\\_/#*+@$%^&~'
_MARK_SET = frozenset(_MARKS.decode())


def is_prose(block: str) -> bool:
    """Does the block read as words? Letters at least 60% (CJK counts), spaces at least 8% (or a script
    without spaces: non-ASCII letters at least 30%), code-and-data marks at most 6%, and no line indented by
    two spaces or a tab.
    Reads the block's last 2,048 characters; a periodic block wraps around, so its first character is read
    after its last too."""
    sample = block[-_SAMPLE:]
    n = len(sample)
    if not n:
        return False
    wrapped = sample[-1] + sample
    if "\n  " in wrapped or "\n\t" in wrapped:
        return False
    if sample.isascii():
        raw = sample.encode()
        letters = n - len(raw.translate(None, _ASCII_LETTERS))
        space = n - len(raw.translate(None, _SPACE))
        marks = n - len(raw.translate(None, _MARKS))
        wide = 0
    else:
        letters = sum(map(str.isalpha, sample))
        space = sum(map(str.isspace, sample))
        marks = sum(c in _MARK_SET for c in sample)
        wide = letters - sum(c.isascii() and c.isalpha() for c in sample)
    return letters >= 0.6 * n and marks <= 0.06 * n and (space >= 0.08 * n or wide >= 0.3 * n)


# --- counters, read as "#" -------------------------------------------------------------------------------

_UNITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_NUMBER_WORDS = frozenset((
    *_UNITS, *_TENS, "hundred", "thousand", "million", "billion",
    "zeroth", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
    "eleventh", "twelfth", *(unit + "th" for unit in _UNITS[13:]), *(ten[:-1] + "ieth" for ten in _TENS),
    "hundredth", "thousandth", "millionth"))
_TOKEN = re.compile(r"\w+|[^\w\s]")
_HEXISH = re.compile(r"(?:0[xX])?[0-9A-Fa-f]*[0-9][0-9A-Fa-f]*|[a-fA-F]{2}|[A-Z]{1,3}|[a-zA-Z]|[ivx]{2,5}|[IVXLC]{2,7}")
_DIGITS = re.compile(r"[0-9]+")
_JOINS = frozenset(("-", "and", "–", "/"))
# A run of counters, joined as _JOINS says: "#" tokens (whole ones: NUL or an end on both sides).
_RUNS = re.compile("(?<![^\x00])#(?:\x00(?:(?:-|and|–|/)\x00)?#(?![^\x00]))+")
_WORD_CACHE: dict[str, str] = {}
_WORD_CACHE_SIZE = 100_000


def _counter_word(word: str) -> str:
    """A word as the counter test reads it: "#" for a counter, else the word with its digit runs as "#"."""
    read = _WORD_CACHE.get(word)
    if read is None:
        counter = _HEXISH.fullmatch(word) is not None or word.lower() in _NUMBER_WORDS
        read = "#" if counter else _DIGITS.sub("#", word)
        if len(_WORD_CACHE) >= _WORD_CACHE_SIZE:
            _WORD_CACHE.clear()
        _WORD_CACHE[word] = read
    return read


def normalise(text: str, starts: list[int] | None = None) -> str:
    """The text as the counter test reads it: its words and marks (not its spacing) joined by NUL, every
    counter as "#", and a run of counters ("twenty-one", "one hundred and two", "2024-01-31") as one "#".
    With `starts`, the start in `text` of each token of the result is appended to it (a slower walk that
    gives the same text)."""
    if starts is None:
        cache = _WORD_CACHE
        words = [cache.get(word) or _counter_word(word) for word in _TOKEN.findall(text)]
        return _RUNS.sub("#", "\x00".join(words))
    out: list[str] = []
    for token in _TOKEN.finditer(text):
        read = _counter_word(token.group())
        if read == "#" and out:
            if out[-1] == "#":
                continue
            if len(out) >= 2 and out[-2] == "#" and out[-1] in _JOINS:
                out.pop()
                starts.pop()
                continue
        out.append(read)
        starts.append(token.start())
    return "\x00".join(out)


# --- periods ---------------------------------------------------------------------------------------------


class _Check:
    """One check's state: units it may still compare, whether it ran a counter test, and (for a stream) the
    breaks it knows: for a period, a position (in units fed) at or after which the text is known not to
    repeat with that period. The text never changes, so a break stays true; a span that holds one cannot
    repeat, and is not compared again."""

    __slots__ = ("breaks", "counted", "left", "offset")

    def __init__(self, units: int, breaks: dict[int, int] | None = None, offset: int = 0) -> None:
        self.left = units
        self.counted = False
        self.breaks = breaks
        self.offset = offset  # units fed before raw[0]

    def broken(self, key: int, start: int) -> bool:
        """Is a break of this period known at or after raw[start]?"""
        breaks = self.breaks
        return breaks is not None and breaks.get(key, -1) >= self.offset + start

    def broke(self, key: int, at: int) -> None:
        """The text does not repeat with this period at or after raw[at] (a lower bound of the break)."""
        if self.breaks is not None:
            if len(self.breaks) >= _BREAKS:
                self.breaks.clear()
            self.breaks[key] = max(self.breaks.get(key, -1), self.offset + at)


def _repeats(raw: AnyStr, p: int, span: int, check: _Check) -> bool:
    """Is raw[-span:] periodic with period p? Compared in stages: the block's 64-unit suffix and as much at
    the far end of the span (a run shorter than the floor fails there at once), then 2, 8, 32, ... blocks
    back from the end, stopping at the first stage that differs (and remembering where it failed)."""
    n = len(raw)
    if span > n or p >= span or check.broken(p, n - span):
        return False
    length = min(span, p + _SUFFIX)
    check.left -= 2 * length
    if check.left < 0:
        return False
    if raw[n - length:n - p] != raw[n - length + p:]:
        check.broke(p, n - length)
        return False
    start = n - span
    if raw[start:start + length - p] != raw[start + p:start + length]:
        check.broke(p, start)
        return False
    while length < span:
        length = min(span, max(length * 4, 2 * p))
        check.left -= length
        if check.left < 0:
            return False
        if raw[n - length:n - p] != raw[n - length + p:]:
            check.broke(p, n - length)
            return False
    return True


def _near_repeat(raw: str, p: int) -> bool:
    """Do two of the last four quarters of the tail's block (16 characters each at least) occur one period
    back, give or take 32 characters? A loop whose counters change still repeats most of its block exactly
    (what precedes a counter that changed length is shifted by the difference); a phrase said twice, or a
    block that merely ends like the one before, does not."""
    n, quarter = len(raw), max(_KEY, p // 4)
    matched = 0
    for k in range(4):
        end = n - k * quarter
        if end - quarter - p - _SLACK < 0:
            return False
        if raw.find(raw[end - quarter:end], end - quarter - p - _SLACK, end - p + _SLACK) >= 0:
            matched += 1
            if matched == 2:
                return True
    return False


def _inner_bounds(normalised: str) -> tuple[int, int]:
    """Where a normalised text is left without its first 8 tokens and its last 8, which the cuts of a window
    may have split (a run of counters such as "one hundred and twenty-three" is 6 tokens before it is one)."""
    head = -1
    for _ in range(_EDGE_TOKENS):
        head = normalised.find("\x00", head + 1)
        if head < 0:
            return 0, 0
    tail = len(normalised)
    for _ in range(_EDGE_TOKENS):
        tail = normalised.rfind("\x00", 0, tail)
        if tail <= head:
            return 0, 0
    return head + 1, tail


def _inner(normalised: str) -> str:
    start, end = _inner_bounds(normalised)
    return normalised[start:end]


def _counter_period(raw: str, p: int, rule: RepetitionRule, check: _Check) -> int | None:
    """q, the normalised period of a prose loop whose repeats differ only in their counters, if raw's last
    max(min_repeats x p, counter_span) characters are one block that way; else None. Normalises the last
    three blocks; then, if they repeat, three blocks at the far end and in the middle of the span; only if
    those repeat too, the whole span (and where it stops repeating is remembered)."""
    n = len(raw)
    span = rule.needed("counter", p)
    if span > n or check.broken(_BY_BLOCK - p, n - span):
        return None
    near_len = min(n, 3 * p + 256)  # three blocks, and the edges _inner drops
    check.left -= near_len
    if check.left < 0:
        return None
    near = _inner(normalise(raw[n - near_len:]))
    m = len(near)
    key = near[-_KEY:]
    lo, hi = max(0, m - _KEY - 2 * p), m - 1
    for _ in range(8):
        j = near.rfind(key, lo, hi)
        if j < 0:
            return None
        hi = j + len(key) - 1
        q = m - len(key) - j
        if 2 * q > m or near[m - 2 * q:m - q] != near[m - q:]:
            continue
        if check.broken(-q, n - span):
            return None
        # Probes of three blocks each, 2, 4, 8, ... times as far back, up to the far end of the span: a run
        # of counters shorter than the floor (a song, a numbered list) fails at one, and where it fails is
        # remembered, so the next checks pass over it until the span is past it.
        back = 2 * near_len
        while True:
            start = max(n - span, n - back)
            check.left -= near_len
            probe = _inner(normalise(raw[start:start + near_len]))
            if check.left < 0:
                return None
            if len(probe) < 2 * q or probe[:-q] != probe[q:]:
                check.broke(-q, start)
                check.broke(_BY_BLOCK - p, start)
                return None
            if start == n - span:
                break
            back *= 2
        check.left -= 2 * span
        if check.left < 0:
            return None
        head = normalise(raw[n - span:])
        first, last = _inner_bounds(head)
        far = head[first:last]
        if len(far) > q and far[:-q] == far[q:]:
            return q
        # Where it stops repeating, as a lower bound in characters: a token of the normalised text is at most
        # as long as the word it reads, and NULs stand for at least nothing.
        breaks_at = first + len(far) - _span(far, q, min(len(far), 2 * q), 1)
        check.broke(-q, n - span + breaks_at - head.count("\x00", 0, breaks_at))
        check.broke(_BY_BLOCK - p, n - span + breaks_at - head.count("\x00", 0, breaks_at))
        return None
    return None


def _candidates(raw: str, rule: RepetitionRule, check: _Check) -> tuple[int, Kind, int] | None:
    """(p, kind, q) for the nearest candidate period of raw's last 16 characters the rule accepts."""
    n = len(raw)
    key = raw[n - _KEY:]
    lo, hi = max(0, n - _KEY - rule.max_block), n - 1
    counter_tests = known = 0
    repeats, floor = rule.min_repeats, rule.min_span
    for _ in range(_CANDIDATES):
        j = raw.rfind(key, lo, hi)
        if j < 0:
            return None
        hi = j + _KEY - 1
        p = n - _KEY - j
        span = max(repeats * p, floor)
        if check.broken(p, n - span):
            known += 1  # its span holds a known break; past a few, the rest are multiples of those
            if known >= _KNOWN and (not rule.counter_span or counter_tests >= _COUNTER_TESTS):
                return None
        elif _repeats(raw, p, span, check):
            if is_prose(raw[n - p:]):
                return p, "exact", p
            if rule.structured_span and _repeats(raw, p, rule.needed("structured", p), check):
                return p, "structured", p
            continue
        if rule.counter_span and counter_tests < _COUNTER_TESTS and _near_repeat(raw, p):
            counter_tests += 1  # a counter test normalises text: a few per key
            check.counted = True
            if is_prose(raw[n - p:]):
                q = _counter_period(raw, p, rule, check)
                if q is not None:
                    return p, "counter", q
        if check.left < 0:
            return None
    return None


def _text_period(raw: str, rule: RepetitionRule, cuts: tuple[int, ...], breaks: dict[int, int] | None = None,
                 offset: int = 0) -> tuple[int, Kind, int, int] | None:
    """(p, kind, q, cut) for the nearest candidate period the rule accepts, else None. q is p but for a
    counter loop, where it is the period of the normalised text. cut: the characters left off the end
    before the search, the first of `cuts`, or a later one when the search before found no candidate that
    repeats nearly (a counter loop whose key held a counter). `breaks`, `offset`: a stream's known breaks
    (see _Check) and the characters fed before raw[0]."""
    n = len(raw)
    floors = [f for f in (rule.min_span, rule.counter_span, rule.structured_span) if f]
    if n < min(floors):
        return None
    check = _Check(_BUDGET * max(n, rule.window), breaks, offset)
    for cut in cuts if rule.counter_span else (0,):
        if check.counted:
            break  # the key at the end found a block that nearly repeats: it held no counter
        if _has_candidate(raw, n - cut, rule.max_block, 1):
            found = _candidates(raw[:n - cut] if cut else raw, rule, check)
            if found is not None:
                return (*found, cut)
    return None


def _has_candidate(raw: AnyStr, end: int, max_block: int, width: int) -> bool:
    """Do the 16 units before `end` occur earlier within max_block units? (No: no period, the usual case.)"""
    key_len = _KEY * width
    if end < 2 * key_len:
        return False
    return raw.rfind(raw[end - key_len:end], max(0, end - key_len - max_block * width), end - 1) >= 0


def _id_period(raw: bytes, rule: RepetitionRule) -> int | None:
    """p in bytes for the nearest candidate period of packed ids the rule accepts (exact, min_span)."""
    n = len(raw)
    if n < rule.min_span * _ID_BYTES:
        return None
    key_len = _KEY * _ID_BYTES
    key = raw[n - key_len:]
    lo, hi = max(0, n - key_len - rule.max_block * _ID_BYTES), n - 1
    check = _Check(_BUDGET * max(n, rule.window * _ID_BYTES))
    for _ in range(_CANDIDATES):
        j = raw.rfind(key, lo, hi)
        if j < 0:
            return None
        hi = j + key_len - 1
        p = n - key_len - j
        if p % _ID_BYTES == 0 and _repeats(raw, p, rule.needed("exact", p // _ID_BYTES) * _ID_BYTES, check):
            return p
        if check.left < 0:
            return None
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


def _counter_span(text: str, q: int) -> int:
    """Characters at the end of `text` whose normalised form has period q (a counter loop's span)."""
    starts: list[int] = []
    joined = normalise(text, starts)
    start, end = _inner_bounds(joined)  # the end tokens may be cut
    body = joined[start:end]
    periodic = _span(body, q, min(len(body), 2 * q), 1)
    token = joined.count("\x00", 0, end - periodic)
    return len(text) - starts[min(token, len(starts) - 1)]


def _found(text: str, hit: tuple[int, Kind, int, int], at: int, rule: RepetitionRule) -> Repetition:
    """The Repetition for a period the rule accepted at the end of `text` (but its last `cut` characters),
    its span measured over `text`."""
    p, kind, q, cut = hit
    body = text[:len(text) - cut] if cut else text
    span = _counter_span(body, q) if kind == "counter" else _span(body, p, rule.needed(kind, p), 1)
    return Repetition(p, span + cut, at, body[len(body) - p:], kind)


def find_repetition(text: str, rule: RepetitionRule = TEXT_RULE) -> Repetition | None:
    """The repetition at the end of a whole text, its span measured over the whole text, or None."""
    found = _text_period(text[-rule.window:], rule, _WHOLE_CUTS)
    return None if found is None else _found(text, found, len(text), rule)


def _packed(ids: Iterable[int]) -> bytes:
    return array("I", ids).tobytes()


def find_token_repetition(ids: Sequence[int], rule: RepetitionRule = TOKEN_RULE) -> Repetition | None:
    """The repetition at the end of a whole reply's ids, measured over all of them, or None."""
    packed = _packed(ids)
    p = _id_period(packed[-rule.window * _ID_BYTES:], rule)
    if p is None:
        return None
    span = _span(packed, p, rule.needed("exact", p // _ID_BYTES) * _ID_BYTES, _ID_BYTES)
    return Repetition(p // _ID_BYTES, span // _ID_BYTES, len(ids), tuple(ids[len(ids) - p // _ID_BYTES:]))


class _Tail(Generic[AnyStr]):
    """The checked part of a stream: its last `max_block` + 16 units as one string, and enough parts for
    the window, joined only when a check has a candidate period."""

    __slots__ = ("_checks", "_counters", "_held", "_history", "_reach", "_recent", "_width", "_window", "fed",
                 "rule")

    def __init__(self, rule: RepetitionRule, empty: AnyStr, width: int) -> None:
        self.rule = rule
        self.fed = 0  # units checked so far
        self._width = width
        self._reach = (rule.max_block + _KEY + _SHIFT) * width
        self._window = rule.window * width
        self._counters = bool(rule.counter_span)
        self._checks = 0
        self._recent: AnyStr = empty
        self._history: deque[AnyStr] = deque()
        self._held = 0

    def add(self, fresh: AnyStr) -> AnyStr | None:
        """Add the units since the last check; the window when the tail has a candidate period (searched
        `cut` units before the end), else None."""
        rule, width, window = self.rule, self._width, self._window
        self.fed += len(fresh) // width
        history = self._history
        history.append(fresh)
        self._held += len(fresh)
        while self._held - len(history[0]) >= window:
            self._held -= len(history.popleft())
        self._recent = recent = (self._recent + fresh)[-self._reach:]
        if self.fed < rule.min_span:
            return None
        end = len(recent)
        # The key at the end, over the nearest 1,024 units, and over all of max_block every 4th check (a
        # search costs its length; a block over 1,024 needs 8 of them, so it is found at most 3 checks
        # later); else (a counter loop whose last 16 units hold a counter) the key 48 units back, over the
        # nearest 1,024 (a longer block's counter is rarely in its last 64).
        near = min(rule.max_block, _NEAR)
        reach = rule.max_block if self._checks % _FAR_EVERY == 0 else near
        self._checks += 1
        if _has_candidate(recent, end, reach, width) or (
                self._counters and _has_candidate(recent, end - _SHIFT, near, width)):
            return recent[:0].join(history)[-window:]
        return None  # no candidate period: the usual case


class RepetitionDetector:
    """Fed a reply's text chunk by chunk; `feed` returns the Repetition once the tail repeats (and from then
    on), else None. Units are characters."""

    __slots__ = ("_breaks", "_every", "_fresh", "_parts", "_tail", "found", "rule")

    def __init__(self, rule: RepetitionRule = TEXT_RULE) -> None:
        self.rule = rule
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
                raw = self._tail.add(fresh)
                if raw is not None:
                    hit = _text_period(raw, self.rule, _STREAM_CUTS, self._breaks, self._tail.fed - len(raw))
                    if hit is not None:
                        self.found = _found(raw, hit, self._tail.fed, self.rule)
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
        self._tail: _Tail[bytes] = _Tail(rule, b"", _ID_BYTES)

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
                    p = _id_period(raw, self.rule)
                    if p is not None:
                        span = _span(raw, p, self.rule.needed("exact", p // _ID_BYTES) * _ID_BYTES, _ID_BYTES)
                        block = array("I", raw[len(raw) - p:]).tolist()
                        self.found = Repetition(p // _ID_BYTES, span // _ID_BYTES, self._tail.fed, tuple(block))
        return self.found
