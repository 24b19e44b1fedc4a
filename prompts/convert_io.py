"""Streaming input, output and problem reporting shared by the converter CLIs.

This module owns everything a converter does that is not about one record's shape: reading JSONL or a
JSON array item by item (never the whole file), the common command line, stamping and validating each
converted record, refusing duplicate ids, writing with orjson, reporting bad items as FILE:LINE and the
exit codes. A converter supplies only a function from one parsed input object to one PromptRecord.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, TextIO, cast

import orjson

from argchecks.parser import ToolParser
from prompts.normalize import ConvertError
from prompts.schema import describe, validate_prompt

EXIT_OK = 0
EXIT_SKIPPED = 1
EXIT_USAGE = 2
EXIT_STRICT = 3

EXIT_CODES_HELP = f"""exit codes:
  {EXIT_OK}  every input record was converted
  {EXIT_SKIPPED}  finished, but some records were bad: each is reported on stderr as FILE:LINE: problem
     and left out of OUT
  {EXIT_USAGE}  bad arguments, or the input/output file could not be opened
  {EXIT_STRICT}  --strict: stopped at the first bad record; OUT was not written"""

_CHUNK = 1 << 20
_BOM = b"\xef\xbb\xbf"
# Inside a JSON array only these bytes move the scanner's state; `\\.` swallows escapes whole so an
# escaped quote never ends a string.
_STRUCTURE = re.compile(rb'\\.|["\[\]{},\n]', re.S)


@dataclass(frozen=True, slots=True)
class Item:
    """One input record before parsing: where it starts and its raw bytes (or a structural problem)."""

    line: int  # 1-based line of the record's first byte
    index: int | None  # 1-based position in a JSON array; None for JSONL
    raw: bytes
    error: str | None = None

    @property
    def number(self) -> int:
        """The record's ordinal for generated ids: the line for JSONL, the array position otherwise."""
        return self.index if self.index is not None else self.line


@dataclass(frozen=True, slots=True)
class ConvertOptions:
    id_prefix: str
    source: str | None


Converter = Callable[[object, Item, ConvertOptions], dict[str, Any]]


