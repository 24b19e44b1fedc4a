"""`python -m client.audit`: is this data real? Reads a run's results, reports, and gives a verdict.

This module owns the command line, the thresholds that turn counts into a verdict, and the report
(a rich table, or JSON with --json). The per-record work is in `audit_scan`, the rules in
`audit_rules`, the histogram in `audit_png`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from argchecks import float_in, positive_int
from argchecks.parser import ToolParser
from client.audit import loops
from client.audit.accept import render as render_accept
from client.audit.findings import LOCAL_REDO_ADVICE, S3_REDO_ADVICE, Finding, Thresholds, judge, share
from client.audit.plan_mix import mix_finding, mix_rows, recorded_plan
from client.audit.png import histogram_png
from client.audit.scan import IdCheck, Scan, check_ids, edited_prompts, scan_results
from client.core.exit_codes import EXIT_NOT_DONE, EXIT_OK, EXIT_PROBLEM
from client.core.human_out import write_report
from client.core.options import add_run_location, add_s3_endpoint_url, run_location
from client.core.report_text import print_report
from client.results.reader import ReadReport

DESCRIPTION = """\
Audit the results of a run: counts, an exactly-once check against the prompt set, finish reasons,
the completion-length distribution, stub-like replies, empty reasoning where thinking was on, tool-call
validity (arguments parse as JSON and match the tool's schema), replies that loop (the end repeats one
block) and the tokens they cost, and the mix per endpoint and model.
Segments are streamed; a million records need little memory. Ends with a plain verdict.
"""

EPILOG = """\
examples:
  python -m client.audit runs/full --prompts data.jsonl
  python -m client.audit runs/full --json > audit.json
  python -m client.audit runs/full --histogram lengths.png

exit codes:
  0  the data looks healthy (warnings, if any, are printed)
  1  the data looks broken: the verdict says why (e.g. most completions are stubs, reasoning missing
     although thinking was requested, ids written twice, results from more than one model, an S3
     segment whose bytes differ from its manifest)
  2  bad options, or the results or prompt files cannot be read
  3  healthy so far, but incomplete: some ids of --prompts have no result yet
  4  no room: the report (stdout) or the --histogram file could not be written; free space and run it again
  130 stopped by Ctrl-C or SIGTERM
