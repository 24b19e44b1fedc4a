"""A labelled corpus for the loop stop: replies that repeat by nature and must never be stopped, and replies
that loop and must be. Deterministic (every case is built from its own seeded generator).

Each case is a reply as the detector reads it, reasoning then content, written the way a model writes
them: a few paragraphs of thinking, then the answer with its code block, then a closing remark. The
legitimate ones are what a coding agent's data set is full of (SQL INSERTs, CSV, JSON arrays of objects
with ids, markdown tables over many days, enumerations, code with repeated lines, base64 of zero bytes, a
list of zeros, a repeated JSON object of config, ASCII boxes, test and log output, hex dumps), in sizes
up to about 20,000 characters. The loops start after a normal opening (`loop_start`) and run the way a
model runs until max_tokens: exact repeats, repeats whose counter moves in digits, words, letters or hex,
two blocks alternating, long blocks (1,739 characters x 12), paragraphs of reasoning, in English and in
Chinese; and degenerate loops of structured text (zeros, one JSON line) that only the longest floor
catches. `issue` marks the cases reported in the issue "Guards that are right" (cases 1 and 2), with the
sizes it gave.

The later issue's classes (replies asked to repeat, at 9-33K characters, and loops the exact and counter
rules miss, at 65,536) are in tests/loop_corpus_asked.py and merged here, `group` "asked" or "missed".

    from tests.loop_corpus import LEGITIMATE, LOOPS
"""

from __future__ import annotations

import base64
import datetime
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from simulator.script import TextSource


@dataclass(frozen=True)
class Case:
    """One reply: its text (reasoning + content), and where its loop starts (None: it does not loop)."""

    name: str
    text: str
    loop_start: int | None = None
    issue: bool = False  # reported in the issue, at the size it gave
    what: str = ""
    group: str = ""  # "asked" or "missed": the later issue's classes (tests/loop_corpus_asked.py)

    @property
    def loops(self) -> bool:
        return self.loop_start is not None


# --- reasoning, as a thinking model writes it -----------------------------------------------------------

_SUBJECTS = ("the migration", "the parser", "the cache layer", "the test fixture", "the schema", "the retry loop",
             "the request handler", "the config loader", "the export step", "the seed script", "the query",
             "the serializer", "the worker pool", "the CLI", "the index")
_VERBS = ("reads", "writes", "validates", "returns", "skips", "rejects", "sorts", "batches", "caches", "logs")
_OBJECTS = ("every row", "the primary key", "an empty list", "the timestamp", "the user's input", "the header",
            "a default value", "the last page", "duplicate ids", "null fields", "the whole file", "one record")
_OPENERS = ("Okay, so", "Let me think.", "Hmm,", "Right,", "Now,", "Also,", "But", "So", "First,", "Then",
            "Actually,", "Good:", "Next,", "One more thing:", "To be safe,")
_ASIDES = ("which is what the user asked for", "so nothing breaks downstream", "as the docs say",
           "if I read the code right", "and that matters for the tests", "because the ids must stay unique",
           "so the output stays readable", "otherwise the import fails", "and the format is fixed")


def reasoning(rng: random.Random, chars: int) -> str:
    """Varied thinking of about `chars` characters: sentences built from parts, paragraphs now and then."""
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = (f"{rng.choice(_OPENERS)} {rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} "
                    f"{rng.choice(_OBJECTS)}, {rng.choice(_ASIDES)}.")
        if rng.random() < 0.3:
            sentence += f" I need {rng.randint(2, 40)} of them, not {rng.randint(41, 90)}."
        sentence += "\n\n" if rng.random() < 0.25 else " "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars].rstrip() + "\n\n"


def _sized(head: str, body: str, tail_rng: random.Random, size: int | None) -> str:
    """head + body + a closing remark; with `size`, the remark is cut or lengthened to make exactly that."""
    tail = "\n\n" + reasoning(tail_rng, 400 if size is None else max(0, size - len(head) - len(body)) + 400)
    text = head + body + tail
    if size is None:
        return text.rstrip() + "\n"
    if len(head) + len(body) + 3 > size:
        raise ValueError(f"the body alone is longer than {size:,} characters")
    return text[:size - 1].rstrip() + "." * (size - len(text[:size - 1].rstrip()))


