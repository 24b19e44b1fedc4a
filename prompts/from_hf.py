"""Convert a parquet or Arrow dataset with a `messages` column (Hugging Face style) to PromptRecord JSONL.

This module owns reading table files row by row (parquet row groups, Arrow IPC files and streams such
as `datasets` cache files, or a directory of them) and the conversion loop the table converters share
(`run_rows`, also used by `prompts.from_tokenized`). A row with `messages` is converted as an OpenAI
chat record (`prompts.from_openai`), one with ShareGPT `conversations` as a ShareGPT record; every
other column goes into meta. Problems are reported as FILE:ROW (1-based) with the exit codes of the
other converters.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.ipc as ipc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from argchecks.parser import ToolParser
from prompts import from_openai, from_sharegpt
from prompts.convert_io import (
    EXIT_CODES_HELP,
    EXIT_OK,
    EXIT_SKIPPED,
    EXIT_STRICT,
    EXIT_USAGE,
    ConvertOptions,
    Item,
    Report,
    close_output,
    convert_one,
)
from prompts.normalize import ConvertError
from prompts.schema import describe

TABLE_SUFFIXES = (".parquet", ".arrow", ".feather", ".ipc")
BATCH_ROWS = 1024

Row = dict[str, Any]
RowConverter = Callable[[Row, Item, ConvertOptions], dict[str, Any]]


class TableError(ValueError):
    """The input is not a readable table, or lacks a needed column."""


def table_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in TABLE_SUFFIXES)
        if not files:
            raise TableError(f"{path}: no {', '.join(TABLE_SUFFIXES)} files in this directory")
        return files
    if not path.is_file():
        raise TableError(f"{path}: no such file")
    return [path]


def _batches(path: Path, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
    if path.suffix == ".parquet":
        source = pq.ParquetFile(str(path))
        wanted = None if columns is None else [c for c in columns if c in source.schema_arrow.names]
        yield from source.iter_batches(batch_size=BATCH_ROWS, columns=wanted)
        return
    with pa.memory_map(str(path)) as stream:
        try:
            reader: Any = ipc.open_file(stream)
            batches: Iterator[pa.RecordBatch] = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:
            stream.seek(0)
            batches = iter(ipc.open_stream(stream))  # `datasets` writes the streaming format
        for batch in batches:
            yield batch if columns is None else batch.select([c for c in columns if c in batch.schema.names])


def iter_rows(path: Path, columns: list[str] | None = None) -> Iterator[tuple[str, int, Row]]:
    """(file, 1-based row number, row as Python values) of every table file under `path`."""
    for file in table_files(path):
        number = 0
        try:
            for batch in _batches(file, columns):
                for row in batch.to_pylist():
                    number += 1
                    yield str(file), number, row
        except (pa.ArrowException, OSError) as exc:
            raise TableError(f"{file}: cannot read as parquet or Arrow: {exc}") from exc


def convert(row: Row, item: Item, options: ConvertOptions) -> dict[str, Any]:
    """One dataset row -> one PromptRecord (not yet validated)."""
    if "messages" in row:
        return from_openai.convert(row, item, options)
    if "conversations" in row:
        return from_sharegpt.convert(row, item, options)
    raise ConvertError(f"the row has no messages column (columns: {describe(sorted(row))})")


def run_rows(args: argparse.Namespace, prog: str, rows: Iterator[tuple[str, int, Row]],
             convert_row: RowConverter) -> int:
    """Convert rows to OUT as the JSONL converters do: validate, refuse repeated ids, report FILE:ROW."""
    options = ConvertOptions(id_prefix=args.id_prefix, source=args.source)
    out_path: str = args.out
    try:
        out = sys.stdout.buffer if out_path == "-" else open(out_path + ".part", "wb")  # noqa: SIM115
    except OSError as exc:
        print(f"{prog}: cannot write {out_path}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    reports: dict[str, Report] = {}
    seen: set[str] = set()
    read = written = bad = 0
    finished = stopped = False
    try:
        for file, number, row in rows:
            read += 1
            report = reports.setdefault(file, Report(file))
            item = Item(number, None, b"")
            try:
                record = convert_one(row, item, convert_row, options)  # type: ignore[arg-type]
                if record["id"] in seen:
                    raise ConvertError(f"id {describe(record['id'])} was already used by an earlier row")
            except ConvertError as exc:
                bad += 1
                report.problem(item, str(exc))
                if args.strict:
                    stopped = True
                    break
                continue
            seen.add(record["id"])
            # default=str: a table may hold values JSON has no type for (bytes, decimals) in meta columns.
            out.write(orjson.dumps(record, default=str, option=orjson.OPT_APPEND_NEWLINE))
            written += 1
        finished = True
    except TableError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
    finally:
        close_output(out, out_path, publish=finished and not stopped)
    if not finished:
        return EXIT_USAGE
    if not args.quiet:
        if stopped:
            print(f"{prog}: stopped at the first bad row (row {read}); {out_path} not written", file=sys.stderr)
        else:
            extra = f"; {bad} bad row(s) skipped" if bad else ""
            print(f"{prog}: {written} of {read} row(s) written to {out_path}{extra}", file=sys.stderr)
    return EXIT_STRICT if stopped else EXIT_SKIPPED if bad else EXIT_OK


def add_common(parser: argparse.ArgumentParser, default_prefix: str) -> None:
    parser.add_argument("--out", required=True, metavar="OUT",
                        help="PromptRecord JSONL to write (`-` for stdout); written to OUT.part and renamed to OUT "
                             "when the conversion finishes")
    parser.add_argument("--id-prefix", default=default_prefix, metavar="P",
                        help=f"ids for rows without one: P + row number (default {default_prefix!r})")
    parser.add_argument("--source", metavar="NAME", help="set meta.source to NAME on records that have none")
    parser.add_argument("--strict", action="store_true", help="stop at the first bad row (exit 3)")
    parser.add_argument("--quiet", action="store_true", help="print problems only, no summary line")


def main(argv: list[str] | None = None) -> int:
    prog = "python -m prompts.from_hf"
    parser = ToolParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Convert a parquet or Arrow dataset with a `messages` column (OpenAI chat messages, as "
                    "Hugging Face chat datasets store them) or a ShareGPT `conversations` column to "
                    "PromptRecord JSONL. The id is the `id` column, else P + the row number; tools may be a "
                    "list or JSON text; every other column goes into meta.",
        epilog=f"example:\n  {prog} train-00000-of-00004.parquet --out prompts.jsonl --source my-set\n\n"
               f"problems are reported as FILE:ROW (1-based row in that file).\n\n{EXIT_CODES_HELP}")
    parser.add_argument("input", metavar="IN", type=Path,
                        help="a .parquet or .arrow file, or a directory of them (e.g. a saved dataset)")
    add_common(parser, "hf-")
    args = parser.parse_args(argv)
    return run_rows(args, prog, iter_rows(args.input), convert)


if __name__ == "__main__":
    raise SystemExit(main())
