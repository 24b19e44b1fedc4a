"""How a model writes, for the loop corpus: varied reasoning (`reasoning`), a paragraph of it that a loop
repeats (`PARAGRAPH`), counters in words (`number_words`), and a loop run after a normal opening
(`looping`). Every text is built from its own seeded generator, so the corpus is the same on every run."""

from __future__ import annotations

import random
from collections.abc import Callable

# --- reasoning, as a thinking model writes it -----------------------------------------------------------

SUBJECTS = ("the migration", "the parser", "the cache layer", "the test fixture", "the schema", "the retry loop",
            "the request handler", "the config loader", "the export step", "the seed script", "the query",
            "the serializer", "the worker pool", "the CLI", "the index")
VERBS = ("reads", "writes", "validates", "returns", "skips", "rejects", "sorts", "batches", "caches", "logs")
OBJECTS = ("every row", "the primary key", "an empty list", "the timestamp", "the user's input", "the header",
           "a default value", "the last page", "duplicate ids", "null fields", "the whole file", "one record")
OPENERS = ("Okay, so", "Let me think.", "Hmm,", "Right,", "Now,", "Also,", "But", "So", "First,", "Then",
           "Actually,", "Good:", "Next,", "One more thing:", "To be safe,")
ASIDES = ("which is what the user asked for", "so nothing breaks downstream", "as the docs say",
          "if I read the code right", "and that matters for the tests", "because the ids must stay unique",
          "so the output stays readable", "otherwise the import fails", "and the format is fixed")


def reasoning(rng: random.Random, chars: int) -> str:
    """Varied thinking of about `chars` characters: sentences built from parts, paragraphs now and then."""
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = (f"{rng.choice(OPENERS)} {rng.choice(SUBJECTS)} {rng.choice(VERBS)} "
                    f"{rng.choice(OBJECTS)}, {rng.choice(ASIDES)}.")
        if rng.random() < 0.3:
            sentence += f" I need {rng.randint(2, 40)} of them, not {rng.randint(41, 90)}."
        sentence += "\n\n" if rng.random() < 0.25 else " "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars].rstrip() + "\n\n"


PARAGRAPH = ("Wait, I need to double-check the boundary condition here. If the list is empty, the loop "
              "never runs and we return the initial value, which is zero. But the caller expects None in "
              "that case, so the test would fail. Let me reconsider: maybe I should check the length first "
              "and return early. Actually, the original code already does that on line 12, so the problem "
              "must be somewhere else. Let me look at the parser again.\n\n")


def looping(seed: int, head_chars: int, blocks: Callable[[int], str], total: int) -> tuple[str, int]:
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


def number_words(n: int) -> str:
    """A number below a thousand in English words: 21 is "twenty-one", 105 "one hundred and five"."""
    units = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
          "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
    tens = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
    if n < 20:
        return units[n]
    if n < 100:
        return tens[n // 10] + ("-" + units[n % 10] if n % 10 else "")
    rest = n % 100
    return units[n // 100] + " hundred" + (" and " + number_words(rest) if rest else "")
