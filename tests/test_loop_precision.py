"""The loop stop's precision on a labelled corpus (tests/loop_corpus.py): the default rule stops none of the
legitimate repetitive replies (SQL, CSV, JSON, tables, code, base64, zeros, boxes, ...), fed in chunks of
any size or read whole by the audit, and catches every loop, no later than the repeats its rule needs plus
one check interval. The cases reported in the issue "Guards that are right" (cases 1 and 2) appear by name,
at the sizes it gave; the old rule (bench/loop_baseline.py) is held to have stopped or missed them, so the
corpus is the issue's."""

from __future__ import annotations

import random

import pytest

import bench.loop_baseline as old
from client.core.repetition import TEXT_RULE, RepetitionDetector, find_repetition
from tests.loop_corpus import LEGITIMATE, LOOPS, Case, by_name

_RNG = random.Random(7)
# Chunk sizes a stream delivers: one token, MTP, a few tokens, a burst, and a mix.
CHUNKINGS = {"1": [1], "4": [4], "37": [37], "257": [257], "mixed": [_RNG.randint(1, 60) for _ in range(101)]}
LATE = 48 + 64  # a counter test moves its key back 48 characters and drops the window's first words


def streamed(text: str, sizes: list[int], detector: RepetitionDetector | old.RepetitionDetector | None = None
             ) -> RepetitionDetector | old.RepetitionDetector:
    """The detector after being fed `text` in chunks of `sizes` (cycled), up to where it fired."""
    detector = detector if detector is not None else RepetitionDetector()
    i = k = 0
    while i < len(text):
        size = sizes[k % len(sizes)]
        if detector.feed(text[i:i + size]) is not None:
            break
        i, k = i + size, k + 1
    return detector


@pytest.mark.parametrize("chunks", list(CHUNKINGS))
@pytest.mark.parametrize("name", LEGITIMATE)
def test_a_legitimate_reply_is_never_stopped(name: str, chunks: str) -> None:
    case = by_name(name)
    assert not case.loops and len(case.text) > 4000
    found = streamed(case.text, CHUNKINGS[chunks]).found
    assert found is None, f"{name}: stopped at {found.at:,} of {len(case.text):,} characters ({found.kind})"


@pytest.mark.parametrize("name", LEGITIMATE)
def test_the_audit_finds_no_loop_in_a_legitimate_reply_nor_in_any_prefix(name: str) -> None:
    text = by_name(name).text
    assert find_repetition(text) is None
    # A reply cut anywhere (max_tokens, a stop) is read the same way: no prefix ends in a loop either.
    for end in range(1000, len(text), 499):
        assert find_repetition(text[:end]) is None, (name, end)


@pytest.mark.parametrize("chunks", list(CHUNKINGS))
@pytest.mark.parametrize("name", LOOPS)
def test_a_loop_is_stopped_once_its_rule_is_met(name: str, chunks: str) -> None:
    case = by_name(name)
    assert case.loop_start is not None
    found = streamed(case.text, CHUNKINGS[chunks]).found
    assert found is not None, f"{name}: never stopped in {len(case.text):,} characters"
    assert found.at > case.loop_start  # not on the normal opening
    # Late by design, and by how much: the repeats the rule needs for this block, plus at most one check
    # interval (four for a block over 1,024 characters, searched that far every 4th check) and one chunk.
    late = found.at - case.loop_start
    checks = 1 if found.block <= 1024 else 4
    assert late <= TEXT_RULE.needed(found.kind, found.block) + checks * TEXT_RULE.check_every \
        + max(CHUNKINGS[chunks]) + LATE, (name, late, found)


@pytest.mark.parametrize("name", LOOPS)
def test_the_audit_finds_every_loop_and_where_it_starts(name: str) -> None:
    case = by_name(name)
    assert case.loop_start is not None
    found = find_repetition(case.text)
    assert found is not None, name
    assert abs(found.span - (len(case.text) - case.loop_start)) <= 64, (name, found.span, case.loop_start)
    # Also when the reply ends anywhere inside a block (max_tokens cuts where it falls).
    for cut in range(1, 400, 13):
        assert find_repetition(case.text[:-cut]) is not None, (name, cut)


