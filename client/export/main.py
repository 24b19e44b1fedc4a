"""`python -m client.export`: results -> the tokenized training set (parquet) the drafter pipeline reads.

Columns: `id` (string), `input_ids` (list<int32>), `loss_mask` (list<int8>: 0 on the prompt, 1 on the
completion), `seq_len` (int32). Rows are written in row groups as the results stream by, to OUT.part,
renamed to OUT at the end. This module owns the command line, the checks that decide whether a row is
trusted, and the report; how a record becomes tokens is `export_render`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from client.core.errors import ConfigError
from client.core.ids import id_hash
from client.core.options import add_s3_endpoint_url, positive_int
from client.export.render import ChatTokenizer, RenderError, has_exact_ids, render_record
from client.results.reader import ReadReport, iter_records
from client.results.rules import usage_int

EXIT_OK, EXIT_DROPPED, EXIT_USAGE, EXIT_NOT_EXACT = 0, 1, 2, 3

SCHEMA = pa.schema([
    ("id", pa.string()),
    ("input_ids", pa.list_(pa.int32())),
    ("loss_mask", pa.list_(pa.int8())),
    ("seq_len", pa.int32()),
])

EPILOG = """\
examples:
  python -m client.export runs/full --tokenizer models/Qwen3.6-27B --out train.parquet
  python -m client.export runs/full --tokenizer tok/ --out train.parquet --drop-truncated --json

token counts: a row made from the server's own token ids is used exactly. A re-rendered row must have
as many completion tokens as the server reported (usage.completion_tokens) and, where reported, as many
prompt tokens; a row that does not is a mismatch: it is left out and reported (--keep-mismatched keeps
it, still reported).

exit codes:
  0  every record was exported (apart from those --drop-truncated was asked to drop)
  1  OUT was written, but some records were left out or kept despite a mismatch; the report says which
  2  bad options, unreadable results or tokenizer, or OUT cannot be written
  3  --require-exact-ids, and some records carry no server token ids (they would be re-rendered); OUT
     is not written, and the message says how many
"""


@dataclass
class ExportReport:
    records: int = 0
    exported: int = 0
    exact: int = 0
    rendered: int = 0
    dropped_truncated: int = 0
    duplicates: int = 0
    completion_mismatch: int = 0
    prompt_mismatch: int = 0
    kept_mismatched: int = 0
    failed: int = 0
    without_ids: int = 0  # --require-exact-ids: records that would have been re-rendered
    written: bool = False  # OUT was written (not with --require-exact-ids and records without ids)
    tokens: int = 0
    problems: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def note(self, kind: str, where: str, detail: str) -> None:
        self.problems[kind] += 1
        if len(self.examples) < 20:
            self.examples.append(f"{where}: {detail}")

    @property
    def left_out(self) -> int:
        return self.records - self.exported - self.dropped_truncated


def _check(record: dict[str, Any], prompt: list[int], completion: list[int]) -> list[tuple[str, str]]:
    """(kind, detail) for every count that differs from what the server reported."""
    usage = record.get("usage")
    problems = []
    expected = usage_int(usage, "completion_tokens")
    if expected is not None and expected != len(completion):
        problems.append(("completion", f"completion has {len(completion)} tokens, usage.completion_tokens is "
                                       f"{expected}"))
    expected_prompt = usage_int(usage, "prompt_tokens")
    if expected_prompt is not None and expected_prompt != len(prompt):
        problems.append(("prompt", f"prompt has {len(prompt)} tokens, usage.prompt_tokens is {expected_prompt}"))
    return problems


class _Writer:
    """Buffers rows and writes one parquet row group per `size` rows."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self.columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
        self.writer = pq.ParquetWriter(str(path), SCHEMA, compression="zstd")

    def add(self, row_id: str, prompt: list[int], completion: list[int]) -> None:
        self.columns["id"].append(row_id)
        self.columns["input_ids"].append(prompt + completion)
        self.columns["loss_mask"].append([0] * len(prompt) + [1] * len(completion))
        self.columns["seq_len"].append(len(prompt) + len(completion))
        if len(self.columns["id"]) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.columns["id"]:
            self.writer.write_table(pa.table(self.columns, schema=SCHEMA), row_group_size=self.size)
            self.columns = {name: [] for name in SCHEMA.names}

    def close(self) -> None:
        self.flush()
        self.writer.close()


