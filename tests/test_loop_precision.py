"""The loop stop's precision on a labelled corpus (bench/loop_corpus).

The stream's stop (armed at 90% of max_tokens, exact repeats only; bench/loop_stream.py runs it as the
endpoint does) cuts none of the legitimate replies (SQL, CSV, JSON, tables, code, base64, zeros, boxes,
checklists, counting in words, lorem ipsum, ...) under a run's max_tokens or a training window, fed in
chunks of any size; one whose repeats are not exact is never cut even under a budget it just fits. It stops
an exact loop only past its floor, and a loop with counters or drift never. The audit counts every loop that
ran to its cap, found by the text rule (exact, counters, structured) or the near-repeat finder (drift,
shuffled paragraphs, counters in bold, lists, LaTeX, letters), and never counts a reply that ended by itself.
The text rule alone (client.loops.repetition.TEXT_RULE, fed whole or in chunks) still stops none of the
first issue's legitimate replies: its cases appear by name, at the sizes it gave, and the old rule
(bench/loop_baseline.py) is held to have stopped or missed them."""

from __future__ import annotations

import math
import random

import pytest

import bench.loop_baseline as old
from bench.loop_corpus import LEGITIMATE, LOOPS, Case, by_name
from bench.loop_stream import stream
from client.audit.loops import judge
from client.loops.repetition import STREAM_RULE, TEXT_RULE, RepetitionDetector, find_repetition, stop_floor

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


FIRST_LEGITIMATE = [n for n in LEGITIMATE if not by_name(n).group]  # the first issue's corpus, text rule
FIRST_LOOPS = [n for n in LOOPS if not by_name(n).group]
# Budgets: a run's max_tokens, and a 4,096-token window less a prompt.
BUDGETS = {"max_tokens": 16_384, "window": 4_000}
# The stream stops a loop only when it repeats exactly (prose or anything else): the rest run to max_tokens.
STREAM_STOPS = {"exact_paragraph", "exact_short_line", "counter_ordinals", "alternating_blocks", "long_block_1739x12",
                "long_block_4000", "markdown_reasoning", "chinese_paragraph", "sim_loop", "zeros_forever",
                "json_line_forever"}
# The one residual of the stream stop: prose asked for and repeated exactly over most of a budget it just fits.
JUST_FITS_CUT = {"lorem_ipsum_40"}


def just_fits(text: str) -> int:
    """The smallest max_tokens a reply fits in, at 4 characters a token."""
    return math.ceil(len(text) / 4) + 1


@pytest.mark.parametrize("budget", list(BUDGETS))
@pytest.mark.parametrize("chunks", [1, 37, 257])
@pytest.mark.parametrize("name", LEGITIMATE)
def test_the_stream_stop_never_cuts_a_legitimate_reply(name: str, chunks: int, budget: str) -> None:
    case = by_name(name)
    assert not case.loops
    streamed_ = stream(case.text, BUDGETS[budget], chunk=chunks)
    assert streamed_.stop is None, f"{name}: stopped at {streamed_.stop:,} of {len(case.text):,} ({streamed_.kind})"


@pytest.mark.parametrize("name", LEGITIMATE)
def test_a_reply_that_just_fits_its_budget_is_cut_only_if_it_repeats_exactly(name: str) -> None:
    case = by_name(name)
    budget = just_fits(case.text)
    streamed_ = stream(case.text, budget)
    assert (streamed_.stop is not None) == (name in JUST_FITS_CUT), (name, streamed_)
    if streamed_.stop is not None:
        assert streamed_.kind == "exact" and streamed_.stop >= 4 * stop_floor(budget)