"""


# Without the prompt set the audit cannot tell a missing prompt from one never asked for: the row says how to.
NOT_CHECKED = "not checked: --prompts FILE checks that every prompt has exactly one result"


def percentile(ordered: Sequence[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending sequence (0 when empty)."""
    if not ordered:
        return 0
    rank = max(1, -(-len(ordered) * fraction // 1))
    return ordered[min(len(ordered), int(rank)) - 1]


def exit_code(findings: list[Finding], ids: IdCheck | None) -> int:
    if any(f.level == "fail" for f in findings):
        return EXIT_PROBLEM
    if ids is not None and ids.missing:
        return EXIT_NOT_DONE
    return EXIT_OK


def summary(scan: Scan, ids: IdCheck | None, report: ReadReport, findings: list[Finding],
            limits: Thresholds) -> dict[str, Any]:
    """The whole report as plain JSON data (what --json prints)."""
    ordered = sorted(scan.lengths)
    n = scan.records
    code = exit_code(findings, ids)
    verdict = {EXIT_OK: "healthy", EXIT_PROBLEM: "broken", EXIT_NOT_DONE: "incomplete"}[code]
    return {
        "verdict": verdict,
        "exit_code": code,
        "findings": [asdict(f) for f in findings],
        "counts": {"records": n, "segments": report.segments, "damaged_segments": len(report.damaged),
                   "corrupt_lines": report.corrupt,
                   "torn_tails": report.torn_tails, "diverged": scan.diverged,
                   "with_token_ids": scan.with_ids,
                   "with_diverged_field": scan.diverged_field},
        "ids": asdict(ids) if ids is not None else None,
        # The table's "exactly once" row, for a reader of the JSON who finds "ids" null and wonders why.
        "exactly_once": {"checked": ids is not None, "note": None if ids is not None else NOT_CHECKED},
        "finish_reasons": dict(scan.finish.most_common()),
        "cut_by_train_window": scan.window_cuts,
        "window_miscounts": scan.window_miscounts,
        "continued": {"records": scan.continued, "tokens_kept": scan.continued_kept,
                      "tokens_generated": scan.continued_generated, "broken": len(scan.continued_broken),
                      "broken_examples": scan.continued_broken[:5]},
        "completion_tokens": {
            "total": sum(ordered), "mean": round(sum(ordered) / n, 1) if n else 0.0,
            "median": percentile(ordered, 0.5), "p90": percentile(ordered, 0.9), "p99": percentile(ordered, 0.99),
            "max": ordered[-1] if ordered else 0,
            "reasoning": scan.reasoning_tokens, "content": round(scan.content_tokens),
            "tool_calls": round(scan.tool_tokens),
        },
        "stubs": {"pattern": scan.stub_pattern, "short": scan.short, "short_tokens": limits.short_tokens,
                  "share": round(share(max(scan.stub_pattern, scan.short), n), 4), "examples": scan.stub_examples},
        "reasoning": {"thinking_on": scan.thinking_on, "empty": scan.empty_reasoning,
                      "empty_share": round(share(scan.empty_reasoning, scan.thinking_on), 4)},
        "tool_calls": {"records_with_calls": scan.records_with_calls, "calls": scan.tool_calls,
                       "invalid": dict(scan.bad_calls), "examples": scan.bad_call_examples,
                       "truncated": scan.truncated_calls, "truncated_examples": scan.truncated_call_examples},
        "models": dict(scan.models.most_common()),
        "sampling": [{"sampling": block, "records": count} for block, count in scan.sampling_mix()],
        "endpoints": {url: asdict(mix) for url, mix in sorted(scan.endpoints.items())},
        "accept_length": scan.accept.summary(),
        "loops": scan.loops.summary(n, sum(ordered)),
        "unreadable_examples": [str(b) for b in report.examples],
        "damaged_segments": [str(b) for b in report.damaged],
    }


def render(data: dict[str, Any], console: Console) -> None:
    console.print(_summary_table(data))
    console.print(_endpoint_table(data))
    render_accept(data["accept_length"], console)
    if data.get("sampling_plan"):
        console.print(_plan_table(data["sampling_plan"]))
    _examples(data, console)
    for finding in data["findings"]:
        style = "red" if finding["level"] == "fail" else "yellow"
        console.print(f"[{style}]{finding['level'].upper()}[/{style}] {finding['message']}", highlight=False)
    colour = {"healthy": "green", "broken": "bold red", "incomplete": "yellow"}[data["verdict"]]
    console.print(f"[{colour}]verdict: {data['verdict'].upper()}[/{colour}]{_truncation_note(data)}",
                  highlight=False)


def _summary_table(data: dict[str, Any]) -> Table:
    counts, tokens, ids = data["counts"], data["completion_tokens"], data["ids"]
    n = counts["records"]
    table = Table(title="Audit", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("records", f"{n:,} in {counts['segments']} segment(s)")
    if ids is not None:
        table.add_row("exactly once", f"prompts {ids['prompts']:,}; missing {ids['missing']:,}, "
                                      f"duplicated {ids['duplicated']:,}, unknown {ids['unknown']:,}")
    else:
        table.add_row("exactly once", NOT_CHECKED)
    table.add_row("finish_reason", ", ".join(f"{k} {v:,} ({share(v, n):.1%})" for k, v in
                                             data["finish_reasons"].items()))
    if data["cut_by_train_window"]:
        table.add_row("train window", f"{data['cut_by_train_window']:,} of the length replies ended at their "
                                      "--train-window room (what the trainer keeps; not damage)")
    continued = data["continued"]
    if continued["records"]:
        table.add_row("continued", f"{continued['records']:,} repl(ies) continued from their exact ids: "
                                   f"{continued['tokens_kept']:,} tokens kept from the earlier attempts, "
                                   f"{continued['tokens_generated']:,} generated by the last")
    table.add_row("completion tokens", f"median {tokens['median']:,}, p90 {tokens['p90']:,}, p99 {tokens['p99']:,}, "
                                       f"max {tokens['max']:,}, mean {tokens['mean']:,}")
    table.add_row("token parts", f"reasoning {tokens['reasoning']:,}, content {tokens['content']:,}, "
                                 f"tool calls {tokens['tool_calls']:,}")
    stubs = data["stubs"]
    table.add_row("stub-like", f"{stubs['share']:.1%} ('OK.' pattern {stubs['pattern']:,}; "
                               f"under {stubs['short_tokens']} tokens {stubs['short']:,})")
    reasoning = data["reasoning"]
    table.add_row("empty reasoning", f"{reasoning['empty']:,} of {reasoning['thinking_on']:,} with thinking on "
                                     f"({reasoning['empty_share']:.1%})")
    table.add_row("tool calls", _tool_calls(data["tool_calls"]))
    table.add_row("loops", loops.row(data["loops"]))
    table.add_row("models", ", ".join(f"{m} {c:,}" for m, c in data["models"].items()))
    if counts["with_diverged_field"]:
        table.add_row("diverged", f"{counts['diverged']:,} of {counts['with_diverged_field']:,}")
    return table


def _plan_table(rows: list[dict[str, Any]]) -> Table:
    """The sampling plan's mix per meta.source: asked (the plan in run.json) vs obtained (the records)."""
    table = Table(title="sampling plan: mix per meta.source, asked vs obtained", title_justify="left")
    for column in ("source", "setting", "records", "obtained", "asked"):
        table.add_column(column, justify="left" if column in ("source", "setting") else "right")
    for row in rows:
        asked = "?" if row["asked"] is None else f"{row['asked']:.1%}"
        mark = " (outside chance)" if row["outside_chance"] else ""
        table.add_row(row["source"], row["setting"], f"{row['records']:,} of {row['of']:,}",
                      f"{row['obtained']:.1%}{mark}", asked)
    return table


def _tool_calls(calls: dict[str, Any]) -> str:
    invalid = sum(calls["invalid"].values())
    return (f"{calls['calls']:,} in {calls['records_with_calls']:,} record(s); invalid {invalid:,}"
            + (f" ({', '.join(f'{k} {v}' for k, v in calls['invalid'].items())})" if invalid else "")
            + (f"; cut off by max_tokens {calls['truncated']:,}" if calls["truncated"] else ""))


def _endpoint_table(data: dict[str, Any]) -> Table:
    mix = Table(title="Per endpoint", title_justify="left")
    for column in ("endpoint", "records", "mean tokens", "stub-like", "truncated"):
        mix.add_column(column, justify="left" if column == "endpoint" else "right")
    for url, e in data["endpoints"].items():
        mix.add_row(url, f"{e['records']:,}", f"{share(e['tokens'], e['records']):.0f}",
                    f"{share(e['stubs'], e['records']):.1%}", f"{share(e['truncated'], e['records']):.1%}")
    return mix


def _examples(data: dict[str, Any], console: Console) -> None:
    stubs = data["stubs"]
    shown = (("stub-like", stubs["examples"] if stubs["share"] > 0.01 else []),
             ("invalid tool calls", data["tool_calls"]["examples"]), ("looping replies", data["loops"]["examples"]),
             ("unreadable lines", data["unreadable_examples"]), ("damaged segments", data["damaged_segments"]))
    for label, examples in shown:
        if examples:
            console.print(f"[bold]{label}, e.g.:[/bold]")
            for example in examples:
                console.print(f"  {example}", markup=False, highlight=False, soft_wrap=True)
    if data["ids"] is not None:
        for kind, examples in data["ids"]["examples"].items():
            console.print(f"[bold]{kind} ids, e.g.:[/bold] " + "; ".join(examples), highlight=False, soft_wrap=True)


def _truncation_note(data: dict[str, Any]) -> str:
    """After the verdict, why the cut-off replies do not make it broken: max_tokens, the window's room, or both."""
    cut = data["finish_reasons"].get("length", 0)
    window = min(data["cut_by_train_window"], cut)  # of the `length` replies, those the window's room ended
    if not cut or data["verdict"] == "broken":
        return ""
    if not window:
        return f" ({cut:,} completion(s) cut off by max_tokens: truncated, which is expected, not broken)"
    if window == cut:
        return f" ({cut:,} completion(s) ended at their --train-window room: what the trainer keeps, not broken)"
    return (f" ({cut:,} completion(s) cut off: {cut - window:,} by max_tokens, {window:,} at their "
            "--train-window room; expected, not broken)")


def build_parser() -> argparse.ArgumentParser:
    parser = ToolParser(prog="python -m client.audit", description=DESCRIPTION, epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_location(parser, "the run: its --out directory (or its segments/), one segment file, or the S3 prefix")
    parser.add_argument("--prompts", action="append", metavar="FILE|DIR", type=Path,
                        help="the prompt set, for the exactly-once check (missing, duplicated, unknown ids); "
                             ".jsonl, .jsonl.gz, .jsonl.zst or a directory of them; repeat")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    add_s3_endpoint_url(parser)
    parser.add_argument("--histogram", metavar="FILE.png", type=Path, help="write a PNG histogram of the lengths")
    limits = Thresholds()
    parser.add_argument("--short-tokens", type=positive_int, default=limits.short_tokens, metavar="N",
                        help="a completion under N tokens without a tool call counts as stub-like "
                             "(default: %(default)s)")
    parser.add_argument("--max-stub-share", type=float_in(0, 1), default=limits.max_stub_share, metavar="F",
                        help="fail above this share of stub-like completions (default: %(default)s)")
    parser.add_argument("--max-empty-reasoning-share", type=float_in(0, 1),
                        default=limits.max_empty_reasoning_share,
                        metavar="F", help="fail above this share of thinking-on completions without reasoning "
                                          "(default: %(default)s)")
    parser.add_argument("--max-bad-tool-call-share", type=float_in(0, 1), default=limits.max_bad_tool_call_share,
                        metavar="F",
                        help="fail above this share of invalid tool calls (default: %(default)s)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.results = run_location(parser, args)
    limits = Thresholds(short_tokens=args.short_tokens, max_stub_share=args.max_stub_share,
                        max_empty_reasoning_share=args.max_empty_reasoning_share,
                        max_bad_tool_call_share=args.max_bad_tool_call_share)
    scan, report = scan_results(args.results, limits.short_tokens, args.s3_endpoint_url)
    ids = check_ids(args.results, scan.ids, args.prompts, args.s3_endpoint_url) if args.prompts else None
    if ids is not None and scan.prompt_digests:
        edited, examples = edited_prompts(args.prompts, scan.prompt_digests)
        if edited:
            ids = replace(ids, edited=edited, examples={**ids.examples, "edited": examples},
                          redo_advice=S3_REDO_ADVICE if args.results.startswith("s3://") else LOCAL_REDO_ADVICE)
    findings = judge(scan, ids, report, limits)
    plan_rows = mix_rows(scan.plan_draws, recorded_plan(args.results)) if scan.plan_draws else []
    if (off_mix := mix_finding(plan_rows)) is not None:
        findings.append(off_mix)
    data = summary(scan, ids, report, findings, limits)
    data["sampling_plan"] = plan_rows
    if args.json:
        write_report(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print_report(lambda console: render(data, console), 140)
    if args.histogram is not None:  # after the report: an image that cannot be written does not lose it
        histogram_png(scan.lengths, args.histogram, short_tokens=limits.short_tokens,
                      title=f"COMPLETION LENGTHS OF {scan.records} RECORDS")
    return int(data["exit_code"])
