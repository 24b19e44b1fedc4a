"""What a repeated block is, for the loop rule: prose (letters and spaces, almost none of the marks code and
data are made of) or structured text, and the text with its counters (digits, number words, letters, hex,
roman numerals) normalised, so that a loop whose counter moves is still one block. Pure.
"""

from __future__ import annotations

import re

_SAMPLE = 2048  # characters of a block read to classify it

# --- what a block is -------------------------------------------------------------------------------------

_ASCII_LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SPACE = b" \t\n\r\f\v"
# Marks that code and data are made of and prose hardly uses.
_MARKS = b'{}[]<>|=;"\\_/#*+@$%^&~'
_MARK_SET = frozenset(_MARKS.decode())


def is_prose(block: str) -> bool:
    """Does the block read as words? Letters at least 60% (CJK counts), spaces at least 8% (or a script
    without spaces: non-ASCII letters at least 30%), code-and-data marks at most 6%, and no line indented by
    two spaces or a tab.
    Reads the block's last 2,048 characters; a periodic block wraps around, so its first character is read
    after its last too."""
    sample = block[-_SAMPLE:]
    n = len(sample)
    if not n:
        return False
    wrapped = sample[-1] + sample
    if "\n  " in wrapped or "\n\t" in wrapped:
        return False
    if sample.isascii():
        raw = sample.encode()
        letters = n - len(raw.translate(None, _ASCII_LETTERS))
        space = n - len(raw.translate(None, _SPACE))
        marks = n - len(raw.translate(None, _MARKS))
        wide = 0
    else:
        letters = sum(map(str.isalpha, sample))
        space = sum(map(str.isspace, sample))
        marks = sum(c in _MARK_SET for c in sample)
        wide = letters - sum(c.isascii() and c.isalpha() for c in sample)
    return letters >= 0.6 * n and marks <= 0.06 * n and (space >= 0.08 * n or wide >= 0.3 * n)


# --- counters, read as "#" -------------------------------------------------------------------------------

_UNITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_NUMBER_WORDS = frozenset((
    *_UNITS, *_TENS, "hundred", "thousand", "million", "billion",
    "zeroth", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
    "eleventh", "twelfth", *(unit + "th" for unit in _UNITS[13:]), *(ten[:-1] + "ieth" for ten in _TENS),
    "hundredth", "thousandth", "millionth"))
_TOKEN = re.compile(r"\w+|[^\w\s]")
_HEXISH = re.compile(r"(?:0[xX])?[0-9A-Fa-f]*[0-9][0-9A-Fa-f]*|[a-fA-F]{2}|[A-Z]{1,3}|[a-zA-Z]|[ivx]{2,5}|[IVXLC]{2,7}")
_DIGITS = re.compile(r"[0-9]+")
_JOINS = frozenset(("-", "and", "–", "/"))
# A run of counters, joined as _JOINS says: "#" tokens (whole ones: NUL or an end on both sides).
_RUNS = re.compile("(?<![^\x00])#(?:\x00(?:(?:-|and|–|/)\x00)?#(?![^\x00]))+")
_WORD_CACHE: dict[str, str] = {}
_WORD_CACHE_SIZE = 100_000


def _counter_word(word: str) -> str:
    """A word as the counter test reads it: "#" for a counter, else the word with its digit runs as "#"."""
    read = _WORD_CACHE.get(word)
    if read is None:
        counter = _HEXISH.fullmatch(word) is not None or word.lower() in _NUMBER_WORDS
        read = "#" if counter else _DIGITS.sub("#", word)
        if len(_WORD_CACHE) >= _WORD_CACHE_SIZE:
            _WORD_CACHE.clear()
        _WORD_CACHE[word] = read
    return read


def normalise(text: str, starts: list[int] | None = None) -> str:
    """The text as the counter test reads it: its words and marks (not its spacing) joined by NUL, every
    counter as "#", and a run of counters ("twenty-one", "one hundred and two", "2024-01-31") as one "#".
    With `starts`, the start in `text` of each token of the result is appended to it (a slower walk that
    gives the same text)."""
    if starts is None:
        cache = _WORD_CACHE
        words = [cache.get(word) or _counter_word(word) for word in _TOKEN.findall(text)]
        return _RUNS.sub("#", "\x00".join(words))
    out: list[str] = []
    for token in _TOKEN.finditer(text):
        read = _counter_word(token.group())
        if read == "#" and out:
            if out[-1] == "#":
                continue
            if len(out) >= 2 and out[-2] == "#" and out[-1] in _JOINS:
                out.pop()
                starts.pop()
                continue
        out.append(read)
        starts.append(token.start())
    return "\x00".join(out)


# --- periods ---------------------------------------------------------------------------------------------


