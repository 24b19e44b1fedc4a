"""The one way prompt files are found and opened: plain, gzip or zstd JSONL, a directory of them, a BOM.

`--prompts` takes files or directories. A directory stands for its `*.jsonl`, `*.jsonl.gz` and
`*.jsonl.zst` files in sorted order. `.gz` is read with the stdlib's gzip, `.zst` with `zstandard`
(streamed frame by frame, never held whole; a file that ends inside a frame is an error, as a cut gzip
is, never a shorter set: zstandard's own stream reader ends quietly at the cut). A leading UTF-8 BOM is
dropped. A file that holds one JSON array rather than one record per line is refused at once (told by
its first non-blank byte, `[`), with the command that converts it, instead of being reported as a
thousand invalid lines; so is a file whose first record is in another known shape (ShareGPT, OpenAI,
Hugging Face rows, parquet: prompts.shapes), with its converter.
Every reader of prompt files (the source, the ETA count, the multi-turn count, the audit, the status
tool) opens them through `prompt_lines`, so every one of them reads the same formats.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import shlex
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import orjson

from client.core.errors import ConfigError, InputError
from prompts.shapes import convert_command, converter_for, converter_for_head

PROMPT_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
BOM = b"\xef\xbb\xbf"
_BUFFER = 1 << 20
_SNIFF_BYTES = 1 << 16
_SNIFF_LINE = 1 << 22  # a first record longer than this is not sniffed for its shape
_ZSTD_CHUNK = 1 << 17  # compressed bytes fed to the decompressor at a time


def _decompress_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError, EOFError, zlib.error]
    with contextlib.suppress(ImportError):
        import zstandard

        errors.append(zstandard.ZstdError)
    return tuple(errors)


class _ZstdFrames(io.RawIOBase):
    """The decompressed bytes of a .zst file's frames, one after another; EOFError when it ends inside one.

    Hand-written over `decompressobj` because `stream_reader` gives no sign of an incomplete last frame:
    a file cut in half would read as its first half."""

    def __init__(self, raw: IO[bytes]) -> None:
        import zstandard

        super().__init__()
        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._frame = self._dctx.decompressobj()
        self._in_frame = False  # bytes of a frame were fed and its end not yet seen
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = self._raw.read(_ZSTD_CHUNK)
            if not chunk:
                if self._in_frame:
                    raise EOFError("truncated: the file ends inside a zstd frame")
                return 0
            self._pending = memoryview(self._feed(chunk))
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def _feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        while chunk:
            self._in_frame = True
            out.append(self._frame.decompress(chunk))
            if not self._frame.eof:
                break
            # A frame ended: what follows it is the next frame (zstd files may hold several).
            chunk = self._frame.unused_data
            self._frame = self._dctx.decompressobj()
            self._in_frame = False
        return b"".join(out)

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def _kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        return "gzip"
    if name.endswith(".zst"):
        return "zstd"
    return "plain"


def _open_binary(path: Path) -> IO[bytes]:
    """A buffered binary stream of the file's decompressed bytes."""
    kind = _kind(path)
    if kind == "gzip":
        return cast("IO[bytes]", gzip.open(path, "rb"))
    if kind == "zstd":
        raw = path.open("rb")
        try:
            frames = _ZstdFrames(raw)
        except ImportError:  # pragma: no cover - a runtime dependency; only a broken install lacks it
            raw.close()
            raise ConfigError(f"{path}: reading .zst needs the zstandard package (pip install zstandard)") from None
        return cast("IO[bytes]", io.BufferedReader(frames, buffer_size=_BUFFER))
    return path.open("rb", buffering=_BUFFER)


def _unreadable(path: Path, exc: BaseException, line: int | None = None) -> ConfigError:
    where = f"{path}:{line}" if line is not None else str(path)
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
    kind = _kind(path)
    if kind != "plain" and not (isinstance(exc, OSError) and exc.errno is not None):
        detail = f"the {kind} stream is corrupt or cut short ({detail})"
    return ConfigError(f"--prompts {where}: cannot read: {detail}")


@contextlib.contextmanager
def prompt_lines(path: Path) -> Iterator[Iterator[bytes]]:
    """The raw lines of one prompt file (decompressed, a leading BOM removed), numbered from 1 by the caller.

    A file that cannot be opened raises ConfigError naming it; a stream that breaks part of the way
    raises InputError naming the file and the line where it broke."""
    errors = _decompress_errors()
    try:
        handle = _open_binary(path)
    except errors as exc:
        raise _unreadable(path, exc) from exc

    def lines() -> Iterator[bytes]:
        number = 0
        try:
            for raw in handle:
                if number == 0 and raw.startswith(BOM):
                    raw = raw[len(BOM):]
                number += 1
                yield raw
        except errors as exc:
            # Past the start-up check: the run has begun, so this is bad input (exit 3), not a bad option.
            raise InputError(str(_unreadable(path, exc, number + 1))) from exc

    with handle:
        yield lines()


