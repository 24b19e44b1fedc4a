"""The loop detector (client/loops/repetition.py): it fires on a tail that repeats one block, with or
without a moving counter, fed in any chunking, and stays quiet on long varied replies, code and tables with
repeated structure, and short lines said again and again. tests/test_loop_precision.py holds it to a
labelled corpus of legitimate repetitive replies and of loops."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from client.loops.repetition import (
    TEXT_RULE,
    TOKEN_RULE,
    RepetitionDetector,
    RepetitionRule,
    TokenRepetitionDetector,
    find_repetition,
    find_token_repetition,
)
from prompts import sample_texts
from simulator.script import TextSource

REPO = Path(__file__).resolve().parent.parent
WORDS = ("the", "value", "we", "need", "check", "whether", "this", "is", "correct", "so", "let", "me", "think",
         "again", "first", "then", "consider", "case", "where", "input", "has", "two", "parts", "cache")


def prose(rng: random.Random, chars: int) -> str:
    """Varied sentences of about `chars` characters (a normal start before a loop)."""
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(rng.choices(WORDS, k=rng.randint(5, 15))).capitalize() + rng.choice([". ", ".\n\n"])
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars]


def block_of(rng: random.Random, chars: int) -> str:
    return ("Wait, " + prose(rng, chars))[:chars - 2] + "\n\n"


def exact_loop(block_chars: int) -> Callable[[random.Random], tuple[str, int]]:
    def make(rng: random.Random) -> tuple[str, int]:
        block = block_of(rng, block_chars)
        return prose(rng, 3000) + block * max(12, 16_000 // block_chars), block_chars
    return make


def counting_loop(rng: random.Random) -> tuple[str, int]:
    """The counter moves each time ("check 41", "check 42"): with counters read alike it is one block."""
    block = block_of(rng, 400)
    text = prose(rng, 2000) + "".join(f"Let me check case {n}: {block}" for n in range(10, 99))
    return text, len("Let me check case 10: ") + 400


def noisy_numbers_loop(rng: random.Random) -> tuple[str, int]:
    """Each pass quotes other figures of the same width ("value 0.4817 at step 0093")."""
    block = block_of(rng, 300)
    text = prose(rng, 1500) + "".join(f"value {rng.random():.4f} at step {rng.randint(0, 9999):04d}: {block}"
                                      for _ in range(120))
    return text, len("value 0.0000 at step 0000: ") + 300


def degenerate_loop(rng: random.Random) -> tuple[str, int]:
    """A model stuck on one character: no prose, so it counts only once the whole window is that character."""
    return prose(rng, 1000) + "0." + "0" * 50_000, 1


LOOPS = {
    "block_20_chars": exact_loop(20),
    "block_100_chars": exact_loop(100),
    "block_500_chars": exact_loop(500),
    "block_1000_chars": exact_loop(1000),
    "moving_counter": counting_loop,
    "changing_figures": noisy_numbers_loop,
    "one_character": degenerate_loop,
}


def feed(text: str, chunk: int, detector: RepetitionDetector | None = None) -> RepetitionDetector:
    detector = detector or RepetitionDetector()
    for i in range(0, len(text), chunk):
        if detector.feed(text[i:i + chunk]) is not None:
            break
    return detector


@pytest.mark.parametrize("chunk", [1, 4, 37], ids=["chunk_1", "chunk_4", "chunk_37"])
@pytest.mark.parametrize("name", list(LOOPS))
def test_fires_on_a_looping_tail(name: str, chunk: int) -> None:
    text, block = LOOPS[name](random.Random(name))
    found = feed(text, chunk).found
    assert found is not None, name
    assert found.block == block and found.repeats >= TEXT_RULE.min_repeats
    # Found soon after the rule is met, not at the end of the text.
    assert found.at <= len(text) - len(text) // 4 or name == "changing_figures"
    whole = find_repetition(text)
    assert whole is not None and whole.block == block and whole.at == len(text)


def test_the_audit_form_measures_the_whole_loop() -> None:
    rng = random.Random(3)
    head, block = prose(rng, 4000), block_of(rng, 300)
    found = find_repetition(head + block * 60)
    assert found is not None and found.block == 300
    # Where the periodic tail starts is where the loop began (give or take the prose's own last characters).
    assert 60 * 300 <= found.span <= 60 * 300 + 40
    assert found.sample == block


def code_with_repeated_structure() -> str:
    """Dozens of near-identical functions: the names and the literals differ."""
    rng = random.Random(5)
    out = []
    for i in range(120):
        name = "_".join(rng.choices(WORDS, k=2))
        out.append(f"def {name}_{i}(value: int) -> int:\n    \"\"\"Return {name} of value.\"\"\"\n"
                   f"    if value < {rng.randint(0, 99)}:\n        return value * {rng.randint(2, 9)}\n"
                   f"    return value - {rng.randint(1, 50)}\n\n\n")
    return "".join(out)


def numeric_table() -> str:
    """A markdown table whose rows differ only in (equally wide) numbers: periodic with digits folded."""
    rng = random.Random(6)
    rows = "".join(f"| {i:04d} | {rng.random():.3f} | {rng.randint(0, 999):03d} | ok |\n" for i in range(400))
    return "| id | share | count | state |\n|---|---|---|---|\n" + rows


def item_list() -> str:
    return "Here are the items:\n" + "".join(f"- Item {i}\n" for i in range(1, 401))


def short_lines() -> str:
    """Legitimately repeated short lines, several times each."""
    return ("Yes.\n" * 40 + "No.\n" * 40 + "Yes.\n" * 40 + "-" * 80 + "\n" + "| --- " * 30 + "|\n"
            + "print('hello')\n" * 30            + "- [ ] todo\n" * 100 + "ha " * 200 + "\n" + "=" * 200 + "\n"
            + "".join(f"    assert row[{i}] == expected[{i}]\n" for i in range(30)))


def sample_material() -> str:
    """The prompt set's own texts, long and varied."""
    parts: list[str] = []
    for name in dir(sample_texts):
        value = getattr(sample_texts, name)
        if isinstance(value, tuple):
            parts.extend(str(item) for item in value)
    return "\n\n".join(parts)