def _reply(seed: int, think: int, intro: str, body: str, size: int | None = None) -> str:
    rng = random.Random(seed)
    return _sized(reasoning(rng, think) + intro + "\n\n", body, random.Random(seed + 1), size)


# --- legitimate replies that repeat by nature -------------------------------------------------------------

def sql_inserts_100() -> str:
    """The issue's 100 SQL INSERTs, 8,112 characters: the rows differ only in their numbers."""
    rng = random.Random(101)
    rows = "".join(f"INSERT INTO orders VALUES ({1000 + i}, {rng.randint(100, 999)}, '2024-03-{i % 28 + 1:02d}', "
                   f"{rng.randint(1000, 9999) / 100:.2f});\n" for i in range(100))
    return _reply(1, 1200, "Here are the 100 rows for the `orders` table:", f"```sql\n{rows}```", 8112)


def json_array_150() -> str:
    """The issue's JSON array of 150 objects with ids, 9,832 characters."""
    rng = random.Random(102)
    items = ",\n".join(f'  {{"id": {i + 100}, "sku": "SKU-{i + 100}", "qty": {rng.randint(10, 99)}, '
                       f'"active": true}}' for i in range(150))
    return _reply(2, 450, "The fixture, 150 products:", f"```json\n[\n{items}\n]\n```", 9832)


def table_60_days() -> str:
    """The issue's 60-day markdown table, 4,232 characters: one row a day, the same words each row."""
    rng = random.Random(103)
    first = datetime.date(2024, 3, 1)
    rows = "".join(f"| {first + datetime.timedelta(days=n)} | {rng.randint(1000, 9999):,} sessions | "
                   f"{rng.randint(10, 99)}.{rng.randint(0, 9)}% | within target |\n" for n in range(60))
    table = "| Date | Traffic | Conversion | Status |\n|---|---|---|---|\n" + rows
    return _reply(3, 400, "Daily figures for the 60 days:", table, 4232)


def table_365_days() -> str:
    """A year of daily figures, one row a day (about 20,000 characters)."""
    rng = random.Random(104)
    rows = "".join(f"| {n + 1:03d} | {rng.randint(100, 999)} | {rng.randint(10, 99)}.{rng.randint(0, 9)} | "
                   f"{rng.choice(('ok', 'ok', 'ok', 'low'))} |\n" for n in range(365))
    return _reply(4, 900, "The full year:", "| day | orders | avg | flag |\n|---:|---:|---:|---|\n" + rows)


def csv_readings() -> str:
    """300 rows of sensor readings as CSV (about 18,000 characters)."""
    rng = random.Random(105)
    rows = "".join(f"2024-05-01T{n // 60:02d}:{n % 60:02d}:00Z,sensor-north-03,{rng.randint(1800, 2599) / 100:.2f},"
                   f"celsius,ok\n" for n in range(300))
    return _reply(5, 800, "Here is the CSV:", f"```csv\ntimestamp,sensor,value,unit,status\n{rows}```")


def json_array_300() -> str:
    """A JSON array of 300 objects with sequential ids and the same fields (about 19,000 characters)."""
    items = ",\n".join(f'  {{"id": {i}, "name": "user_{i:04d}", "role": "viewer", "quota": 100}}'
                       for i in range(1000, 1300))
    return _reply(6, 600, "The seed data:", f"```json\n[\n{items}\n]\n```")


def enumeration_shards() -> str:
    """A numbered run-book, one line per shard, words and counters only (about 9,000 characters)."""
    lines = "".join(f"- Step {i}: run the migration for shard {i:02d}\n" for i in range(1, 201))
    return _reply(7, 700, "The steps, in order:", lines)


def enumeration_items() -> str:
    """A numbered list of different items (about 6,000 characters)."""
    rng = random.Random(108)
    lines = "".join(f"{i}. {rng.choice(_SUBJECTS).capitalize()} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}.\n"
                    for i in range(1, 161))
    return _reply(8, 500, "What each part does:", lines)


