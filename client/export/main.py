"""`python -m client.export`: results -> the tokenized training set (parquet) the drafter pipeline reads.

This module owns the command line and the report. It imports nothing of the `export` extra (pyarrow,
tokenizers, jinja2) at the top: `--help` works without it, and a run without it is told which extra to
install. The rows and the parquet file are `export_build`; how a record becomes tokens is `export_render`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from client.core.errors import ConfigError
from client.core.options import add_s3_endpoint_url, positive_int

EXIT_OK, EXIT_DROPPED, EXIT_USAGE, EXIT_NOT_EXACT = 0, 1, 2, 3

# The top-level modules of the `export` extra (pyproject.toml); a missing one is a setup step, not a bug.
EXTRA_MODULES = frozenset({"pyarrow", "tokenizers", "jinja2"})

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
  2  bad options, unreadable results or tokenizer, OUT cannot be written, OUT is inside the run's
     directory or an existing file that is not a previous export (parquet), or the export extra is not
     installed
  3  --require-exact-ids, and some records carry no server token ids (they would be re-rendered); OUT
     is not written, and the message says how many
"""


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


def missing_extra(exc: ImportError) -> str | None:
    """The message for an import that failed because the `export` extra is not installed, else None."""
    name = (exc.name or "").partition(".")[0]
    if name not in EXTRA_MODULES:
        return None
    return (f"client.export needs the `export` extra, and {name} cannot be imported ({exc}); "
            "install it with: pip install -e '.[export]'")


PARQUET_MAGIC = b"PAR1"


def check_out_is_safe(out: Path, results: str) -> None:
    """OUT may replace a previous export, never a run's own files: ConfigError for a path inside the run's
    directory (its segments, `.ids` sidecars, run.json) and for an existing file that is not parquet."""
    if not results.startswith("s3://"):
        run = Path(results).resolve()
        if out.resolve().is_relative_to(run):
            raise ConfigError(f"--out {out} is inside the run's directory {results}; write the export outside it, "
                              "so that no segment, sidecar or run.json can be overwritten")
    if out.is_file():
        with out.open("rb") as existing:
            head = existing.read(len(PARQUET_MAGIC))
        if head != PARQUET_MAGIC:
            raise ConfigError(f"--out {out} exists and is not a parquet file (not a previous export), so it is "
                              "left as it is; remove it or choose another path")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        # Imported only now, so that --help and the option errors need none of the extra.
        from client.export.build import ChatTokenizer, export, summary
    except ImportError as exc:
        message = missing_extra(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.out.is_dir():
            raise ConfigError(f"--out {args.out} is a directory; give the parquet file to write")
        if not args.out.parent.is_dir():
            raise ConfigError(f"--out {args.out}: the directory {args.out.parent} does not exist")
        check_out_is_safe(args.out, args.results)
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