def sim_reply() -> str:
    """A 30,000-piece reply of the simulator's own word pieces, which it never loops unless asked."""
    return TextSource(11).take(30_000)


def repo_docs() -> str:
    """Markdown with tables, CLI blocks and code: the README and the docs."""
    return "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])


QUIET = {
    "code_with_repeated_structure": code_with_repeated_structure,
    "numeric_table": numeric_table,
    "item_list": item_list,
    "short_lines": short_lines,
    "sample_texts": sample_material,
    "sim_reply": sim_reply,
    "repo_docs": repo_docs,
}


@pytest.mark.parametrize("chunk", [3, 50], ids=["chunk_3", "chunk_50"])
@pytest.mark.parametrize("name", list(QUIET))
def test_stays_quiet_on_normal_replies(name: str, chunk: int) -> None:
    text = QUIET[name]()
    assert len(text) > 3000, "long enough to trip a rule that were too loose"
    assert feed(text, chunk).found is None
    assert find_repetition(text) is None


@pytest.mark.parametrize("block_ids", [1, 50, 250])
def test_token_ids_loop_by_the_token_rule(block_ids: int) -> None:
    rng = random.Random(block_ids)
    head = [rng.randrange(250_000) for _ in range(700)]
    block = [rng.randrange(250_000) for _ in range(block_ids)]
    ids = head + block * (10 + 600 // block_ids)
    detector = TokenRepetitionDetector()
    for i in range(0, len(ids), 3):
        if detector.feed(ids[i:i + 3]) is not None:
            break
    found = detector.found
    assert found is not None and found.block == block_ids and found.repeats >= TOKEN_RULE.min_repeats
    assert found.at < len(ids) and found.sample == tuple(ids[found.at - block_ids:found.at])
    whole = find_token_repetition(ids)
    assert whole is not None and whole.block == block_ids and whole.span == len(ids) - 700
    assert whole.sample == tuple(block)


def test_token_ids_that_do_not_loop_stay_quiet() -> None:
    rng = random.Random(9)
    # Word-like ids: a small vocabulary, phrases that recur, never one block over and over.
    phrases = [[rng.randrange(5000) for _ in range(rng.randint(2, 6))] for _ in range(300)]
    ids = [i for _ in range(3000) for i in rng.choice(phrases)]
    detector = TokenRepetitionDetector()
    for i in range(0, len(ids), 4):
        assert detector.feed(ids[i:i + 4]) is None
    assert find_token_repetition(ids) is None


def test_once_found_it_stays_found_and_costs_nothing_more() -> None:
    text, _ = exact_loop(100)(random.Random(1))
    detector = feed(text, 10)
    found = detector.found
    fed = detector.fed
    assert found is not None
    assert detector.feed("something else entirely " * 100) is found and detector.fed == fed


@pytest.mark.parametrize(("field", "value"), [("max_block", 0), ("min_repeats", 0), ("min_span", 0),
                                              ("check_every", 0), ("counter_span", -1), ("structured_span", -1)])
def test_a_rule_out_of_range_is_refused_by_name(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"RepetitionRule.{field}"):
        RepetitionRule(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(("rule", "window"), [
    (TEXT_RULE, 32768), (TOKEN_RULE, 2048), (RepetitionRule(max_block=10, min_repeats=2, min_span=500), 32768),
    (RepetitionRule(max_block=10, min_repeats=2, min_span=500, counter_span=0, structured_span=0), 500)])
def test_the_window_holds_the_longest_block_s_repeats(rule: RepetitionRule, window: int) -> None:
    assert rule.window == window
