"""A PNG histogram of completion lengths, written with the standard library alone (zlib + struct).

Bins are powers of two, because output lengths are heavy-tailed: a linear axis would put every stub
and most replies in one bar. Bars below the short-reply threshold are drawn red, so a stub-ridden run is
visible at a glance. Text uses a built-in 3x5 pixel font (upper case, digits, a little punctuation).
The file is written whole or not at all (`write_whole`).
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path

from client.core.errors import ConfigError, SinkError, no_room

# Each glyph: five rows, one octal digit per row (bit 4 = left pixel, 1 = right pixel).
_FONT = {
    "0": "75557", "1": "26227", "2": "71747", "3": "71317", "4": "55711", "5": "74717", "6": "74757",
    "7": "71222", "8": "75757", "9": "75717", "A": "25755", "B": "65656", "C": "34443", "D": "65556",
    "E": "74647", "F": "74644", "G": "34553", "H": "55755", "I": "72227", "J": "11152", "K": "55655",
    "L": "44447", "M": "57755", "N": "65555", "O": "25552", "P": "65644", "Q": "25563", "R": "65655",
    "S": "34216", "T": "72222", "U": "55557", "V": "55552", "W": "55775", "X": "55255", "Y": "55222",
    "Z": "71247", " ": "00000", ".": "00002", ",": "00024", "(": "24442", ")": "21112", "%": "51245",
    "-": "00700", "+": "02720", "=": "07070", "/": "11244", ":": "02020", "<": "12421", ">": "42124",
}

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
INK: Color = (40, 40, 40)
GRID: Color = (225, 225, 225)
BAR: Color = (70, 110, 190)
STUB: Color = (210, 60, 50)


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self.pixels = bytearray(WHITE * (width * height))

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        row = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            start = (y * self.width + x0) * 3
            self.pixels[start:start + len(row)] = row

    def text(self, x: int, y: int, text: str, color: Color = INK, scale: int = 2) -> int:
        """Draw text with its top-left corner at (x, y); returns the x after the last glyph."""
        for char in text.upper():
            rows = _FONT.get(char, _FONT[" "])
            for r, digit in enumerate(rows):
                bits = int(digit, 8)
                for c in range(3):
                    if bits & (4 >> c):
                        px, py = x + c * scale, y + r * scale
                        self.rect(px, py, px + scale, py + scale, color)
            x += 4 * scale
        return x

    def png(self) -> bytes:
        stride = self.width * 3
        raw = b"".join(b"\x00" + bytes(self.pixels[y * stride:(y + 1) * stride]) for y in range(self.height))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6))
                + chunk(b"IEND", b""))


def text_width(text: str, scale: int = 2) -> int:
    return len(text) * 4 * scale


def short_count(value: int) -> str:
    for unit, size in (("M", 1_000_000), ("K", 1_000)):
        if value >= size:
            number = value / size
            return f"{number:.0f}{unit}" if number >= 10 or number.is_integer() else f"{number:.1f}{unit}"
    return str(value)


def log2_bins(lengths: Iterable[int]) -> list[int]:
    """Counts per bin: bin 0 holds 0 tokens, bin k holds [2^(k-1), 2^k)."""
    counts: list[int] = []
    for value in lengths:
        index = max(0, value).bit_length()
        if index >= len(counts):
            counts.extend([0] * (index + 1 - len(counts)))
        counts[index] += 1
    return counts


def histogram_png(lengths: Iterable[int], path: Path, *, short_tokens: int, title: str) -> None:
    counts = log2_bins(lengths) or [0]
    width, height = 760, 380
    left, right, top, bottom = 70, 20, 50, 60
    canvas = Canvas(width, height)
    canvas.text(left, 16, title)
    peak = max(counts) or 1
    plot_w, plot_h = width - left - right, height - top - bottom
    for fraction in (0.25, 0.5, 0.75, 1.0):
        y = top + plot_h - round(plot_h * fraction)
        canvas.rect(left, y, width - right, y + 1, GRID)
        label = short_count(round(peak * fraction))
        canvas.text(left - 8 - text_width(label), y - 5, label)
    slot = plot_w / len(counts)
    for index, count in enumerate(counts):
        x0 = left + round(index * slot) + 2
        x1 = left + round((index + 1) * slot) - 2
        bar = round(plot_h * count / peak)
        upper = 0 if index == 0 else 1 << index  # exclusive upper edge of the bin
        color = STUB if index == 0 or (upper and upper <= short_tokens) else BAR
        canvas.rect(x0, top + plot_h - bar, x1, top + plot_h, color)
        label = "0" if index == 0 else short_count(1 << (index - 1))
        scale = 2 if text_width(label) <= slot else 1
        canvas.text(round((x0 + x1) / 2 - text_width(label, scale) / 2), top + plot_h + 8, label, scale=scale)
    canvas.rect(left, top + plot_h, width - right, top + plot_h + 2, INK)
    canvas.text(left, height - 26, f"COMPLETION TOKENS (BIN STARTS, LOG2). RED: UNDER {short_tokens} TOKENS")
    write_whole(path, canvas.png())


def write_whole(path: Path, data: bytes) -> None:
    """Write `data` into a temporary file beside `path`, renamed over it once whole: a full disk leaves no
    broken image. A failure is a SinkError (no room: exit 4) or a ConfigError, naming the file."""
    part = path.with_name(f".{path.name}.part")
    try:
        part.write_bytes(data)
        os.replace(part, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            part.unlink()
        message = f"--histogram {path} could not be written ({exc.strerror or exc}); no part of it is left"
        if no_room(exc):
            raise SinkError(f"{message}: free space and run it again") from exc
        raise ConfigError(f"{message}; choose a writable path") from exc
