"""The simulator's word pieces and the reproducible text made of them.

One token is one piece of VOCAB; WORDS also make the string values of tool-call arguments
(simulator.script). A looping reply (`--loop-rate`) repeats one block of pieces that opens with one of
the openers Qwen3 loops on.
"""

from __future__ import annotations

import random

# Openers of a looping passage, as Qwen3's repetition failures start.
LOOP_OPENERS = ("\n\nWait,", "\n\nHmm,", "\n\nLet me check again:", "\n\nSo", "\n\nActually,")

WORDS = (
    "the", "a", "we", "need", "to", "check", "whether", "this", "value", "is", "correct", "so", "let",
    "me", "think", "about", "it", "again", "first", "then", "consider", "case", "where", "input", "has",
    "two", "parts", "and", "each", "one", "maps", "onto", "output", "model", "data", "function", "returns",
    "list", "of", "items", "in", "order", "that", "means", "answer", "should", "be", "clear", "user",
    "wants", "short", "reply", "with", "example", "code", "file", "path", "result", "step", "next",
    "because", "if", "not", "but", "also", "maybe", "simpler", "approach", "works", "here", "number",
    "string", "key", "table", "query", "server", "request", "token", "batch", "cache", "error", "retry",
    "café", "naïve", "数据", "模型", "—", "λ", "π", "über",
)
_PUNCT = (".", ",", ".", ",", ":", "?", "\n\n", "\n", " (", ")", " `x`", " 42", " 3.14")
# Word pieces: most words carry their leading space; a few are split so that sub-word tokens occur.
VOCAB: tuple[str, ...] = (
    tuple(" " + w for w in WORDS)
    + tuple(" " + w for w in WORDS[:40])
    + ("ing", "ed", "s", "ly", "er")
    + _PUNCT
)


class TextSource:
    """Reproducible word-piece text, produced lazily so a 30K-token reply costs memory only when read.
    With a loop, from its onset on the text is one block of pieces over and over."""

    __slots__ = ("_block", "_loop", "_rng", "_taken")

    def __init__(self, seed: int, loop: tuple[int, int] | None = None) -> None:
        self._rng = random.Random(seed)
        self._loop = loop
        self._block: tuple[str, ...] = ()
        self._taken = 0

    def take(self, n: int) -> str:
        if n <= 0:
            return ""
        start = self._taken
        self._taken += n
        if self._loop is None or self._taken <= self._loop[0]:
            return "".join(self._rng.choices(VOCAB, k=n))
        onset, size = self._loop
        fresh = max(0, onset - start)
        head = "".join(self._rng.choices(VOCAB, k=fresh))
        if not self._block:
            self._block = (self._rng.choice(LOOP_OPENERS), *self._rng.choices(VOCAB, k=size - 1))
        begin = start + fresh - onset
        looped = (self._block[i % size] for i in range(begin, begin + n - fresh))
        return head + "".join(looped)