def code_option_table() -> str:
    """A Python table of options that differ only in their numbers (about 15,000 characters)."""
    rows = "".join(f'    Option(name="opt_{i:03d}", default={i * 10}, help="Option {i:03d} of the parser"),\n'
                   for i in range(180))
    return _reply(9, 800, "The generated module:", f"```python\nOPTIONS = [\n{rows}]\n```")


def code_register_init() -> str:
    """C that clears a buffer one line per register (about 10,000 characters)."""
    lines = "".join(f"    regs[0x{i:03x}] = 0x00;\n" for i in range(400))
    return _reply(10, 600, "The reset routine:", f"```c\nvoid reset(void) {{\n{lines}}}\n```")


def code_test_functions() -> str:
    """Sixty near-identical test functions (about 12,000 characters)."""
    rng = random.Random(111)
    funcs = "".join(f"def test_parse_case_{i:02d}() -> None:\n    assert parse({i}) == {rng.randint(0, 999)}\n"
                    f"    assert parse({i}, strict=True) == {rng.randint(0, 999)}\n\n\n" for i in range(60))
    return _reply(11, 500, "The tests:", f"```python\n{funcs}```")


def base64_zero_bytes() -> str:
    """The issue's zero-byte base64: an 8 KiB buffer of zeros, 76 characters a line (about 11,000)."""
    encoded = base64.encodebytes(bytes(8192)).decode()
    return _reply(12, 700, "The fixture file, base64:", f"```\n{encoded}```")


def base64_zero_bytes_16k() -> str:
    """A 12 KiB zero buffer as one base64 string in JSON (about 16,000 characters)."""
    encoded = base64.b64encode(bytes(12288)).decode()
    return _reply(13, 600, "The request body:", f'```json\n{{"name": "blank.bin", "data": "{encoded}"}}\n```')


def list_of_zeros() -> str:
    """The issue's list of zeros: 2,048 of them in a Python list (about 6,000 characters)."""
    return _reply(14, 600, "The initial state:", "```python\nstate = [" + "0, " * 2047 + "0]\n```")


def matrix_of_zeros() -> str:
    """A 48 x 48 matrix of zeros, one row a line (about 14,000 characters)."""
    row = "    [" + ", ".join(["0.0"] * 48) + "],\n"
    return _reply(15, 500, "The zero matrix:", "```python\nM = [\n" + row * 48 + "]\n```")


def repeated_json_config() -> str:
    """The issue's repeated JSON object: 40 identical worker entries of a config (about 7,000 characters)."""
    entry = '  {"pool": "default", "replicas": 2, "cpu": "500m", "memory": "512Mi", "restart": "always"},\n'
    return _reply(16, 600, "The config, one entry per worker:", "```json\n[\n" + entry * 40 + "]\n```")


def repeated_yaml_config() -> str:
    """A YAML list of 150 services that differ only in their numbers (about 11,000 characters)."""
    items = "".join(f"  - name: worker-{i:03d}\n    port: {8000 + i}\n    replicas: 2\n" for i in range(150))
    return _reply(17, 500, "The compose file:", f"```yaml\nservices:\n{items}```")


def ascii_box() -> str:
    """The issue's ASCII box: a 70-line frame with an empty inside (about 5,000 characters)."""
    width = 68
    box = "+" + "-" * width + "+\n" + ("|" + " " * width + "|\n") * 70 + "+" + "-" * width + "+\n"
    return _reply(18, 500, "The layout, empty for now:", f"```\n{box}```")


def ascii_grid() -> str:
    """An empty 12 x 30 grid of ASCII cells (about 11,000 characters)."""
    line = "+" + "---+" * 30 + "\n"
    cells = "|" + "   |" * 30 + "\n"
    return _reply(19, 500, "The board:", "```\n" + line + (cells + line) * 45 + "```")


def unicode_box() -> str:
    """A frame of box-drawing characters with an empty inside (about 5,000 characters)."""
    width = 60
    box = "┌" + "─" * width + "┐\n" + ("│" + " " * width + "│\n") * 70 + "└" + "─" * width + "┘\n"
    return _reply(20, 500, "The dialog's frame:", f"```\n{box}```")


