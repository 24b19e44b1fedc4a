"""The stream stop's arming (client.loops.repetition_rule.stop_floor, RepetitionDetector's `armed`) and the
near-repeat finder (client.loops.near_repeat), as pure logic: table-driven."""

from __future__ import annotations

import random

import pytest

from bench.loop_corpus import reasoning
from client.loops.near_repeat import find_near_loop, said_again
from client.loops.repetition import STREAM_RULE, TEXT_RULE, RepetitionDetector, stop_floor

LOOP = "Wait, let me check the cache key again, it might be stale after the last request.\n"


@pytest.mark.parametrize(("max_tokens", "floor"), [(1, 1), (10, 9), (4000, 3600), (4096, 3687), (32768, 29492)])
def test_the_floor_is_nine_tenths_of_max_tokens_rounded_up(max_tokens: int, floor: int) -> None:
    assert stop_floor(max_tokens) == floor


def feed(detector: RepetitionDetector, text: str, chunk: int = 7) -> int | None:
    """Characters fed when it fired, else None."""
    for i in range(0, len(text), chunk):
        if detector.feed(text[i:i + chunk]) is not None:
            return i + chunk
    return None


@pytest.mark.parametrize(("armed_at", "fires"), [
    (None, False),  # never armed: a loop of 40,000 characters is never looked for
    (0, True),  # armed from the start: the text rule's stop
    (30_000, True),  # armed late: found at the first check after, the window already holds the repeats
])
def test_an_unarmed_detector_keeps_its_window_but_never_fires(armed_at: int | None, fires: bool) -> None:
    text = LOOP * 500
    detector = RepetitionDetector(STREAM_RULE, armed=armed_at == 0)
    stopped = None
    for i in range(0, len(text), 7):
        if armed_at is not None and i >= armed_at:
            detector.armed = True
        if detector.feed(text[i:i + 7]) is not None:
            stopped = i + 7
            break
    assert (stopped is not None) == fires
    if stopped is not None and armed_at:
        assert armed_at <= stopped <= armed_at + 2 * STREAM_RULE.check_every


@pytest.mark.parametrize(("text", "kind"), [
    (LOOP * 400, "exact"),
    ("".join(f"Step {i}: {LOOP}" for i in range(400)), None),  # counters: the stream rule never stops them
    ("0, " * 15_000, "structured"),
])
def test_the_stream_rule_stops_exact_repeats_only(text: str, kind: str | None) -> None:
    found = RepetitionDetector(STREAM_RULE)
    feed(found, text)
    assert (found.found.kind if found.found else None) == kind
    text_rule = RepetitionDetector(TEXT_RULE)
    feed(text_rule, text)
    assert text_rule.found is not None  # the audit's rule sees all three


@pytest.mark.parametrize(("tokens", "reach", "expected"), [
    (list("abcdefgabcdefg"), 100, [False] * 7 + [True] * 2),  # shingles of 6: the second pass repeats
    (list("abcdefgabcdefg"), 5, [False] * 9),  # ... but too far back
    (list("abcdefghijklmn"), 100, [False] * 9),
])
def test_said_again(tokens: list[str], reach: int, expected: list[bool]) -> None:
    assert said_again(tokens, reach) == expected


def _drifting(every: int) -> str:
    words = LOOP.split(" ")
    out = [reasoning(random.Random(1), 3000)]
    for n in range(700):
        block = list(words)
        if n % every == 0:
            block[n % len(words)] = random.Random(n).choice(("again", "now", "maybe", "still", "really"))
        out.append(" ".join(block))
    return "".join(out)


@pytest.mark.parametrize(("text", "near"), [
    (_drifting(1), True), (_drifting(5), True),
    (reasoning(random.Random(2), 30_000), False),  # varied reasoning
    (LOOP * 10, False),  # too short to have run to a cap
])
def test_the_near_repeat_finder(text: str, near: bool) -> None:
    assert (find_near_loop(text) is not None) == near
