"""The loop corpus's loops, started after a normal opening (`loop_start`) and run the way a model runs
until max_tokens: exact repeats, repeats whose counter moves in digits, words, letters or hex, two blocks
alternating, long blocks (1,739 characters x 12), paragraphs of reasoning, in English and in Chinese; and
degenerate loops of structured text (zeros, one JSON line) that only the longest floor catches. `BUILDS`
maps each case's name to its builder (text, loop start) and whether the issue "Guards that are right"
reported it."""

from __future__ import annotations

import random
from collections.abc import Callable

from bench.loop_corpus.writing import PARAGRAPH, looping, number_words, reasoning
from simulator.text import TextSource

PROSE_LOOP_CHARS = 32_768  # a prose loop's reply, in characters: the model runs on until max_tokens
STRUCTURED_LOOP_CHARS = 40_960  # a structured loop needs the whole 32,768-character window to count


def _letters(n: int) -> str:
    """A, B, ..., Z, AA, AB, ..."""
    return chr(65 + n) if n < 26 else _letters(n // 26 - 1) + chr(65 + n % 26)


def exact_paragraph() -> tuple[str, int]:
    return looping(201, 3000, lambda n: PARAGRAPH, PROSE_LOOP_CHARS)


def exact_short_line() -> tuple[str, int]:
    return looping(202, 2000, lambda n: "Wait, let me check that again.\n", PROSE_LOOP_CHARS)


def counter_digits() -> tuple[str, int]:
    block = "let me re-check the cache key and see whether the entry is stale before the next request.\n"
    return looping(203, 2500, lambda n: f"Step {n + 1}: {block}", PROSE_LOOP_CHARS)


def counter_short_line() -> tuple[str, int]:
    return looping(222, 2000, lambda n: f"Retry {n + 1}: the cache key is still stale.\n", PROSE_LOOP_CHARS)


def counter_words() -> tuple[str, int]:
    block = "let me re-check the cache key and see whether the entry is stale before the next request.\n"
    return looping(204, 2500, lambda n: f"Step {number_words(n + 1)}: {block}", PROSE_LOOP_CHARS)


def counter_ordinals() -> tuple[str, int]:
    ordinals = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
    block = ("time I trace the call, the handler returns early because the token is missing, so I go back "
             "to the middleware and read it again.\n\n")
    return looping(205, 2000, lambda n: f"The {ordinals[n % 10]} {block}", PROSE_LOOP_CHARS)


def counter_letters() -> tuple[str, int]:
    block = (": the timeout comes from the proxy, not from the server. Let me verify that by reading the proxy "
             "config once more and comparing it with the server's settings.\n\n")
    return looping(206, 2500, lambda n: f"Hypothesis {_letters(n)}{block}", PROSE_LOOP_CHARS)


def counter_hex() -> tuple[str, int]:
    block = (": the value there is still the old pointer, so the free did not happen yet. Let me step "
             "forward and look at the next slot.\n")
    return looping(207, 2500, lambda n: f"Checking offset 0x{0x1f00 + 0x40 * n:x}{block}", PROSE_LOOP_CHARS)


def counter_bare_hex() -> tuple[str, int]:
    block = (" again: it points into the freed page, so the use-after-free must come from the second "
             "callback. Let me read the callback once more.\n")
    return looping(208, 2500, lambda n: f"The address is 7ffd{0x3a10 + 0x18 * n:04x}{block}", PROSE_LOOP_CHARS)


def changing_figures() -> tuple[str, int]:
    rng = random.Random(209)
    block = ("the loss is still not going down, so the learning rate must be too high. Let me lower it and "
             "look at the curve again.\n\n")
    return looping(209, 2000, lambda n: f"At step {rng.randint(0, 9999)} the value is {rng.random():.4f}: {block}",
                   PROSE_LOOP_CHARS)


def alternating_blocks() -> tuple[str, int]:
    first = ("So the answer is 42. But wait, the question asks for the sum of the even terms only, not all "
             "of them, so I have to recount.\n\n")
    second = ("Recounting the even terms gives 42 again, which matches. Hmm, but did I include the last term? "
              "Let me go back.\n\n")
    return looping(210, 2500, lambda n: second if n % 2 else first, PROSE_LOOP_CHARS)


def long_block_1739() -> tuple[str, int]:
    """The issue's long loop: a block of 1,739 characters repeated 12 times."""
    block = reasoning(random.Random(211), 1800)[:1737] + "\n\n"
    head = reasoning(random.Random(212), 2500)
    return head + block * 12, len(head)


def long_block_4000() -> tuple[str, int]:
    """A block of 4,000 characters, the longest the rule reads, repeated until the window holds 8."""
    block = reasoning(random.Random(213), 4100)[:3998] + "\n\n"
    return looping(214, 2000, lambda n: block, 2000 + 9 * 4000)


def paragraph_counter() -> tuple[str, int]:
    """Three paragraphs of reasoning with an attempt counter, over and over (a block of ~1,100 characters)."""
    paragraphs = reasoning(random.Random(215), 1000)
    return looping(216, 3000, lambda n: f"Attempt {n + 2}.\n\n{paragraphs}", PROSE_LOOP_CHARS)


def markdown_reasoning() -> tuple[str, int]:
    block = ("**Wait**, let me re-check `parse_header()`: it returns `None` when the buffer is empty, so the "
             "caller in `main.py` must handle that. Hmm, the test `test_empty_input` expects a `ValueError` "
             "instead, so one of them is wrong.\n\n")
    return looping(217, 2500, lambda n: block, PROSE_LOOP_CHARS)


def chinese_paragraph() -> tuple[str, int]:
    block = ("等一下，我需要再检查一下这个函数的返回值。如果缓存已经过期，我们应该重新计算，而不是直接返回旧的结果。"
             "让我再看一遍代码。\n\n")
    return looping(218, 2000, lambda n: block, PROSE_LOOP_CHARS // 2)


def sim_loop() -> tuple[str, int]:
    """The simulator's own loop (simulator): a passage of its word pieces over and over."""
    source = TextSource(219, (1500, 80))
    text = source.take(9000)
    start = len(TextSource(219).take(1500))
    return text[:PROSE_LOOP_CHARS], start


def zeros_forever() -> tuple[str, int]:
    return looping(220, 2000, lambda n: "0, ", STRUCTURED_LOOP_CHARS)


def json_line_forever() -> tuple[str, int]:
    line = '  {"id": 7, "name": "item", "tags": ["a", "b"], "price": 9.99},\n'
    return looping(221, 2000, lambda n: line, STRUCTURED_LOOP_CHARS)


# name: (build, reported in the issue)
BUILDS: dict[str, tuple[Callable[[], tuple[str, int]], bool]] = {
    "exact_paragraph": (exact_paragraph, False),
    "exact_short_line": (exact_short_line, False),
    "counter_digits": (counter_digits, False),
    "counter_short_line": (counter_short_line, False),
    "counter_words": (counter_words, True),
    "counter_ordinals": (counter_ordinals, False),
    "counter_letters": (counter_letters, True),
    "counter_hex": (counter_hex, True),
    "counter_bare_hex": (counter_bare_hex, False),
    "changing_figures": (changing_figures, False),
    "alternating_blocks": (alternating_blocks, False),
    "long_block_1739x12": (long_block_1739, True),
    "long_block_4000": (long_block_4000, False),
    "paragraph_counter": (paragraph_counter, False),
    "markdown_reasoning": (markdown_reasoning, False),
    "chinese_paragraph": (chinese_paragraph, False),
    "sim_loop": (sim_loop, False),
    "zeros_forever": (zeros_forever, False),
    "json_line_forever": (json_line_forever, False),
}