@dataclass(frozen=True, slots=True)
class PromptFiles:
    """The files `--prompts` names once directories are expanded, and which of them hold no record."""

    paths: list[Path]
    empty: list[Path]

    @property
    def all_empty(self) -> bool:
        return len(self.empty) == len(self.paths)


def json_array_message(path: Path) -> str:
    """How to turn a JSON-array file into JSONL, as one line naming the file."""
    name = path.name
    for suffix in (".gz", ".zst"):
        name = name.removesuffix(suffix)
    stem = name.removesuffix(".json").removesuffix(".jsonl")
    out = path.with_name(stem + ".jsonl")
    target = shlex.quote(str(out if out != path else path.with_name(stem + ".lines.jsonl")))
    quoted = shlex.quote(str(path))
    kind = _kind(path)
    read = {"gzip": f"gzip -dc {quoted} | jq -c '.[]'", "zstd": f"zstd -dc {quoted} | jq -c '.[]'"}.get(
        kind, f"jq -c '.[]' {quoted}")
    return (f"--prompts {path}: the file holds one JSON array, but prompts are read as JSONL (one record per "
            f"line). Convert it first: {read} > {target}")


def first_byte(path: Path) -> bytes:
    """The first non-blank byte of the (decompressed) file after any BOM, or b"" when it holds none."""
    errors = _decompress_errors()
    try:
        with _open_binary(path) as handle:
            start = True
            while True:
                chunk = handle.read(_SNIFF_BYTES)
                if not chunk:
                    return b""
                if start:
                    chunk = chunk.removeprefix(BOM)
                    start = False
                stripped = chunk.lstrip()
                if stripped:
                    return stripped[:1]
    except errors as exc:
        raise _unreadable(path, exc) from exc


def _directory_files(directory: Path) -> list[Path]:
    found = [p for p in directory.iterdir() if p.is_file() and p.name.lower().endswith(PROMPT_SUFFIXES)]
    return sorted(found)


def resolve_prompt_files(given: Sequence[Path], note: Callable[[str], None] | None = None) -> PromptFiles:
    """Expand directories, check every file can be read and is JSONL; ConfigError (exit 2) otherwise."""
    paths: list[Path] = []
    for path in given:
        if path.is_dir():
            files = _directory_files(path)
            if not files:
                raise ConfigError(f"--prompts {path}: the directory holds no prompt file (it reads "
                                  f"{', '.join('*' + s for s in PROMPT_SUFFIXES)})")
            if note is not None:
                note(f"--prompts {path}: reading {len(files)} prompt file(s) in sorted order")
            paths.extend(files)
        elif path.is_file():
            paths.append(path)
        elif path.exists():
            raise ConfigError(f"--prompts {path}: not a regular file or directory")
        else:
            raise ConfigError(f"--prompts {path}: no such file or directory")
    empty: list[Path] = []
    for path in paths:
        byte = first_byte(path)
        if byte == b"[":
            raise ConfigError(json_array_message(path))
        if byte == b"":
            empty.append(path)
        else:
            _refuse_foreign_shape(path)
    return PromptFiles(paths, empty)


def _first_line(path: Path) -> bytes:
    """The file's first non-blank line (decompressed, after any BOM), at most _SNIFF_LINE bytes of it."""
    errors = _decompress_errors()
    try:
        with _open_binary(path) as handle:
            line = handle.readline(_SNIFF_LINE).removeprefix(BOM)
            while line and not line.strip():
                line = handle.readline(_SNIFF_LINE)
            return line
    except errors as exc:
        raise _unreadable(path, exc) from exc


def _refuse_foreign_shape(path: Path) -> None:
    """ConfigError, with the command that converts the file, when its first record is in another known
    shape (ShareGPT, OpenAI, Hugging Face rows, a parquet or Arrow table) rather than a PromptRecord."""
    line = _first_line(path)
    converter = converter_for_head(line)
    if converter is None:
        try:
            converter = converter_for(orjson.loads(line))
        except orjson.JSONDecodeError:
            return  # not JSON (or longer than the sniff): the source reports it with its line
    if converter is not None:
        raise ConfigError(f"--prompts {path}: it holds {converter.shape}, not PromptRecords. "
                          f"Convert it first: {convert_command(converter, path)}")
