"""The loop corpus's legitimate replies: what a coding agent's data set is full of and repeats by nature
(SQL INSERTs, CSV, JSON arrays of objects with ids, markdown tables over many days, enumerations, code with
repeated lines, base64 of zero bytes, a list of zeros, a repeated JSON object of config, ASCII boxes, test and
log output, hex dumps), in sizes up to about 20,000 characters. The loop stop must never stop one.
`BUILDS` maps each case's name to its builder and whether the issue "Guards that are right" reported it."""

from __future__ import annotations

import base64
import datetime
import random
from collections.abc import Callable

from bench.loop_corpus.writing import OBJECTS, SUBJECTS, VERBS, reasoning


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
    lines = "".join(f"{i}. {rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)}.\n"
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
BUILDS: dict[str, tuple[Callable[[], str], bool]] = {
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
