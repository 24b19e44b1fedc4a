"""`python -m client.export`: results -> the tokenized training set (parquet) the drafter pipeline reads.

This module owns the command line and the report. It imports nothing of the `export` extra (pyarrow,
tokenizers, jinja2) at the top: `--help` works without it, and a run without it is told which extra to
install. The rows and the parquet file are `export_build`; how a record becomes tokens is `export_render`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from argchecks import float_in, positive_int
from argchecks.parser import ToolParser
from client.core.errors import ConfigError, SinkError, no_room
from client.core.exit_codes import EXIT_NOT_DONE, EXIT_OK, EXIT_PROBLEM
from client.core.human_out import ReportUnwritten, write_report
from client.core.options import add_s3_endpoint_url
from client.export.formats import DEFAULT_FORMAT, FORMATS

# The top-level modules of the `export` extra (pyproject.toml); a missing one is a setup step, not a bug.
EXTRA_MODULES = frozenset({"pyarrow", "tokenizers", "jinja2"})

def _format_lines() -> str:
    lines = []
    for fmt in FORMATS.values():
        words, line = fmt.help.split(), ""
        rows = []
        for word in words:
            if line and len(line) + 1 + len(word) > 80:
                rows.append(line)
                line = word
            else:
                line = f"{line} {word}".strip()
        rows.append(line)
        lines.append(f"  {fmt.name:<21}" + "\n".join([rows[0], *(" " * 23 + r for r in rows[1:])]))
    return "\n".join(lines)


EPILOG = f"""\
formats (--format; what each trainer reads, from its loader's sources):
{_format_lines()}

examples:
  python -m client.export runs/full --tokenizer models/Qwen3.6-27B --out train.parquet
  python -m client.export runs/full --tokenizer tok/ --out train.parquet --drop-truncated --json
  python -m client.export runs/full --tokenizer models/Qwen3.6-27B --format specforge --max-length 4096 \\
      --out train.jsonl

token counts: a row made from the server's own token ids is used exactly. A re-rendered row must have
as many completion tokens as the server reported (usage.completion_tokens) and, where reported, as many
prompt tokens; a row that does not is a mismatch: it is left out and reported (--keep-mismatched keeps
it, still reported).

template fidelity (--template-check): for every record with the server's ids, what SpecForge trains on
for its specforge row (its own parsing rules: the whole conversation rendered with the template,
tokenized in one pass, the qwen3.5 loss-mask spans; tool-call arguments that do not parse become {{}}) is
compared with those ids: the tokens, and a loss mask 0 on the prompt and 1 on every generated token. With
--format specforge it runs by default: a row that does not match is left out, and above
--max-template-mismatch the export is refused (exit 3) unless --allow-template-mismatch. The tokenized
formats carry the server's ids: for them the check runs with --template-check all, and is a report.

never exported: loops (finish_reason repetition); in specforge rows, replies that did not end by
themselves (SpecForge would close them with tokens the model never generated). Both are counted.

the window (--max-length N, the trainer's max_length): a longer row is cut to its first N tokens,
prompt included, as SpecForge and speculators cut it (--over-length cut), or dropped (drop); a cut row
left with fewer supervised tokens than the trainer keeps is dropped, as the trainer drops it.

exit codes:
  0  every record was exported, apart from those left out by a rule: --drop-truncated, --max-length,
     loops (finish_reason repetition, never exported) and, for --format specforge, replies that did not
     end by themselves
  1  OUT was written, but some records were left out or kept despite a mismatch, or some result lines
     could not be read; the report says which
  2  bad options, unreadable results or tokenizer, OUT cannot be written, OUT is inside the run's
     directory or an existing file that is not a previous export, or the export extra is not installed
  3  refused, OUT not written: --require-exact-ids and some records carry no server token ids (they
     would be re-rendered), or (--format specforge) more than --max-template-mismatch of the checked
     rows render differently with the trainer's template; the message says how many; or no record fits
     --max-length (OUT is written without a row)
  4  no room to write OUT (disk full, quota or file size limit): nothing was written, no OUT.part left;
     or (--json) no room for the report on stdout (OUT, if the message says so, was written whole)
  130 stopped by Ctrl-C or SIGTERM: OUT not written, no OUT.part left
"""


def build_parser() -> argparse.ArgumentParser:
    parser = ToolParser(
        prog="python -m client.export", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write a run's results as the training set a drafter trainer reads: parquet, SpecForge "
                    "(conversations or pre-tokenized) or speculators JSONL, streamed; and check that the "
                    "trainer's chat template renders the tokens the server generated.")
    parser.add_argument("results", nargs="?", metavar="RUN",
                        help="the run: its --out directory or s3://BUCKET/PREFIX (as for client.audit)")
    parser.add_argument("--tokenizer", required=True, type=Path, metavar="PATH",
                        help="model or tokenizer directory (tokenizer.json + tokenizer_config.json with the chat "
                             "template), or a tokenizer.json file; sim: the simulated fleet's tokenizer")
    parser.add_argument("--chat-template", type=Path, metavar="FILE",
                        help="the trainer's Jinja chat template, instead of the tokenizer's: re-renders rows "
                             "without ids and is checked against the rows with ids")
    parser.add_argument("--out", required=True, type=Path, metavar="FILE", help="the file to write")
    parser.add_argument("--format", choices=list(FORMATS), default=DEFAULT_FORMAT,
                        help="what to write (below; default: %(default)s)")
    parser.add_argument("--rows", choices=("turn", "conversation"), default="turn",
                        help="for a --turns all run: one row per assistant turn (default), or one per "
                             "conversation (--format specforge only)")
    parser.add_argument("--max-length", type=positive_int, metavar="N",
                        help="the trainer's window (max_length), prompt included; longer rows are cut or "
                             "dropped (--over-length)")
    parser.add_argument("--over-length", choices=("cut", "drop"), default="cut",
                        help="a row longer than --max-length: cut it as the trainer does, or drop it "
                             "(default: %(default)s)")
    parser.add_argument("--drop-truncated", action="store_true",
                        help="leave out records cut by max_tokens (finish_reason length)")
    parser.add_argument("--require-exact-ids", action="store_true",
                        help="use only the servers' own token ids: fail (exit 3, OUT not written) when any "
                             "record lacks prompt_token_ids / completion_token_ids and would be re-rendered")
    parser.add_argument("--keep-mismatched", action="store_true",
                        help="keep rows whose token counts differ from the server's (still reported)")
    parser.add_argument("--template-check", choices=("auto", "all", "off"), default="auto",
                        help="compare the trainer's rendering of each row that has server ids with those ids: "
                             "auto with --format specforge only (default), all with every format, off never")
    parser.add_argument("--max-template-mismatch", type=float_in(0.0, 1.0), default=0.01, metavar="SHARE",
                        help="--format specforge: refuse the export (exit 3) when more than this share of the "
                             "rows with server ids render differently with the trainer's template (default: "
                             "%(default)s)")
    parser.add_argument("--allow-template-mismatch", action="store_true",
                        help="write OUT however many rows the trainer's template renders differently "
                             "(still reported)")
    parser.add_argument("--train-only-last-turn", nargs="?", const="on", choices=("auto", "on", "off"),
                        default="auto",
                        help="--format specforge: SpecForge's data.train_only_last_turn, as the template check "
                             "judges the loss mask. auto (default): a row SpecForge trains exactly only with it "
                             "(an agentic prompt under Qwen3.5/3.6) is written, and the export says the file needs "
                             "it; on (or the option alone): the trainer runs with it; off: without it, so such "
                             "rows are left out")
    parser.add_argument("--jobs", type=positive_int, metavar="N",
                        help="processes for the template check, one row at a time each (default: the usable "
                             "cores; 1: in this process)")
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


def _previous_jsonl_export(head: bytes) -> bool:
    """The first line of a JSONL export of ours: an object with `id` and `conversations` or `input_ids`."""
    try:
        first = orjson.loads(head.partition(b"\n")[0])
    except orjson.JSONDecodeError:
        return False
    return isinstance(first, dict) and "id" in first and ("conversations" in first or "input_ids" in first)


def check_out_is_safe(out: Path, results: str, fmt: str = DEFAULT_FORMAT) -> None:
    """OUT may replace a previous export, never a run's own files: ConfigError for a path inside the run's
    directory (its segments, `.ids` sidecars, run.json) and for an existing file that is not a previous
    export (parquet; or, for the JSONL formats, a file whose first line is one of our rows)."""
    if not results.startswith("s3://"):
        run = Path(results).resolve()
        if out.resolve().is_relative_to(run):
            raise ConfigError(f"--out {out} is inside the run's directory {results}; write the export outside it, "
                              "so that no segment, sidecar or run.json can be overwritten")
    if not out.is_file():
        return
    with out.open("rb") as existing:
        head = existing.read(1 << 20)
    parquet = FORMATS[fmt].storage == "parquet"
    if parquet and not head.startswith(PARQUET_MAGIC):
        raise ConfigError(f"--out {out} exists and is not a parquet file (not a previous export), so it is "
                          "left as it is; remove it or choose another path")
    if not parquet and head and not _previous_jsonl_export(head):
        raise ConfigError(f"--out {out} exists and is not a previous export (its first line is not an export "
                          "row), so it is left as it is; remove it or choose another path")


def _options(args: argparse.Namespace) -> Any:
    from client.export.build import ExportOptions
    from client.export.checking import usable_cores
    from client.export.rows import Window

    return ExportOptions(fmt=args.format, rows=args.rows, window=Window(args.max_length, args.over_length),
                         drop_truncated=args.drop_truncated, keep_mismatched=args.keep_mismatched,
                         require_exact=args.require_exact_ids, template_check=args.template_check,
                         max_template_mismatch=args.max_template_mismatch,
                         allow_template_mismatch=args.allow_template_mismatch,
                         train_only_last_turn=args.train_only_last_turn, row_group_size=args.row_group_size,
                         jobs=args.jobs or usable_cores())


def _print_template(report: Any, args: argparse.Namespace) -> None:
    template = report.template
    if not template.checked:
        checking = args.template_check == "all" or (args.template_check == "auto"
                                                     and FORMATS[args.format].rerendered)
        if checking and report.rendered:
            print(f"template check: none of the records carries server token ids ({report.rendered:,} "
                  "re-rendered), nothing to compare the trainer's template with", file=sys.stderr)
        return
    print(f"template check: {template.matched:,} of {template.checked:,} row(s) with server ids "
          f"({template.matched / template.checked:.2%}) are trained by SpecForge exactly on the server's tokens "
          f"with this template" + (f" ({template.sglang_tools:,} with the tools as SGLang renders them, written so)"
                         if template.sglang_tools else "")
          + (f" ({template.last_turn_only:,} only with data.train_only_last_turn: true)"
             if template.last_turn_only else ""), file=sys.stderr)
    for example in template.examples:
        print(f"  {example}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.results is None:  # --out here is the file written, not the run as in client.run and client.status
        parser.error(f"which run? Name it first: python -m client.export RUN --tokenizer PATH --out FILE (RUN: a "
                     f"run's --out directory or s3://BUCKET/PREFIX; --out {args.out} is the file to write)")
    if args.rows == "conversation" and not FORMATS[args.format].conversation_rows:
        parser.error("--rows conversation needs --format specforge: the server's ids are per turn, and only a "
                     "trainer that re-renders the conversation can find its earlier turns' spans")
    return _report(_write(args), args)


def _write(args: argparse.Namespace) -> Any:
    """The export's report; an error is raised in one line (ConfigError, SinkError) for the entry's map."""
    try:
        # Imported only now, so that --help and the option errors need none of the extra.
        from client.export.build import ChatTokenizer, export

        if FORMATS[args.format].storage == "parquet":  # the JSONL formats do without pyarrow
            importlib.import_module("pyarrow.parquet")
        if args.out.is_dir():
            raise ConfigError(f"--out {args.out} is a directory; give the file to write")
        if not args.out.parent.is_dir():
            raise ConfigError(f"--out {args.out}: the directory {args.out.parent} does not exist")
        check_out_is_safe(args.out, args.results, args.format)
        tok = ChatTokenizer.load(args.tokenizer, args.chat_template)
        return export(args.results, tok, args.out, _options(args), s3_endpoint_url=args.s3_endpoint_url)
    except ImportError as exc:
        message = missing_extra(exc)
        if message is None:
            raise
        raise ConfigError(message) from exc
    except OSError as exc:
        if no_room(exc):
            raise SinkError(f"no room to write {args.out} ({exc.strerror or exc}); nothing was written and no "
                            f"{args.out.name}.part is left: free space and run the export again") from exc
        raise ConfigError(f"cannot write {args.out}: {exc.strerror or exc}") from exc


def _refusal(report: Any, args: argparse.Namespace) -> str | None:
    """Why OUT was not written, when the export refused to write it."""
    if report.without_ids:
        return (f"--require-exact-ids: {report.without_ids:,} of {report.records:,} record(s) carry no server token "
                f"ids and would be re-rendered; {args.out} was not written. Regenerate them with `client.run "
                "--token-ids on`, or export without --require-exact-ids (re-rendered rows are checked against usage).")
    if report.template_refused:
        template = report.template
        return (f"SpecForge would train on {template.mismatched:,} of {template.checked:,} row(s) "
                f"({template.mismatch_share:.2%}) differently from the server's tokens, more than "
                f"--max-template-mismatch {args.max_template_mismatch:g}; {args.out} was not written. Train with the "
                "serving template (--chat-template FILE is the one checked), or pass --allow-template-mismatch.")
    return None


def _trainer_setting(report: Any, args: argparse.Namespace) -> str | None:
    """The SpecForge setting OUT is written for, when it needs one."""
    if not report.train_only_last_turn:
        return None
    if not report.last_turn_only:
        return f"note: {args.out} is checked as SpecForge trains with data.train_only_last_turn: true"
    return (f"important: train {args.out} with SpecForge's data.train_only_last_turn: true: "
            f"{report.last_turn_only:,} row(s) are agentic prompts whose earlier assistant turns the template "
            "renders with the assistant header the qwen3.5 spans start at; without the setting SpecForge "
            "supervises those prompt turns too (every row of this file trains its last turn only)")


def _report(report: Any, args: argparse.Namespace) -> int:
    from client.export.build import summary

    if args.json:
        try:
            write_report(orjson.dumps(summary(report), option=orjson.OPT_INDENT_2) + b"\n")
        except ReportUnwritten as exc:
            written = f"{args.out} was written whole, but " if report.written else ""
            raise SinkError(f"{written}{exc.strerror}: free space (or redirect stdout) and run it again") from exc
    if report.examples:
        total = sum(report.problems.values())
        print(f"problems (the first {len(report.examples)} of {total:,}):", file=sys.stderr)
    for example in report.examples:
        print(f"  {example}", file=sys.stderr)
    _print_template(report, args)
    refusal = _refusal(report, args)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return EXIT_NOT_DONE
    print(_counts(report, args), file=sys.stderr)
    setting = _trainer_setting(report, args)
    if setting is not None:
        print(setting, file=sys.stderr)
    for line in _notes(report):
        print(line, file=sys.stderr)
    if report.completion_mismatch and report.completion_mismatch >= max(1, report.records // 2):
        print("most re-rendered rows disagree with the server's counts: is --tokenizer the served model's "
              "tokenizer, with its chat template?", file=sys.stderr)
    if report.records and not report.exported and report.dropped_window:
        print(f"error: none of the {report.records:,} record(s) fits the window: --max-length {args.max_length:,} "
              f"left {args.out} without a row; the trainer would have nothing to train on. Give the trainer's "
              "max_length (prompt included)", file=sys.stderr)
        return EXIT_NOT_DONE
    trouble = report.left_out or report.kept_mismatched or report.unreadable
    return EXIT_PROBLEM if trouble else EXIT_OK


# Each reason a record is left out (client.export.build.LEFT_OUT_REASONS), as the summary line names it.
_REASONS = {
    "dropped_truncated": "truncated (--drop-truncated)",
    "dropped_loops": "loops",
    "unreproducible": "did not end by themselves",
    "template_left_out": "trained differently by the template",
    "earlier_turns": "earlier turns of conversation rows",
    "dropped_long": "longer than --max-length",
    "dropped_unsupervised": "left without supervised tokens by the cut",
    "mismatched_left_out": "token counts not the server's",
    "failed": "render failures",
    "without_ids": "without server ids",
    "duplicates": "duplicate ids",
    "malformed": "malformed",
}


def _counts(report: Any, args: argparse.Namespace) -> str:
    """The summary line: what was written, and every record left out under its reason, so that the counts add
    up to the records read."""
    window = f"; cut at --max-length {args.max_length:,}: {report.cut:,}" if args.max_length is not None else ""
    rows = f" in {report.rows:,} conversation row(s)" if args.rows == "conversation" else ""
    reasons = {reason: count for reason, count in report.left_out_by_reason().items() if count}
    named = ", ".join(f"{_REASONS[reason]} {count:,}" for reason, count in reasons.items())
    left = f"left out {sum(reasons.values()):,}" + (f" ({named})" if named else "")
    mismatched = ""
    if report.completion_mismatch or report.prompt_mismatch:
        mismatched = (f"; token counts not the server's: completion {report.completion_mismatch:,}, prompt "
                      f"{report.prompt_mismatch:,} ({'kept' if args.keep_mismatched else 'left out'})")
    return (f"exported {report.exported:,} of {report.records:,} record(s){rows} to {args.out} ("
            f"{report.exact:,} from server token ids, {report.rendered:,} re-rendered; {report.tokens:,} tokens); "
            f"{left}{mismatched}{window}")


# What the export left out by its own rules, or could not read: (the report's count, the line after it).
_NOTES = (
    ("dropped_loops", "note: {:,} reply(ies) stopped as loops (finish_reason repetition) are left out: a loop is "
     "not training data"),
    ("unreproducible", "note: {:,} reply(ies) that did not end by themselves (cut by max_tokens) are left out of "
     "the specforge rows: SpecForge would close them with tokens the model never generated; --format "
     "specforge-tokenized keeps them as generated"),
    ("template_left_out", "note: {:,} row(s) that SpecForge would train on differently from the server's tokens "
     "are left out (the template check above names them)"),
    ("earlier_turns", "note: {:,} turn(s) before their conversation's last are in no conversation row: the server "
     "generated each later turn without their reasoning, so one row cannot train both; --rows turn writes every "
     "turn as its own row"),
    ("unfinished_conversations", "note: {:,} conversation(s) have no final turn (`!`) in the results; written with "
     "the turns there are"),
    ("unreadable", "warning: {:,} result line(s) could not be read as records (named above); they are not in OUT"),
    ("malformed", "warning: {:,} record(s) could not be read as result records (named above); they are not in OUT"),
)


def _notes(report: Any) -> list[str]:
    """One line for each kind of record the export left out by its own rules, or could not read."""
    return [line.format(count) for field, line in _NOTES if (count := getattr(report, field))]
