"""More of the loop corpus (bench.loop_corpus merges these cases into its own): the ordinary long answers
an eager loop stop cut, at the sizes they had, and the loops the exact and counter rules never found, run
to 65,536 characters (max_tokens). Deterministic: every case is built from its own seeded generator.

Asked for (legitimate): numbered checklists and runbooks of 450-500 items, counting to 1,000 in words, a
365-line day plan, templated CSV, 1,200 test-log lines, numbered legal articles in Chinese, a times table in
words (prose whose counters move, 17-18K characters); a JSON array of strings; 40 lorem-ipsum paragraphs and
a line asked for 400 times (~9K, repeated exactly); a zero-filled C array, a blank base64 PNG, identical
code lines (~33K, structured text repeated exactly).

Missed loops: a paragraph with one word changed every repeat (sampling drift), every other repeat, or one
repeat in five; three paragraphs cycling in random order; a counter in markdown bold (`**Step N:**`), in a
nested list, in LaTeX; a two-letter counter ("Case (aa)", "(ab)", ...).
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable

from bench.loop_corpus.writing import PARAGRAPH, looping, number_words, reasoning

LOOP_CHARS = 65_536  # a loop runs to max_tokens: 16,384 tokens at ~4 characters a token

_TASKS = ("back up", "restart", "drain", "patch", "verify", "rotate the keys of", "check the disk of",
          "update the agent on", "reboot", "snapshot")


def _reply(seed: int, think: int, intro: str, body: str) -> str:
    """Some thinking, the intro, the answer, and a one-line close: a complete reply ends soon after its list."""
    return reasoning(random.Random(seed), think) + intro + "\n\n" + body + "\n\nLet me know if you need more.\n"


def _sized(text: str, size: int) -> str:
    """`text` cut or padded (with its own lines again) to `size` characters."""
    while len(text) < size:
        text += text
    return text[:size]


# --- asked for: prose whose counters move (17-18K characters) ----------------------------------------------

def checklist_480() -> str:
    """A numbered checklist of 480 items, one template (about 17,500 characters)."""
    items = "".join(f"{i}. Back up server {i}, then tick it off.\n" for i in range(1, 481))
    return _reply(301, 600, "The checklist, one line per server:", items)


def runbook_450() -> str:
    """A runbook of 450 numbered steps that differ only in their counters (about 17,500 characters)."""
    steps = "".join(f"Step {i}: drain node {i}, wait until it rejoins.\n" for i in range(1, 451))
    return _reply(302, 600, "The runbook:", steps)


def count_to_1000_words() -> str:
    """Counting from one to a thousand in words, comma-separated (about 18,000 characters with the opening)."""
    def words(n: int) -> str:
        return "one thousand" if n == 1000 else number_words(n).replace(" and ", " ")

    return _reply(303, 300, "Counting:", ", ".join(words(n) for n in range(1, 1001)) + ".")


def day_plan_365() -> str:
    """A 365-line day plan: one line a day, the same words, the day and minutes moving (about 17,500)."""
    days = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
    lines = "".join(f"Day {d}: {days[d % 7]}, walk for {20 + d % 30} minutes, then stretch.\n" for d in range(1, 366))
    return _reply(304, 600, "Your plan for the year:", lines)


def templated_csv() -> str:
    """Templated CSV: 420 rows of one template with moving ids (about 17,500 characters)."""
    rows = "".join(f"{i},user{i},user{i}@example.com,active\n" for i in range(1000, 1450))
    return _reply(305, 600, "The CSV:", "id,login,email,status\n" + rows)


def test_log_1200() -> str:
    """1,200 lines of a test log, TAP style (about 17,500 characters)."""
    lines = "".join(f"test case {i} passed\n" for i in range(1, 1201))
    return _reply(306, 300, "The log:", lines)


def _chinese_numeral(n: int) -> str:
    digits = "零一二三四五六七八九"
    out = ""
    if n >= 100:
        out += digits[n // 100] + "百"
        if n % 100 and n % 100 < 10:
            out += "零"
    if n % 100 >= 10:
        out += ("" if n < 20 else digits[n % 100 // 10]) + "十"
    if n % 10:
        out += digits[n % 10]
    return out


def legal_articles_chinese() -> str:
    """Numbered legal articles in Chinese, one template (about 17,500 characters)."""
    body = "当事人应当按照约定全面履行自己的义务，不得擅自变更或者解除合同。\n"
    articles = "".join(f"第{_chinese_numeral(n)}条　{body}" for n in range(1, 431))
    return _reply(307, 600, "条文如下：", articles)


def times_table_words() -> str:
    """A times table in words, 1 to 20 by 1 to 20 (about 17,500 characters)."""
    say = number_words
    lines = "".join(f"{say(a)} times {say(b)} is {say(a * b)}.\n"
                    for a in range(1, 21) for b in range(1, 21))
    return _reply(308, 300, "The table:", _sized(lines, 17_000))


def json_array_strings() -> str:
    """A JSON array of 420 strings of one template (read as prose; about 17,500 characters)."""
    items = ", ".join(f'"Reminder {i}: water the plants in the hall"' for i in range(1, 421))
    return _reply(309, 600, "The reminders as JSON:", f"[{items}]")


# --- asked for: repeated exactly (~9K prose, ~33K structured) ------------------------------------------------

_LOREM = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
          "et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut "
          "aliquip ex ea commodo consequat.\n\n")


def lorem_ipsum_40() -> str:
    """Forty lorem-ipsum paragraphs, the same one (about 9,500 characters)."""
    return _reply(310, 300, "Placeholder text, 40 paragraphs:", _LOREM * 40)


def line_400_times() -> str:
    """A line the user asked for 400 times (about 9,000 characters)."""
    return _reply(311, 200, "As requested, 400 times:", "All work and no play.\n" * 400)


def zero_c_array() -> str:
    """A zero-filled C array of 11,000 ints (about 33,000 characters)."""
    return _reply(312, 300, "The buffer:", "```c\nint buffer[11000] = {" + "0, " * 10999 + "0};\n```")


def blank_png_base64() -> str:
    """A blank PNG as a base64 data URI (a header, then zero bytes; about 33,000 characters)."""
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(24_400)
    return _reply(313, 300, "The image:", f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}">')


def identical_code_lines() -> str:
    """A function of 1,500 identical code lines (about 33,000 characters)."""
    return _reply(314, 300, "The unrolled loop:", "```python\ndef spin():\n" + "    tick(clock)\n" * 2050 + "```")


ASKED: dict[str, Callable[[], str]] = {
    "checklist_480": checklist_480,
    "runbook_450": runbook_450,
    "count_to_1000_words": count_to_1000_words,
    "day_plan_365": day_plan_365,
    "templated_csv": templated_csv,
    "test_log_1200": test_log_1200,
    "legal_articles_chinese": legal_articles_chinese,
    "times_table_words": times_table_words,
    "json_array_strings": json_array_strings,
    "lorem_ipsum_40": lorem_ipsum_40,
    "line_400_times": line_400_times,
    "zero_c_array": zero_c_array,
    "blank_png_base64": blank_png_base64,
    "identical_code_lines": identical_code_lines,
}


# --- loops the exact and counter rules missed (65,536 characters) ---------------------------------------------

_DRIFT_WORDS = ("again", "now", "first", "still", "really", "carefully", "quickly", "maybe", "once", "also")


def _drifting(seed: int, every: int) -> tuple[str, int]:
    """The paragraph over and over, one of its words replaced in every `every`-th repeat (sampling drift)."""
    rng = random.Random(seed)
    words = PARAGRAPH.split(" ")

    def block(n: int) -> str:
        if n % every:
            return PARAGRAPH
        changed = list(words)
        changed[rng.randrange(1, len(words) - 1)] = rng.choice(_DRIFT_WORDS)
        return " ".join(changed)

    return looping(seed, 3000, block, LOOP_CHARS)


def drift_every_repeat() -> tuple[str, int]:
    """A paragraph loop with one word changed every repeat."""
    return _drifting(401, 1)


def drift_every_other_repeat() -> tuple[str, int]:
    """A paragraph loop with one word changed every other repeat."""
    return _drifting(402, 2)


def drift_one_in_five() -> tuple[str, int]:
    """A paragraph loop with one word changed one repeat in five."""
    return _drifting(403, 5)


def three_paragraphs_shuffled() -> tuple[str, int]:
    """Three paragraphs cycling in random order."""
    rng = random.Random(404)
    paragraphs = [reasoning(random.Random(405 + k), 500) for k in range(3)]
    return looping(404, 3000, lambda n: rng.choice(paragraphs), LOOP_CHARS)


def bold_step_counter() -> tuple[str, int]:
    """A counter loop in markdown bold: `**Step N:**`."""
    block = "re-check the cache key and see whether the entry is stale before the next request.\n\n"
    return looping(406, 2500, lambda n: f"**Step {n + 1}:** {block}", LOOP_CHARS)


def nested_list_counter() -> tuple[str, int]:
    """A counter loop in a nested list."""
    return looping(407, 2500, lambda n: (f"- Attempt {n + 1}\n  - read the config again\n  - compare it with "
                                         "the server's settings\n  - the timeout is still wrong\n"), LOOP_CHARS)


def latex_counter() -> tuple[str, int]:
    """A counter loop in LaTeX."""
    return looping(408, 2500, lambda n: (f"\\item Case $n = {n + 3}$: substitute into \\eqref{{eq:main}} and "
                                         f"check that $a_{{{n + 3}}} \\le \\frac{{1}}{{2}} a_{{{n + 2}}}$.\n"),
                   LOOP_CHARS)


def two_letter_counter() -> tuple[str, int]:
    """A two-letter counter: "Case (aa)", "(ab)", ..."""
    def label(n: int) -> str:
        return chr(97 + n // 26 % 26) + chr(97 + n % 26)

    block = " the parser rejects the input again, so let me try the next case and see what it does.\n"
    return looping(409, 2500, lambda n: f"Case ({label(n)}):{block}", LOOP_CHARS)


MISSED: dict[str, Callable[[], tuple[str, int]]] = {
    "drift_every_repeat": drift_every_repeat,
    "drift_every_other_repeat": drift_every_other_repeat,
    "drift_one_in_five": drift_one_in_five,
    "three_paragraphs_shuffled": three_paragraphs_shuffled,
    "bold_step_counter": bold_step_counter,
    "nested_list_counter": nested_list_counter,
    "latex_counter": latex_counter,
    "two_letter_counter": two_letter_counter,
}
