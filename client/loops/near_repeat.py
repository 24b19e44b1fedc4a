"""Loops that never repeat a block exactly: the audit's second finder (client.audit.loops), for a reply that
ran to its cap. Pure, and whole-reply only (a few milliseconds a reply: never on the stream's hot path).

The exact and counter rules (client.loops.period_search) want the tail to be one block over and over, exactly
or with only its counters changed. A model that loops at its sampling temperature does not oblige: it
changes a word in one repeat of five, or in every one (sampling drift), cycles through three paragraphs in
random order, or numbers its repeats in markdown bold, a nested list, LaTeX or two letters ("Case (ab)").
What such a tail still has is that almost everything in it was said a moment before. So: the last `WINDOW`
characters are read as tokens (words and marks, every counter and every word of two letters as "#":
client.loops.text_kind), each run of `SHINGLE` tokens is a shingle, and a shingle counts as said again when the
same one occurred at most `REACH` tokens earlier. The tail is a near loop when, over its last
`SHARE_OF_WINDOW` of the window, at least `MIN_SAID_AGAIN` of the shingles were said again. One changed word
kills `SHINGLE` shingles of a repeat (about 80 words for a paragraph): drift in every repeat still leaves ~90%
said again; varied reasoning, even built from a few stock phrases, stays under half (bench/loop_corpus has
the figures).

The text cannot tell a near loop from a reply that was asked to repeat (a 500-item checklist, counting to a
thousand in words, CSV rows): their shingles are said again just as much. What tells them apart is how the
reply ended: a loop runs to max_tokens, an answer ends by itself. The audit therefore counts a near loop
only in a reply that ran to its cap, and only flags it (a suspicion) in one that ended with `stop`.
"""

from __future__ import annotations

from dataclasses import dataclass

from client.loops.text_kind import normalise

WINDOW = 32_768  # characters of the tail read
SHINGLE = 6  # tokens per shingle
REACH = 3_000  # tokens back a shingle may have occurred (three paragraphs cycling, a long block)
SHARE_OF_WINDOW = 0.75  # the part of the window that must be said again (the rest is the first repeats)
MIN_SAID_AGAIN = 0.8  # share of that part's shingles said again
_SHORT = {a + b: "#" for a in "abcdefghijklmnopqrstuvwxyz" for b in "abcdefghijklmnopqrstuvwxyz"}
MIN_TOKENS = 2_000  # tokens the tail needs at all (a short reply is not a loop that ran to its cap)


@dataclass(frozen=True, slots=True)
class NearLoop:
    """A tail that keeps saying what it said a moment before."""

    said_again: float  # share of the judged shingles said again
    tokens: int  # tokens judged
    chars: int  # characters read (the window, or the whole reply when shorter)


def said_again(tokens: list[str], reach: int = REACH, shingle: int = SHINGLE) -> list[bool]:
    """Per shingle (one per token position but the last `shingle` - 1): did it occur at most `reach` tokens
    before?"""
    last: dict[tuple[str, ...], int] = {}
    out: list[bool] = []
    for i in range(len(tokens) - shingle + 1):
        key = tuple(tokens[i:i + shingle])
        seen = last.get(key)
        out.append(seen is not None and i - seen <= reach)
        last[key] = i
    return out


def find_near_loop(text: str) -> NearLoop | None:
    """The near loop at the end of `text`, or None."""
    tail = text[-WINDOW:]
    # A word of one or two letters reads as "#" too: a label such as "(ag)" or "(b)" is a counter the
    # normaliser does not know (it reads hex pairs only), and folding "is" or "to" costs varied text little.
    tokens = [_SHORT.get(t, t) if len(t) <= 2 else t for t in normalise(tail).split("\x00")]
    if len(tokens) < MIN_TOKENS:
        return None
    flags = said_again(tokens)
    judged = flags[int(len(flags) * (1 - SHARE_OF_WINDOW)):]
    share = sum(judged) / len(judged)
    return NearLoop(round(share, 3), len(judged), len(tail)) if share >= MIN_SAID_AGAIN else None