@pytest.mark.parametrize("chunks", [1, 4, 257])
@pytest.mark.parametrize("name", LOOPS)
def test_the_stream_stops_an_exact_loop_only_past_its_floor(name: str, chunks: int) -> None:
    case = by_name(name)
    assert case.loop_start is not None
    budget = len(case.text) // 4  # a loop runs to max_tokens
    streamed_ = stream(case.text, budget, chunk=chunks)
    assert (streamed_.stop is not None) == (name in STREAM_STOPS), (name, streamed_)
    if streamed_.stop is not None:
        armed = 4 * stop_floor(budget)
        assert streamed_.stop >= armed
        # Armed late, then found within four checks (a block over 1,024 characters) and a chunk.
        assert streamed_.stop - armed <= 4 * STREAM_RULE.check_every + chunks, (name, streamed_)


@pytest.mark.parametrize("name", LOOPS)
def test_the_audit_counts_every_loop_that_ran_to_its_cap(name: str) -> None:
    case = by_name(name)
    assert judge(case.text, "length")[0] == "loop"
    for cut in range(1, 400, 97):  # max_tokens cuts where it falls
        assert judge(case.text[:-cut], "length")[0] == "loop", (name, cut)


@pytest.mark.parametrize("name", LEGITIMATE)
def test_the_audit_never_counts_a_complete_reply_as_a_loop(name: str) -> None:
    text = by_name(name).text
    verdict, found, _ = judge(text, "stop")
    assert verdict != "loop"
    # A suspicion exactly when the text rule sees a repeating tail.
    assert (verdict == "suspected") == (found is not None) == (find_repetition(text) is not None)


@pytest.mark.parametrize("name", [n for n in LOOPS if by_name(n).group == "missed"])
def test_the_near_loops_the_exact_rule_misses_are_found(name: str) -> None:
    case = by_name(name)
    assert len(case.text) == 65_536
    verdict, found, near = judge(case.text, "length")
    assert verdict == "loop" and (found is not None or near is not None)
    assert stream(case.text, len(case.text) // 4).stop is None  # drift and counters: never cut in the stream


ASKED_STOPPED_BEFORE = ["runbook_450", "count_to_1000_words", "test_log_1200", "json_array_strings", "lorem_ipsum_40"]


@pytest.mark.parametrize("name", ASKED_STOPPED_BEFORE)
def test_the_asked_replies_the_eager_stop_cut_are_no_longer_cut(name: str) -> None:
    case = by_name(name)
    assert case.group == "asked"
    before = streamed(case.text, [4]).found  # the text rule armed from the start: the stop as it was
    assert before is not None and before.at < len(case.text)
    for budget in BUDGETS.values():
        assert stream(case.text, budget).stop is None


@pytest.mark.parametrize("chunks", list(CHUNKINGS))
@pytest.mark.parametrize("name", FIRST_LEGITIMATE)
def test_a_legitimate_reply_is_never_stopped(name: str, chunks: str) -> None:
    case = by_name(name)
    assert not case.loops and len(case.text) > 4000
    found = streamed(case.text, CHUNKINGS[chunks]).found
    assert found is None, f"{name}: stopped at {found.at:,} of {len(case.text):,} characters ({found.kind})"


@pytest.mark.parametrize("name", FIRST_LEGITIMATE)
def test_the_audit_finds_no_loop_in_a_legitimate_reply_nor_in_any_prefix(name: str) -> None:
    text = by_name(name).text
    assert find_repetition(text) is None
    # A reply cut anywhere (max_tokens, a stop) is read the same way: no prefix ends in a loop either.
    for end in range(1000, len(text), 499):
        assert find_repetition(text[:end]) is None, (name, end)


@pytest.mark.parametrize("chunks", list(CHUNKINGS))
@pytest.mark.parametrize("name", FIRST_LOOPS)
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


@pytest.mark.parametrize("name", FIRST_LOOPS)
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
    # The later issue's classes at their sizes: asked-for replies of 9-36K characters, loops of 65,536.
    assert all(9_000 <= len(by_name(n).text) <= 36_000 for n in LEGITIMATE if by_name(n).group == "asked")
    assert all(len(by_name(n).text) == 65_536 for n in LOOPS if by_name(n).group == "missed")