def pytest_output() -> str:
    """pytest -v output of 250 parametrised cases that all pass (about 20,000 characters)."""
    lines = "".join(f"tests/test_api.py::test_endpoint[case_{i:03d}] PASSED{' ' * 24}[{i * 100 // 250:3d}%]\n"
                    for i in range(250))
    return _reply(21, 400, "The run:", f"```\n{lines}```")


def log_lines() -> str:
    """Two hundred worker log lines that differ in their numbers (about 14,000 characters)."""
    rng = random.Random(122)
    lines = "".join(f"2024-05-01 12:{n // 60:02d}:{n % 60:02d},{rng.randint(100, 999)} INFO worker-3 processed batch "
                    f"{4000 + n} in 0.{rng.randint(10, 99)}s\n" for n in range(200))
    return _reply(22, 400, "The log:", f"```\n{lines}```")


def hex_dump() -> str:
    """An xxd dump of a zero-filled region: the offsets count, the bytes do not (about 17,000 characters)."""
    lines = "".join(f"{i * 16:08x}: 0000 0000 0000 0000 0000 0000 0000 0000  ................\n"
                    for i in range(256))
    return _reply(23, 400, "The dump of the header block:", f"```\n{lines}```")


def song_with_a_counter() -> str:
    """Prose whose verses differ only in their counter: "99 bottles of beer" (about 12,000 characters)."""
    def bottles(n: int) -> str:
        return f"{n} bottle{'s' if n != 1 else ''}" if n else "no more bottles"

    verses = "".join(f"{bottles(n)} of beer on the wall, {bottles(n)} of beer.\nTake one down and pass it around, "
                     f"{bottles(n - 1)} of beer on the wall.\n\n" for n in range(99, 0, -1))
    return _reply(24, 300, "Here is the song:", verses)


def sentence_100_times() -> str:
    """A line the user asked for a hundred times (about 4,000 characters)."""
    return _reply(25, 300, "As requested:", "I will not push to main without a review.\n" * 100)


def varied_reasoning() -> str:
    """A long thinking trace that never repeats a block (about 20,000 characters)."""
    return reasoning(random.Random(26), 20_000)


# name: (build, reported in the issue)
_LEGITIMATE: dict[str, tuple[Callable[[], str], bool]] = {
    "sql_inserts_100": (sql_inserts_100, True),
    "json_array_150_ids": (json_array_150, True),
    "table_60_days": (table_60_days, True),
    "list_of_zeros": (list_of_zeros, True),
    "base64_zero_bytes": (base64_zero_bytes, True),
    "repeated_json_config": (repeated_json_config, True),
    "ascii_box": (ascii_box, True),
    "table_365_days": (table_365_days, False),
    "csv_readings": (csv_readings, False),
    "json_array_300_ids": (json_array_300, False),
    "enumeration_shards": (enumeration_shards, False),
    "enumeration_items": (enumeration_items, False),
    "code_option_table": (code_option_table, False),
    "code_register_init": (code_register_init, False),
    "code_test_functions": (code_test_functions, False),
    "base64_zero_bytes_16k": (base64_zero_bytes_16k, False),
    "matrix_of_zeros": (matrix_of_zeros, False),
    "repeated_yaml_config": (repeated_yaml_config, False),
    "ascii_grid": (ascii_grid, False),
    "unicode_box": (unicode_box, False),
    "pytest_output": (pytest_output, False),
    "log_lines": (log_lines, False),
    "hex_dump": (hex_dump, False),
    "song_with_a_counter": (song_with_a_counter, False),
    "sentence_100_times": (sentence_100_times, False),
    "varied_reasoning": (varied_reasoning, False),
}


# --- loops --------------------------------------------------------------------------------------------------

PROSE_LOOP_CHARS = 32_768  # a prose loop's reply, in characters: the model runs on until max_tokens
STRUCTURED_LOOP_CHARS = 40_960  # a structured loop needs the whole 32,768-character window to count

