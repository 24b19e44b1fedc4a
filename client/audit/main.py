"""`python -m client.audit`: is this data real? Reads a run's results, reports, and gives a verdict.

This module owns the command line, the thresholds that turn counts into a verdict, and the report
(a rich table, or JSON with --json). The per-record work is in `audit_scan`, the rules in
`audit_rules`, the histogram in `audit_png`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from argchecks import float_in, positive_int
from client.audit import loops
from client.audit.accept import render as render_accept
from client.audit.png import histogram_png
from client.audit.scan import IdCheck, Scan, check_ids, edited_prompts, mixed_settings, scan_results
from client.core.errors import ConfigError, InputError
from client.core.options import add_s3_endpoint_url
from client.results.reader import ReadReport

EXIT_OK, EXIT_BROKEN, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3

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
"""


@dataclass(frozen=True, slots=True)
class Thresholds:
    short_tokens: int = 16
    max_stub_share: float = 0.10
    max_empty_reasoning_share: float = 0.10
    max_bad_tool_call_share: float = 0.05
    warn_truncated_share: float = 0.20


@dataclass(frozen=True, slots=True)
class Finding:
    level: str  # "fail" or "warn"
    message: str


def percentile(ordered: Sequence[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending sequence (0 when empty)."""
    if not ordered:
        return 0
    rank = max(1, -(-len(ordered) * fraction // 1))
    return ordered[min(len(ordered), int(rank)) - 1]


def _share(part: float, whole: int) -> float:
    return part / whole if whole else 0.0


def judge(scan: Scan, ids: IdCheck | None, report: ReadReport, limits: Thresholds) -> list[Finding]:
    """Counts -> findings. Each message is a sentence a person can act on."""
    found: list[Finding] = []
    n = scan.records
    if n == 0:
        return [Finding("fail", "there are no result records at all")]
    stubs = _share(max(scan.stub_pattern, scan.short), n)
    if stubs > limits.max_stub_share:
        most = "most completions are" if stubs > 0.5 else f"{stubs:.0%} of completions are"
        found.append(Finding("fail", f"{most} stubs: {scan.stub_pattern:,} match the '<think></think> OK.' pattern "
                                     f"and {scan.short:,} have under {limits.short_tokens} tokens and no tool call"))
    elif scan.stub_pattern or scan.short:
        found.append(Finding("warn", f"{stubs:.1%} of completions look like stubs (short or 'OK.')"))
    empty = _share(scan.empty_reasoning, scan.thinking_on)
    if empty > limits.max_empty_reasoning_share:
        found.append(Finding("fail", "reasoning is missing although thinking was requested: "
                                     f"{scan.empty_reasoning:,} of {scan.thinking_on:,} thinking-on completions "
                                     f"({empty:.0%}) have no reasoning"))
    elif scan.empty_reasoning:
        found.append(Finding("warn", f"{scan.empty_reasoning:,} thinking-on completion(s) have empty reasoning"))
    bad_calls = sum(scan.bad_calls.values())
    whole_calls = scan.tool_calls - scan.truncated_calls  # a call cut off by max_tokens is truncated, not invalid
    if bad_calls and _share(bad_calls, whole_calls) > limits.max_bad_tool_call_share:
        found.append(Finding("fail", f"{bad_calls:,} of {whole_calls:,} tool calls are invalid "
                                     f"({', '.join(f'{k}: {v}' for k, v in scan.bad_calls.most_common())})"))
    elif bad_calls:
        found.append(Finding("warn", f"{bad_calls:,} tool call(s) are invalid"))
    if scan.truncated_calls:
        found.append(Finding("warn", f"{scan.truncated_calls:,} tool call(s) were cut off by max_tokens (finish_reason "
                                     "length): counted as truncated, not invalid (client.export --drop-truncated "
                                     "leaves them out)"))
    if len(scan.models) > 1:
        found.append(Finding("fail", "the results come from more than one model ("
                                     + ", ".join(f"{m}: {c:,}" for m, c in scan.models.most_common())
                                     + "); a run must come from one model"))
    # A reply cut at its training window's room is what the trainer keeps anyway: not damage.
    truncated = _share(scan.finish.get("length", 0) - scan.window_cuts, n)
    if truncated > limits.warn_truncated_share:
        found.append(Finding("warn", f"{truncated:.0%} of completions hit max_tokens (finish_reason length); "
                                     "consider a larger cap"))
    looping = loops.finding(scan.loops.summary(n, sum(scan.lengths)))
    if looping:
        found.append(Finding("warn", looping))
    odd = {k: v for k, v in scan.finish.items() if k not in ("stop", "length", "tool_calls", loops.REPETITION)}
    if odd:
        found.append(Finding("warn", "unusual finish reasons: " + ", ".join(f"{k}: {v:,}" for k, v in odd.items())))
    if scan.no_usage:
        found.append(Finding("warn", f"{scan.no_usage:,} record(s) carry no usage.completion_tokens"))
    without_ids = scan.records - scan.with_ids
    if scan.with_ids and without_ids:
        # A run whose servers give ids has a record without them: a server that stopped giving them, or a
        # run resumed with other --token-ids. Those records cannot be exported exactly.
        found.append(Finding("warn", f"{without_ids:,} of {scan.records:,} record(s) carry no token ids while "
                                     f"{scan.with_ids:,} do; client.export re-renders them (--require-exact-ids "
                                     "refuses the run)"))
    if len(scan.samplings) > 1:
        found.append(Finding("warn", mixed_settings(scan.sampling_mix())))
    if scan.diverged:
        found.append(Finding("warn", f"{scan.diverged:,} conversation(s) ended early where the regenerated tool "
                                     "calls diverged from the source's"))
    if scan.window_miscounts:
        # The window's cap came from a count the server's own usage contradicts: replies were cut shorter
        # than the trainer keeps (count too high) or ran past its window (too low).
        found.append(Finding("fail", f"{scan.window_miscounts:,} record(s) were capped by a --train-window prompt "
                                     "count that disagrees with their usage.prompt_tokens ("
                                     f"{scan.window_miscount_examples[0]}): their max_tokens came from a wrong "
                                     "count, so their cuts are not the window's. Check the server's tokenize route "
                                     "(or --tokenizer), then regenerate them"))
    if scan.conversation_events and scan.duplicate_events():
        found.append(Finding("fail", f"{scan.duplicate_events():,} multi-turn event(s) were written more than once"))
    if report.damaged:
        found.append(Finding("fail", f"{len(report.damaged):,} S3 segment(s) are not the bytes their manifest lists "
                                     f"({report.damaged[0]}): their records were not read and their ids count as "
                                     "missing. Run client.run with the same --s3 again: it regenerates those ids "
                                     "(and its own writer drops the damaged entries from its manifest)"))
    if report.corrupt or report.torn_tails:
        found.append(Finding("warn", f"{report.corrupt:,} unreadable line(s) and {report.torn_tails:,} torn "
                                     "segment tail(s) were skipped"))
    if ids is not None:
        if ids.duplicated:
            found.append(Finding("fail", f"{ids.duplicated:,} id(s) were written more than once "
                                         f"({ids.duplicate_lines:,} extra line(s))"))
        if ids.unknown:
            found.append(Finding("fail", f"{ids.unknown:,} result id(s) are not in the prompt set; "
                                         "are these the right --prompts?"))
        if ids.edited:
            found.append(Finding("warn", f"{ids.edited:,} done prompt(s) were edited after their result was written "
                                         "(the prompt differs from the one the result answers, e.g. "
                                         f"{'; '.join(ids.examples.get('edited', [])[:3])}): "
                                         f"{ids.redo_advice}"))
        if ids.invalid_prompts:
            found.append(Finding("warn", f"{ids.invalid_prompts:,} line(s) of the prompt files are not valid records "
                                         f"(e.g. {ids.examples['invalid_prompts'][0]}); the run skips them, so they "
                                         "are not counted as missing: fix them and run again to have them generated"))
        if ids.missing:
            found.append(Finding("warn", f"incomplete: {ids.missing:,} of {ids.prompts:,} prompt id(s) have no result"))
    return found


# What to do about edited prompts. `client.run --redo-edited` rewrites local segments; an S3 run's segments
# are uploaded and never rewritten, so there the edited prompts need ids of their own.
LOCAL_REDO_ADVICE = "run client.run with --redo-edited to generate them again"
S3_REDO_ADVICE = ("client.run --redo-edited rewrites local segments only, and an S3 run's segments are never "
                  "rewritten: to generate the edited prompts again, give them new ids in the prompt file and run "
                  "the same client.run --s3 command (the old results stay under the old ids)")


def exit_code(findings: list[Finding], ids: IdCheck | None) -> int:
    if any(f.level == "fail" for f in findings):
        return EXIT_BROKEN
    if ids is not None and ids.missing:
        return EXIT_INCOMPLETE
    return EXIT_OK


def summary(scan: Scan, ids: IdCheck | None, report: ReadReport, findings: list[Finding],
            limits: Thresholds) -> dict[str, Any]:
    """The whole report as plain JSON data (what --json prints)."""
    ordered = sorted(scan.lengths)
    n = scan.records
    code = exit_code(findings, ids)
    verdict = {EXIT_OK: "healthy", EXIT_BROKEN: "broken", EXIT_INCOMPLETE: "incomplete"}[code]
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
        "finish_reasons": dict(scan.finish.most_common()),
        "cut_by_train_window": scan.window_cuts,
        "window_miscounts": scan.window_miscounts,
        "completion_tokens": {
            "total": sum(ordered), "mean": round(sum(ordered) / n, 1) if n else 0.0,
            "median": percentile(ordered, 0.5), "p90": percentile(ordered, 0.9), "p99": percentile(ordered, 0.99),
            "max": ordered[-1] if ordered else 0,
            "reasoning": scan.reasoning_tokens, "content": round(scan.content_tokens),
            "tool_calls": round(scan.tool_tokens),
        },
        "stubs": {"pattern": scan.stub_pattern, "short": scan.short, "short_tokens": limits.short_tokens,
                  "share": round(_share(max(scan.stub_pattern, scan.short), n), 4), "examples": scan.stub_examples},
        "reasoning": {"thinking_on": scan.thinking_on, "empty": scan.empty_reasoning,
                      "empty_share": round(_share(scan.empty_reasoning, scan.thinking_on), 4)},
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
    counts, tokens, ids = data["counts"], data["completion_tokens"], data["ids"]
    n = counts["records"]
    table = Table(title="Audit", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("records", f"{n:,} in {counts['segments']} segment(s)")
    if ids is not None:
        table.add_row("exactly once", f"prompts {ids['prompts']:,}; missing {ids['missing']:,}, "
                                      f"duplicated {ids['duplicated']:,}, unknown {ids['unknown']:,}")
    table.add_row("finish_reason", ", ".join(f"{k} {v:,} ({_share(v, n):.1%})" for k, v in
                                             data["finish_reasons"].items()))
    if data["cut_by_train_window"]:
        table.add_row("train window", f"{data['cut_by_train_window']:,} of the length replies ended at their "
                                      "--train-window room (what the trainer keeps; not damage)")
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
    calls = data["tool_calls"]
    invalid = sum(calls["invalid"].values())
    table.add_row("tool calls", f"{calls['calls']:,} in {calls['records_with_calls']:,} record(s); invalid {invalid:,}"
                  + (f" ({', '.join(f'{k} {v}' for k, v in calls['invalid'].items())})" if invalid else "")
                  + (f"; cut off by max_tokens {calls['truncated']:,}" if calls["truncated"] else ""))
    table.add_row("loops", loops.row(data["loops"]))
    table.add_row("models", ", ".join(f"{m} {c:,}" for m, c in data["models"].items()))
    if counts["with_diverged_field"]:
        table.add_row("diverged", f"{counts['diverged']:,} of {counts['with_diverged_field']:,}")
    console.print(table)
    mix = Table(title="Per endpoint", title_justify="left")
    for column in ("endpoint", "records", "mean tokens", "stub-like", "truncated"):
        mix.add_column(column, justify="left" if column == "endpoint" else "right")
    for url, e in data["endpoints"].items():
        mix.add_row(url, f"{e['records']:,}", f"{_share(e['tokens'], e['records']):.0f}",
                    f"{_share(e['stubs'], e['records']):.1%}", f"{_share(e['truncated'], e['records']):.1%}")
    console.print(mix)
    render_accept(data["accept_length"], console)
    shown = (("stub-like", stubs["examples"] if stubs["share"] > 0.01 else []),
             ("invalid tool calls", calls["examples"]), ("looping replies", data["loops"]["examples"]),
             ("unreadable lines", data["unreadable_examples"]), ("damaged segments", data["damaged_segments"]))
    for label, examples in shown:
        if examples:
            console.print(f"[bold]{label}, e.g.:[/bold]")
            for example in examples:
                console.print(f"  {example}", markup=False, highlight=False, soft_wrap=True)
    if ids is not None:
        for kind, examples in ids["examples"].items():
            console.print(f"[bold]{kind} ids, e.g.:[/bold] " + "; ".join(examples), highlight=False, soft_wrap=True)
    for finding in data["findings"]:
        style = "red" if finding["level"] == "fail" else "yellow"
        console.print(f"[{style}]{finding['level'].upper()}[/{style}] {finding['message']}", highlight=False)
    colour = {"healthy": "green", "broken": "bold red", "incomplete": "yellow"}[data["verdict"]]
    cut = data["finish_reasons"].get("length", 0)
    expected = (f" ({cut:,} completion(s) cut off by max_tokens: truncated, which is expected, not broken)"
                if cut and data["verdict"] != "broken" else "")
    console.print(f"[{colour}]verdict: {data['verdict'].upper()}[/{colour}]{expected}", highlight=False)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m client.audit", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", metavar="DIR|s3://BUCKET/PREFIX",
                        help="the run's --out directory (or its segments/), one segment file, or the S3 prefix")
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
    args = build_parser().parse_args(argv)
    limits = Thresholds(short_tokens=args.short_tokens, max_stub_share=args.max_stub_share,
                        max_empty_reasoning_share=args.max_empty_reasoning_share,
                        max_bad_tool_call_share=args.max_bad_tool_call_share)
    try:
        scan, report = scan_results(args.results, limits.short_tokens, args.s3_endpoint_url)
        ids = check_ids(args.results, scan.ids, args.prompts, args.s3_endpoint_url) if args.prompts else None
        if ids is not None and scan.prompt_digests:
            edited, examples = edited_prompts(args.prompts, scan.prompt_digests)
            if edited:
                ids = replace(ids, edited=edited, examples={**ids.examples, "edited": examples},
                              redo_advice=S3_REDO_ADVICE if args.results.startswith("s3://") else LOCAL_REDO_ADVICE)
        if args.histogram is not None:
            histogram_png(scan.lengths, args.histogram, short_tokens=limits.short_tokens,
                          title=f"COMPLETION LENGTHS OF {scan.records} RECORDS")
    except (ConfigError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"error: {getattr(exc, 'filename', None) or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    findings = judge(scan, ids, report, limits)
    data = summary(scan, ids, report, findings, limits)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        render(data, Console(highlight=False, width=None if sys.stdout.isatty() else 140))
    return int(data["exit_code"])