def export(location: str, tok: ChatTokenizer, out: Path, *, drop_truncated: bool, keep_mismatched: bool,
           row_group_size: int, s3_endpoint_url: str | None = None, require_exact: bool = False) -> ExportReport:
    """`require_exact`: a record without server token ids is counted, not rendered, and OUT is not written
    when there is any."""
    report = ExportReport()
    seen: set[int] = set()
    part = out.with_name(out.name + ".part")
    writer = _Writer(part, row_group_size)
    finished = False
    try:
        for item, record in iter_records(location, ReadReport(), s3_endpoint_url=s3_endpoint_url):
            where = f"{item.where}:{item.line}: {record['id']}"
            report.records += 1
            key = id_hash(record["id"])
            if key in seen:
                report.duplicates += 1
                report.note("duplicate id", where, "id already exported from an earlier line; left out")
                continue
            seen.add(key)
            if drop_truncated and record.get("finish_reason") == "length":
                report.dropped_truncated += 1
                continue
            if require_exact and not has_exact_ids(record):
                report.without_ids += 1
                report.note("no server token ids", where, "would be re-rendered (--require-exact-ids)")
                continue
            try:
                tokens = render_record(record, tok)
            except RenderError as exc:
                report.failed += 1
                report.note("render failed", where, str(exc))
                continue
            problems = _check(record, tokens.prompt, tokens.completion)
            for kind, detail in problems:
                setattr(report, f"{kind}_mismatch", getattr(report, f"{kind}_mismatch") + 1)
                report.note(f"{kind} count mismatch", where, detail + ("" if tokens.exact else " (re-rendered)"))
            if problems and not keep_mismatched:
                continue
            report.kept_mismatched += bool(problems)
            report.exact += tokens.exact
            report.rendered += not tokens.exact
            report.exported += 1
            report.tokens += len(tokens.prompt) + len(tokens.completion)
            writer.add(record["id"], tokens.prompt, tokens.completion)
        finished = not report.without_ids
    finally:
        writer.close()
        if finished:
            os.replace(part, out)
            report.written = True
        else:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
    return report


def summary(report: ExportReport) -> dict[str, Any]:
    data: dict[str, Any] = {k: v for k, v in vars(report).items() if k not in ("problems", "examples")}
    data["problems"] = dict(report.problems)
    data["examples"] = report.examples
    data["left_out"] = report.left_out
    return data


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m client.export", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write a run's results as a tokenized training set: id, input_ids, loss_mask, seq_len "
                    "(parquet, streamed in row groups).")
    parser.add_argument("results", metavar="DIR|s3://BUCKET/PREFIX", help="the run's results (as for client.audit)")
    parser.add_argument("--tokenizer", required=True, type=Path, metavar="PATH",
                        help="model or tokenizer directory (tokenizer.json + tokenizer_config.json with the chat "
                             "template), or a tokenizer.json file")
    parser.add_argument("--chat-template", type=Path, metavar="FILE", help="a Jinja chat template to use instead")
    parser.add_argument("--out", required=True, type=Path, metavar="FILE.parquet", help="parquet file to write")
    parser.add_argument("--drop-truncated", action="store_true",
                        help="leave out records cut by max_tokens (finish_reason length)")
    parser.add_argument("--require-exact-ids", action="store_true",
                        help="use only the servers' own token ids: fail (exit 3, OUT not written) when any "
                             "record lacks prompt_token_ids / completion_token_ids and would be re-rendered")
    parser.add_argument("--keep-mismatched", action="store_true",
                        help="keep rows whose token counts differ from the server's (still reported)")
    parser.add_argument("--row-group-size", type=positive_int, default=2048, metavar="N",
                        help="rows per parquet row group (default: %(default)s)")
    add_s3_endpoint_url(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.out.is_dir():
            raise ConfigError(f"--out {args.out} is a directory; give the parquet file to write")
        if not args.out.parent.is_dir():
            raise ConfigError(f"--out {args.out}: the directory {args.out.parent} does not exist")
        tok = ChatTokenizer.load(args.tokenizer, args.chat_template)
        report = export(args.results, tok, args.out, drop_truncated=args.drop_truncated,
                        keep_mismatched=args.keep_mismatched, row_group_size=args.row_group_size,
                        s3_endpoint_url=args.s3_endpoint_url, require_exact=args.require_exact_ids)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(summary(report), option=orjson.OPT_INDENT_2) + b"\n")
    if report.examples:
        total = sum(report.problems.values())
        print(f"problems (the first {len(report.examples)} of {total:,}):", file=sys.stderr)
    for example in report.examples:
        print(f"  {example}", file=sys.stderr)
    if report.without_ids:
        print(f"error: --require-exact-ids: {report.without_ids:,} of {report.records:,} record(s) carry no server "
              f"token ids and would be re-rendered; {args.out} was not written. Regenerate them with "
              "`client.run --token-ids on`, or export without --require-exact-ids (re-rendered rows are checked "
              "against usage).", file=sys.stderr)
        return EXIT_NOT_EXACT
    print(f"exported {report.exported:,} of {report.records:,} record(s) to {args.out} ({report.exact:,} from server "
          f"token ids, {report.rendered:,} re-rendered; {report.tokens:,} tokens); dropped as truncated "
          f"{report.dropped_truncated:,}; mismatched completion {report.completion_mismatch:,}, prompt "
          f"{report.prompt_mismatch:,} ({'kept' if args.keep_mismatched else 'left out'}); render failures "
          f"{report.failed:,}; duplicate ids {report.duplicates:,}", file=sys.stderr)
    if report.completion_mismatch and report.completion_mismatch >= max(1, report.records // 2):
        print("most re-rendered rows disagree with the server's counts: is --tokenizer the served model's "
              "tokenizer, with its chat template?", file=sys.stderr)
    trouble = report.left_out or report.kept_mismatched
    return EXIT_DROPPED if trouble else EXIT_OK