_PARAGRAPH = ("Wait, I need to double-check the boundary condition here. If the list is empty, the loop "
              "never runs and we return the initial value, which is zero. But the caller expects None in "
              "that case, so the test would fail. Let me reconsider: maybe I should check the length first "
              "and return early. Actually, the original code already does that on line 12, so the problem "
              "must be somewhere else. Let me look at the parser again.\n\n")


def _looping(seed: int, head_chars: int, blocks: Callable[[int], str], total: int) -> tuple[str, int]:
    """A normal opening, then blocks(0), blocks(1), ... until `total` characters; and where the loop starts."""
    head = reasoning(random.Random(seed), head_chars)
    out = [head]
    size = len(head)
    n = 0
    while size < total:
        block = blocks(n)
        out.append(block)
        size += len(block)
        n += 1
    return "".join(out)[:total], len(head)


def _number_words(n: int) -> str:
    units = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
             "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
    tens = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
    if n < 20:
        return units[n]
    if n < 100:
        return tens[n // 10] + ("-" + units[n % 10] if n % 10 else "")
    rest = n % 100
    return units[n // 100] + " hundred" + (" and " + _number_words(rest) if rest else "")


def _letters(n: int) -> str:
    """A, B, ..., Z, AA, AB, ..."""
    return chr(65 + n) if n < 26 else _letters(n // 26 - 1) + chr(65 + n % 26)


def exact_paragraph() -> tuple[str, int]:
    return _looping(201, 3000, lambda n: _PARAGRAPH, PROSE_LOOP_CHARS)


def exact_short_line() -> tuple[str, int]:
    return _looping(202, 2000, lambda n: "Wait, let me check that again.\n", PROSE_LOOP_CHARS)


def counter_digits() -> tuple[str, int]:
    block = "let me re-check the cache key and see whether the entry is stale before the next request.\n"
    return _looping(203, 2500, lambda n: f"Step {n + 1}: {block}", PROSE_LOOP_CHARS)


def counter_short_line() -> tuple[str, int]:
    return _looping(222, 2000, lambda n: f"Retry {n + 1}: the cache key is still stale.\n", PROSE_LOOP_CHARS)


def counter_words() -> tuple[str, int]:
    block = "let me re-check the cache key and see whether the entry is stale before the next request.\n"
    return _looping(204, 2500, lambda n: f"Step {_number_words(n + 1)}: {block}", PROSE_LOOP_CHARS)


def counter_ordinals() -> tuple[str, int]:
    ordinals = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
    block = ("time I trace the call, the handler returns early because the token is missing, so I go back "
             "to the middleware and read it again.\n\n")
    return _looping(205, 2000, lambda n: f"The {ordinals[n % 10]} {block}", PROSE_LOOP_CHARS)


def counter_letters() -> tuple[str, int]:
    block = (": the timeout comes from the proxy, not from the server. Let me verify that by reading the proxy "
             "config once more and comparing it with the server's settings.\n\n")
    return _looping(206, 2500, lambda n: f"Hypothesis {_letters(n)}{block}", PROSE_LOOP_CHARS)


def counter_hex() -> tuple[str, int]:
    block = (": the value there is still the old pointer, so the free did not happen yet. Let me step "
             "forward and look at the next slot.\n")
    return _looping(207, 2500, lambda n: f"Checking offset 0x{0x1f00 + 0x40 * n:x}{block}", PROSE_LOOP_CHARS)


def counter_bare_hex() -> tuple[str, int]:
    block = (" again: it points into the freed page, so the use-after-free must come from the second "
             "callback. Let me read the callback once more.\n")
    return _looping(208, 2500, lambda n: f"The address is 7ffd{0x3a10 + 0x18 * n:04x}{block}", PROSE_LOOP_CHARS)


def changing_figures() -> tuple[str, int]:
    rng = random.Random(209)
    block = ("the loss is still not going down, so the learning rate must be too high. Let me lower it and "
             "look at the curve again.\n\n")
    return _looping(209, 2000, lambda n: f"At step {rng.randint(0, 9999)} the value is {rng.random():.4f}: {block}",
                    PROSE_LOOP_CHARS)


def alternating_blocks() -> tuple[str, int]:
    first = ("So the answer is 42. But wait, the question asks for the sum of the even terms only, not all "
             "of them, so I have to recount.\n\n")
    second = ("Recounting the even terms gives 42 again, which matches. Hmm, but did I include the last term? "
              "Let me go back.\n\n")
    return _looping(210, 2500, lambda n: second if n % 2 else first, PROSE_LOOP_CHARS)


def long_block_1739() -> tuple[str, int]:
    """The issue's long loop: a block of 1,739 characters repeated 12 times."""
    block = reasoning(random.Random(211), 1800)[:1737] + "\n\n"
    head = reasoning(random.Random(212), 2500)
    return head + block * 12, len(head)


def long_block_4000() -> tuple[str, int]:
    """A block of 4,000 characters, the longest the rule reads, repeated until the window holds 8."""
    block = reasoning(random.Random(213), 4100)[:3998] + "\n\n"
    return _looping(214, 2000, lambda n: block, 2000 + 9 * 4000)


def paragraph_counter() -> tuple[str, int]:
    """Three paragraphs of reasoning with an attempt counter, over and over (a block of ~1,100 characters)."""
    paragraphs = reasoning(random.Random(215), 1000)
    return _looping(216, 3000, lambda n: f"Attempt {n + 2}.\n\n{paragraphs}", PROSE_LOOP_CHARS)


def markdown_reasoning() -> tuple[str, int]:
    block = ("**Wait**, let me re-check `parse_header()`: it returns `None` when the buffer is empty, so the "
             "caller in `main.py` must handle that. Hmm, the test `test_empty_input` expects a `ValueError` "
             "instead, so one of them is wrong.\n\n")
    return _looping(217, 2500, lambda n: block, PROSE_LOOP_CHARS)


def chinese_paragraph() -> tuple[str, int]:
    block = ("等一下，我需要再检查一下这个函数的返回值。如果缓存已经过期，我们应该重新计算，而不是直接返回旧的结果。"
             "让我再看一遍代码。\n\n")
    return _looping(218, 2000, lambda n: block, PROSE_LOOP_CHARS // 2)


def sim_loop() -> tuple[str, int]:
    """The simulator's own loop (simulator): a passage of its word pieces over and over."""
    source = TextSource(219, (1500, 80))
    text = source.take(9000)
    start = len(TextSource(219).take(1500))
    return text[:PROSE_LOOP_CHARS], start


def zeros_forever() -> tuple[str, int]:
    return _looping(220, 2000, lambda n: "0, ", STRUCTURED_LOOP_CHARS)


def json_line_forever() -> tuple[str, int]:
    line = '  {"id": 7, "name": "item", "tags": ["a", "b"], "price": 9.99},\n'
    return _looping(221, 2000, lambda n: line, STRUCTURED_LOOP_CHARS)


# name: (build, reported in the issue)
_LOOPS: dict[str, tuple[Callable[[], tuple[str, int]], bool]] = {
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


@cache
def legitimate() -> tuple[Case, ...]:
    from tests.loop_corpus_asked import ASKED  # it builds on this module's helpers

    return (*(Case(name, build(), None, issue, (build.__doc__ or "").strip())
              for name, (build, issue) in _LEGITIMATE.items()),
            *(Case(name, made(), None, False, (made.__doc__ or "").strip(), "asked") for name, made in ASKED.items()))


@cache
def loops() -> tuple[Case, ...]:
    from tests.loop_corpus_asked import MISSED

    cases = []
    for name, (build, issue) in _LOOPS.items():
        text, start = build()
        cases.append(Case(name, text, start, issue, (build.__doc__ or name.replace("_", " ")).strip()))
    for name, made in MISSED.items():
        text, start = made()
        cases.append(Case(name, text, start, False, (made.__doc__ or "").strip(), "missed"))
    return tuple(cases)


LEGITIMATE = [case.name for case in legitimate()]
LOOPS = [case.name for case in loops()]


def by_name(name: str) -> Case:
    """A case by its name."""
    for found in (*legitimate(), *loops()):
        if found.name == name:
            return found
    raise KeyError(name)
