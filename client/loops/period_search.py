"""The period search under the loop detectors: does a tail repeat one block, and over how much of it?
Exact repeats are compared as slices (C-level `rfind` and comparison, bounded per check); a prose block
whose repeats differ only in counters is compared on its normalised text (client.loops.text_kind). The
detectors and the whole-reply finders are client.loops.repetition; the rule is client.loops.repetition_rule.
"""

from __future__ import annotations

from typing import AnyStr

from client.loops.repetition_rule import Kind, Repetition, RepetitionRule
from client.loops.text_kind import is_prose, normalise

KEY = 16  # units of the tail searched for one period back
_SUFFIX = 64  # units of a candidate's block compared before the block itself
_CANDIDATES = 64  # candidate periods tried per check, nearest first (bounds a check's cost)
_BUDGET = 4  # units compared per check, at most this many windows
ID_BYTES = 4  # a token id packed as one unsigned 32-bit word
_SLACK = 32  # characters a counter's change of length may shift what precedes it
SHIFT = 48  # characters the counter test moves its key back when the last 16 held a counter
# Where the key ends, before the end: a stream tries two (its next check is another phase of a loop); a
# whole reply has one phase, so five, 16 apart (a short block holds a counter in most 16 characters).
STREAM_CUTS = (0, SHIFT)
WHOLE_CUTS = (0, 16, 32, SHIFT, 64)
NEAR = 1024  # units a stream's check searches its key over, but every FAR_EVERY-th
FAR_EVERY = 4  # a stream's check searches over all of max_block this often
_COUNTER_TESTS = 1  # counter tests a key's candidates may run
_BREAKS = 1024  # periods whose break a stream remembers (then it forgets them all: memory stays small)
_KNOWN = 16  # candidates with a known break a check passes over before it gives up
# Keys of the known breaks: p for exact repeats, -q for a normalised period, _BY_BLOCK - p for the counter
# test of a block of p characters.
_BY_BLOCK = -(1 << 30)
_EDGE_TOKENS = 8  # tokens dropped from each end of a normalised window (a cut may split a counter)


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
    n, quarter = len(raw), max(KEY, p // 4)
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
    key = near[-KEY:]
    lo, hi = max(0, m - KEY - 2 * p), m - 1
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
        breaks_at = first + len(far) - span_of(far, q, min(len(far), 2 * q), 1)
        check.broke(-q, n - span + breaks_at - head.count("\x00", 0, breaks_at))
        check.broke(_BY_BLOCK - p, n - span + breaks_at - head.count("\x00", 0, breaks_at))
        return None
    return None


def _candidates(raw: str, rule: RepetitionRule, check: _Check) -> tuple[int, Kind, int] | None:
    """(p, kind, q) for the nearest candidate period of raw's last 16 characters the rule accepts."""
    n = len(raw)
    key = raw[n - KEY:]
    lo, hi = max(0, n - KEY - rule.max_block), n - 1
    counter_tests = known = 0
    repeats, floor = rule.min_repeats, rule.min_span
    for _ in range(_CANDIDATES):
        j = raw.rfind(key, lo, hi)
        if j < 0:
            return None
        hi = j + KEY - 1
        p = n - KEY - j
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


def text_period(raw: str, rule: RepetitionRule, cuts: tuple[int, ...], breaks: dict[int, int] | None = None,
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
        if has_candidate(raw, n - cut, rule.max_block, 1):
            found = _candidates(raw[:n - cut] if cut else raw, rule, check)
            if found is not None:
                return (*found, cut)
    return None


def has_candidate(raw: AnyStr, end: int, max_block: int, width: int) -> bool:
    """Do the 16 units before `end` occur earlier within max_block units? (No: no period, the usual case.)"""
    key_len = KEY * width
    if end < 2 * key_len:
        return False
    return raw.rfind(raw[end - key_len:end], max(0, end - key_len - max_block * width), end - 1) >= 0


def id_period(raw: bytes, rule: RepetitionRule) -> int | None:
    """p in bytes for the nearest candidate period of packed ids the rule accepts (exact, min_span)."""
    n = len(raw)
    if n < rule.min_span * ID_BYTES:
        return None
    key_len = KEY * ID_BYTES
    key = raw[n - key_len:]
    lo, hi = max(0, n - key_len - rule.max_block * ID_BYTES), n - 1
    check = _Check(_BUDGET * max(n, rule.window * ID_BYTES))
    for _ in range(_CANDIDATES):
        j = raw.rfind(key, lo, hi)
        if j < 0:
            return None
        hi = j + key_len - 1
        p = n - key_len - j
        if p % ID_BYTES == 0 and _repeats(raw, p, rule.needed("exact", p // ID_BYTES) * ID_BYTES, check):
            return p
        if check.left < 0:
            return None
    return None


def span_of(whole: AnyStr, p: int, known: int, width: int) -> int:
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
    periodic = span_of(body, q, min(len(body), 2 * q), 1)
    token = joined.count("\x00", 0, end - periodic)
    return len(text) - starts[min(token, len(starts) - 1)]


def repetition_at(text: str, hit: tuple[int, Kind, int, int], at: int, rule: RepetitionRule) -> Repetition:
    """The Repetition for a period the rule accepted at the end of `text` (but its last `cut` characters),
    its span measured over `text`."""
    p, kind, q, cut = hit
    body = text[:len(text) - cut] if cut else text
    span = _counter_span(body, q) if kind == "counter" else span_of(body, p, rule.needed(kind, p), 1)
    return Repetition(p, span + cut, at, body[len(body) - p:], kind)