@pytest.mark.parametrize(("name", "kind"), [("zeros_forever", "structured"), ("json_line_forever", "structured"),
                                            ("exact_paragraph", "exact"), ("chinese_paragraph", "exact"),
                                            ("counter_words", "counter"), ("counter_hex", "counter")])
def test_the_kind_of_a_loop_decides_its_floor(name: str, kind: str) -> None:
    case = by_name(name)
    found = find_repetition(case.text)
    assert found is not None and found.kind == kind
    stopped = streamed(case.text, [4]).found
    assert stopped is not None and stopped.at - case.loop_start >= TEXT_RULE.floor(stopped.kind) - LATE


# The issue's reports: the legitimate replies the old rule stopped, with where it stopped them ("kept 4,096
# of 8,112 characters"), and the loops it missed.
REPORTED_FALSE_STOPS = [
    ("sql_inserts_100", 8112, 4096),  # 100 SQL INSERTs
    ("json_array_150_ids", 9832, 3072),  # a JSON array of 150 objects with ids
    ("table_60_days", 4232, 3072),  # a 60-day markdown table
    ("list_of_zeros", None, None),
    ("base64_zero_bytes", None, None),
    ("repeated_json_config", None, None),
    ("ascii_box", None, None),
]
REPORTED_MISSES = ["counter_words", "counter_letters", "counter_hex", "long_block_1739x12"]


@pytest.mark.parametrize(("name", "size", "kept"), REPORTED_FALSE_STOPS, ids=[r[0] for r in REPORTED_FALSE_STOPS])
def test_the_reported_false_stops_are_gone(name: str, size: int | None, kept: int | None) -> None:
    case = by_name(name)
    assert case.issue and not case.loops
    if size is not None:
        assert len(case.text) == size
    before = streamed(case.text, [4], old.RepetitionDetector()).found
    assert before is not None, "the old rule stopped it"
    if kept is not None:
        assert before.at == kept
    for sizes in CHUNKINGS.values():
        assert streamed(case.text, sizes).found is None
    assert find_repetition(case.text) is None


@pytest.mark.parametrize("name", REPORTED_MISSES)
def test_the_reported_missed_loops_are_caught(name: str) -> None:
    case = by_name(name)
    assert case.issue and case.loops
    assert old.find_repetition(case.text) is None, "the old audit missed it"
    assert find_repetition(case.text) is not None
    assert streamed(case.text, [4]).found is not None


def test_the_long_block_is_1739_characters_12_times() -> None:
    case = by_name("long_block_1739x12")
    assert case.loop_start is not None
    loop = case.text[case.loop_start:]
    assert len(loop) == 12 * 1739 and loop == loop[:1739] * 12
    found = find_repetition(case.text)
    assert found is not None and (found.block, found.kind) == (1739, "exact")
    # Neither the old stream nor the old audit saw it: its block was longer than 1,024 characters.
    assert streamed(case.text, [4], old.RepetitionDetector()).found is None


def test_the_corpus_is_labelled_and_deterministic() -> None:
    names = LEGITIMATE + LOOPS
    assert len(names) == len(set(names))
    reported = {r[0] for r in REPORTED_FALSE_STOPS} | set(REPORTED_MISSES)
    assert {c.name for c in map(by_name, names) if c.issue} == reported
    reply: Case = by_name("sql_inserts_100")
    assert reply.text.count("INSERT INTO") == 100
    assert by_name("json_array_150_ids").text.count('{"id": ') == 150
    assert by_name("table_60_days").text.count("within target") == 60
    # Every loop runs the way a model runs to max_tokens: tens of thousands of characters.
    assert all(len(by_name(n).text) >= 16_384 for n in LOOPS)