def _open_input(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    if path.endswith(".gz"):
        return cast("IO[bytes]", gzip.open(path, "rb"))
    return open(path, "rb", buffering=_CHUNK)


def iter_items(path: str, chunk_size: int = _CHUNK) -> Iterator[Item]:
    """Yield the records of a JSONL file or of a file holding one JSON array (told apart by the first
    byte that is not whitespace); `-` reads stdin and a `.gz` suffix is decompressed on the fly."""
    with _open_input(path) as f:
        head = f.read(max(chunk_size, len(_BOM)))
        if head.startswith(_BOM):
            head = head[len(_BOM) :]
        line = 1
        stripped = head.lstrip()
        while not stripped:  # only whitespace so far: the format is still unknown
            line += head.count(b"\n")
            head = f.read(chunk_size)
            if not head:
                return
            stripped = head.lstrip()
        line += head[: len(head) - len(stripped)].count(b"\n")
        if stripped.startswith(b"["):
            yield from _iter_array(f, stripped, line, chunk_size)
        else:
            yield from _iter_jsonl(f, stripped, line)


def _iter_jsonl(f: IO[bytes], head: bytes, line: int) -> Iterator[Item]:
    # The first chunk ends mid-line; its tail is glued to the rest of that line from the file.
    lines = head.split(b"\n")
    tail = lines.pop()
    for raw in lines:
        if raw.strip():
            yield Item(line, None, raw)
        line += 1
    rest = f.readline() if tail else b""
    raw = tail + rest.rstrip(b"\n")
    if raw.strip():
        yield Item(line, None, raw)
    if tail or rest:
        line += 1
    for raw in f:
        if raw.strip():
            yield Item(line, None, raw)
        line += 1


def _iter_array(f: IO[bytes], head: bytes, line: int, chunk_size: int) -> Iterator[Item]:
    buf = bytearray(head)
    depth = 0
    in_string = False
    start = 0  # offset of the current element's first byte (just after `[` or `,`)
    start_line = line
    index = 0
    pos = 0  # where the next scan resumes
    closed = False
    while not closed:
        for m in _STRUCTURE.finditer(buf, pos):
            pos = m.end()
            ch = buf[m.start()]
            if ch == 0x0A:
                line += 1
            elif ch == 0x22:
                in_string = not in_string
            elif in_string or ch == 0x5C:
                continue
            elif ch in (0x5B, 0x7B):
                depth += 1
                if depth == 1:
                    start, start_line = pos, line
            elif depth == 1 and ch in (0x2C, 0x5D):
                raw = bytes(buf[start : m.start()])
                if raw.strip() or ch == 0x2C:
                    index += 1
                    yield _element(raw, start_line, index, None if raw.strip() else "empty array item")
                start, start_line = pos, line
                if ch == 0x5D:
                    depth, closed = 0, True
                    break
            elif ch in (0x5D, 0x7D):
                depth -= 1
        if closed:
            break
        # Drop what is already yielded, keep the element in progress, and read on.
        del buf[:start]
        pos -= start
        start = 0
        chunk = f.read(chunk_size)
        if not chunk:
            if buf.strip():
                yield _element(bytes(buf), start_line, index + 1, "the JSON array ends without its closing ]")
            return
        buf += chunk
    yield from _after_close(f, bytes(buf[pos:]), line, chunk_size)


def _after_close(f: IO[bytes], rest: bytes, line: int, chunk_size: int) -> Iterator[Item]:
    """One problem item when anything but blanks follows the array's closing ]; reads on only as far as
    the first non-blank chunk, so a huge blank tail costs no memory."""
    trailing = rest.strip()
    while not trailing:
        chunk = f.read(chunk_size)
        if not chunk:
            return
        trailing = chunk.strip()
    yield Item(line, None, b"", "text after the JSON array's closing ]")


def _element(raw: bytes, line: int, index: int, error: str | None) -> Item:
    """An array element located at its first non-blank byte, not at the separator before it."""
    body = raw.lstrip()
    return Item(line + raw[: len(raw) - len(body)].count(b"\n"), index, body.rstrip(), error)


class Report:
    """Counts records and prints each problem as `FILE:LINE: problem` (plus the array position)."""

    def __init__(self, path: str, stream: TextIO | None = None) -> None:
        self.path = path
        self.stream = stream if stream is not None else sys.stderr
        self.read = 0
        self.written = 0
        self.bad = 0

    def problem(self, item: Item, message: str) -> None:
        self.bad += 1
        where = f"{self.path}:{item.line}"
        if item.index is not None:
            where += f": item {item.index}"
        print(f"{where}: {message}", file=self.stream)


def build_parser(prog: str, description: str, input_help: str, default_prefix: str) -> argparse.ArgumentParser:
    example = f"example:\n  {prog} IN.jsonl --out prompts.jsonl --source my-set\n\n"
    parser = ToolParser(
        prog=prog,
        description=description,
        epilog=example + EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("input", metavar="IN", help=input_help)
    parser.add_argument(
        "--out",
        required=True,
        metavar="OUT",
        help="PromptRecord JSONL to write (`-` for stdout); written "
        "to OUT.part and renamed to OUT when the conversion finishes",
    )
    parser.add_argument(
        "--id-prefix",
        default=default_prefix,
        metavar="P",
        help=f"prefix of the id given to a record without one, followed by its line number (or its "
        f"position in a JSON array); default {default_prefix!r}",
    )
    parser.add_argument(
        "--source",
        metavar="NAME",
        help="set meta.source to NAME on records that have none, so a mix of sets can be stratified",
    )
    parser.add_argument("--strict", action="store_true", help="stop at the first bad record (exit 3)")
    parser.add_argument("--quiet", action="store_true", help="print problems only, no summary line")
    return parser


def convert_one(obj: object, item: Item, convert: Converter, options: ConvertOptions) -> dict[str, Any]:
    """Convert, stamp the source and validate one parsed record; raises ConvertError."""
    record = convert(obj, item, options)
    if options.source is not None:
        meta = record.setdefault("meta", {})
        meta.setdefault("source", options.source)
    problem = validate_prompt(record)
    if problem is not None:
        raise ConvertError(problem)
    return record


def run(argv: list[str] | None, parser: argparse.ArgumentParser, convert: Converter) -> int:
    """Parse the command line, convert IN to OUT record by record and return the exit code."""
    args = parser.parse_args(argv)
    options = ConvertOptions(id_prefix=args.id_prefix, source=args.source)
    report = Report(args.input)
    out_path: str = args.out
    part = out_path + ".part"
    try:
        # Closed (and published or removed) by _close_output, which needs the outcome of the loop.
        out = sys.stdout.buffer if out_path == "-" else open(part, "wb", buffering=_CHUNK)  # noqa: SIM115
    except OSError as e:
        print(f"{parser.prog}: cannot write {out_path}: {e.strerror}", file=sys.stderr)
        return EXIT_USAGE
    seen: set[str] = set()
    stopped = finished = False
    code = EXIT_USAGE
    try:
        for item in iter_items(args.input):
            report.read += 1
            try:
                record = _convert_item(item, convert, options, seen)
            except ConvertError as e:
                report.problem(item, str(e))
                if args.strict:
                    stopped = True
                    break
                continue
            out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            report.written += 1
        finished = True
        code = EXIT_STRICT if stopped else EXIT_SKIPPED if report.bad else EXIT_OK
    except OSError as e:
        print(f"{parser.prog}: cannot read {args.input}: {e.strerror or e}", file=sys.stderr)
    finally:
        close_output(out, out_path, publish=finished and not stopped)
    if not args.quiet and finished:
        if stopped:
            summary = f"stopped at the first bad record (record {report.read}); {out_path} not written"
        else:
            target = "stdout" if out_path == "-" else out_path
            summary = f"{report.written} of {report.read} record(s) written to {target}"
            summary += f"; {report.bad} bad record(s) skipped" if report.bad else ""
        print(f"{parser.prog}: {summary}", file=sys.stderr)
    return code


def _convert_item(item: Item, convert: Converter, options: ConvertOptions, seen: set[str]) -> dict[str, Any]:
    if item.error is not None:
        raise ConvertError(item.error)
    try:
        obj = orjson.loads(item.raw)
    except orjson.JSONDecodeError as e:
        raise ConvertError(f"not valid JSON: {e}") from None
    record = convert_one(obj, item, convert, options)
    rid: str = record["id"]
    if rid in seen:
        raise ConvertError(f"id {describe(rid)} was already used by an earlier record")
    seen.add(rid)
    return record


def close_output(out: IO[bytes], out_path: str, publish: bool) -> None:
    """Rename OUT.part to OUT only after a whole run, so a stopped or crashed run never leaves a
    truncated OUT that looks finished."""
    if out_path == "-":
        out.flush()
        return
    out.close()
    if publish:
        os.replace(out_path + ".part", out_path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(out_path + ".part")
