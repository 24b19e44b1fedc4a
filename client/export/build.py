"""Results -> checked rows -> the training file: the part of `client.export` that needs the `export` extra.

This module owns the pass over the results: which records are trusted (duplicates, truncated, counts
that differ from the server's usage), the template-fidelity check of every record with exact ids
(`client.export.fidelity`, in order on worker processes: `client.export.checking`), the grouping of
`--turns all` turns into conversations, the trainer's window (`client.export.rows`), and the report's
figures, every record left out counted under one reason (shown as it goes by `client.export.progress`).
Rows are streamed to OUT.part and renamed to OUT at the end, unless the export is refused (records
without ids under `require_exact`, or too many rows the trainer's template renders differently); then
OUT.part is removed and OUT left as it was.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from client.core.entry import interrupts_held
from client.core.ids import id_hash
from client.export import fidelity
from client.export.checking import Checked, CheckSettings, OrderedChecks
from client.export.formats import DEFAULT_FORMAT, FORMATS
from client.export.progress import ExportProgress
from client.export.render import ChatTokenizer, RenderError, Tokens, has_exact_ids, render_record
from client.export.rows import ENDED_BY_ITSELF, Conversations, Sample, Turn, Window
from client.export.writers import Writer, open_writer
from client.results.reader import ReadReport, iter_records
from client.results.rules import usage_int

__all__ = ["ChatTokenizer", "ExportOptions", "ExportReport", "export", "summary"]


@dataclass(frozen=True, slots=True)
class ExportOptions:
    fmt: str = DEFAULT_FORMAT
    rows: str = "turn"  # or "conversation": one row per conversation of a --turns all run
    window: Window = field(default_factory=Window)
    drop_truncated: bool = False
    keep_mismatched: bool = False
    require_exact: bool = False
    template_check: str = "auto"  # "all" | "off"; auto: with --format specforge
    max_template_mismatch: float = 0.01  # the share of checked rows above which the export is refused
    allow_template_mismatch: bool = False
    # SpecForge's data.train_only_last_turn as the check assumes it: "auto" judges each row without it first,
    # and a row that matches only with it is written and makes the setting required (`trainer_settings`).
    train_only_last_turn: fidelity.LastTurn = "auto"
    row_group_size: int = 2048
    jobs: int = 1  # processes for the template check (client.export.checking)


# The report's counts of records left out, one reason each, in the order the summary names them.
LEFT_OUT_REASONS = ("dropped_truncated", "dropped_loops", "unreproducible", "template_left_out", "earlier_turns",
                    "dropped_long", "dropped_unsupervised", "mismatched_left_out", "failed", "without_ids",
                    "duplicates", "malformed")


@dataclass
class ExportReport:
    records: int = 0
    exported: int = 0  # records (turns) written
    rows: int = 0  # rows written: turns, or conversations with --rows conversation
    exact: int = 0
    rendered: int = 0
    dropped_truncated: int = 0
    dropped_loops: int = 0  # replies stopped as loops (finish_reason repetition): never training data
    unreproducible: int = 0  # specforge: replies that did not end by themselves, which the trainer would close
    template_left_out: int = 0  # specforge: rows the trainer renders differently, left out below the refusal share
    earlier_turns: int = 0  # --rows conversation: turns before a conversation's last, trained in no row
    unreadable: int = 0  # result lines that are not JSON records (a torn last line is not counted)
    malformed: int = 0  # records whose fields cannot be read as a ResultRecord's
    duplicates: int = 0
    completion_mismatch: int = 0
    prompt_mismatch: int = 0
    mismatched_left_out: int = 0  # records whose counts differ from the server's, left out (one a record)
    kept_mismatched: int = 0
    failed: int = 0
    without_ids: int = 0  # --require-exact-ids: records that would have been re-rendered
    cut: int = 0  # rows longer than the window, cut at it
    dropped_long: int = 0  # rows (records) longer than the window, dropped (--over-length drop)
    dropped_unsupervised: int = 0  # rows (records) the cut left with too few supervised tokens
    unfinished_conversations: int = 0  # --rows conversation: written with the turns there are
    last_turn_only: int = 0  # specforge rows written that SpecForge trains exactly only with train_only_last_turn
    train_only_last_turn: bool = False  # specforge: SpecForge must run with data.train_only_last_turn: true
    template_refused: bool = False
    written: bool = False  # OUT was written
    tokens: int = 0
    template: fidelity.FidelityReport = field(default_factory=fidelity.FidelityReport)
    problems: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def note(self, kind: str, where: str, detail: str) -> None:
        self.problems[kind] += 1
        if len(self.examples) < 20:
            self.examples.append(f"{where}: {detail}")

    @property
    def dropped_window(self) -> int:
        return self.dropped_long + self.dropped_unsupervised

    def left_out_by_reason(self) -> dict[str, int]:
        """Every record read and not exported, under the one reason it was left out: with `exported` they add
        up to `records` (a conversation row's turns count one each)."""
        return {reason: getattr(self, reason) for reason in LEFT_OUT_REASONS}

    @property
    def left_out(self) -> int:
        """Records neither exported nor left out by a rule the user asked for or the format has."""
        return (self.records - self.exported - self.dropped_truncated - self.dropped_window - self.dropped_loops
                - self.unreproducible - self.earlier_turns)


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


class _Pass:
    """One pass over the results into one writer."""

    def __init__(self, tok: ChatTokenizer, part: Path, options: ExportOptions) -> None:
        self.tok = tok
        self.options = options
        self.report = ExportReport()
        self.seen: set[int] = set()
        self.writer = open_writer(options.fmt, part, options.row_group_size)
        self.conversations = Conversations(tok.content_format) if options.rows == "conversation" else None
        # By default only where the trainer re-renders the text: the check costs a render and a
        # tokenization of every row, and the tokenized formats carry the server's ids anyway.
        self.format = FORMATS[options.fmt]
        self.checking = options.template_check == "all" or (options.template_check == "auto"
                                                              and self.format.rerendered)
        window = options.window
        settings = CheckSettings(options.train_only_last_turn, window.max_length if window.over == "cut" else None)
        self.checks = OrderedChecks(tok, settings, self._checked, jobs=options.jobs)

    def record(self, where: str, record: dict[str, Any]) -> None:
        report = self.report
        report.records += 1
        key = id_hash(record["id"])
        if key in self.seen:
            report.duplicates += 1
            report.note("duplicate id", where, "id already exported from an earlier line; left out")
            return
        self.seen.add(key)
        try:
            self._record(where, record)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            # A record this tool did not write as it writes them (hand-edited, or from another tool): left
            # out and named, and the rest of the export goes on.
            report.malformed += 1
            report.note("malformed record", where, f"cannot be read as a result record: {type(exc).__name__}: {exc}")

    def _record(self, where: str, record: dict[str, Any]) -> None:
        report, options = self.report, self.options
        finish = record.get("finish_reason")
        if finish == "repetition":
            report.dropped_loops += 1
            return
        if options.drop_truncated and finish == "length":
            report.dropped_truncated += 1
            return
        if options.require_exact and not has_exact_ids(record):
            report.without_ids += 1
            report.note("no server token ids", where, "would be re-rendered (--require-exact-ids)")
            return
        try:
            tokens = render_record(record, self.tok)
        except RenderError as exc:
            report.failed += 1
            report.note("render failed", where, str(exc))
            return
        if self.format.rerendered and finish not in ENDED_BY_ITSELF and not self._past_window(tokens):
            # SpecForge's template closes every assistant turn (`</think>`, `<|im_end|>`) and parses tool-call
            # arguments or renders `{}`: a reply cut short would be trained on tokens the model never wrote,
            # unless the trainer's own max_length cuts the row before them.
            report.unreproducible += 1  # a rule of the format, said once in the summary, not a problem per row
            return
        problems = _check(record, tokens.prompt, tokens.completion)
        for kind, detail in problems:
            setattr(report, f"{kind}_mismatch", getattr(report, f"{kind}_mismatch") + 1)
            report.note(f"{kind} count mismatch", where, detail + ("" if tokens.exact else " (re-rendered)"))
        if problems and not options.keep_mismatched:
            report.mismatched_left_out += 1
            return
        report.kept_mismatched += bool(problems)
        report.exact += tokens.exact
        report.rendered += not tokens.exact
        tools = tokens.tools if not tokens.exact else record.get("tools") or None
        turn = Turn(record, tokens.prompt, tokens.completion, tools, where)
        if self.conversations is None:
            self.emit(Sample(str(record["id"]), (turn,), self.tok.content_format))
        else:
            sample = self.conversations.add(turn)
            if sample is not None:
                self.emit(sample)

    def _past_window(self, tokens: Tokens) -> bool:
        """The row reaches the trainer's window, which cuts it at --max-length: whatever the template adds
        after the reply's last token is cut away with the rest."""
        window = self.options.window
        return (window.max_length is not None and window.over == "cut"
                and len(tokens.prompt) + len(tokens.completion) >= window.max_length)

    def emit(self, sample: Sample) -> None:
        self.checks.add(sample, checked=self.checking and has_exact_ids(sample.last.record))

    def _checked(self, sample: Sample, verdict: Checked | None) -> None:
        """A sample back from the check, in the order it was emitted: written, or left out and counted."""
        report, turn = self.report, sample.last
        if isinstance(verdict, str):
            report.malformed += len(sample.turns)
            report.note("malformed record", turn.where, verdict)
            return
        if verdict is None:
            report.template.unchecked += 1
        else:
            report.template.add(turn.where, turn.record, verdict)
            if verdict.matched:
                sample = replace(sample, turns=(*sample.turns[:-1], replace(turn, tools=verdict.tools)))
            elif self.format.rerendered and not self.options.allow_template_mismatch:
                report.template_left_out += len(sample.turns)
                return
        self._write(sample, last_turn_only=verdict is not None and verdict.last_turn_only)

    def _write(self, sample: Sample, *, last_turn_only: bool = False) -> None:
        report = self.report
        verdict, input_ids, loss_mask = self.options.window.fit(sample, self.options.fmt)
        # A conversation row trains its last turn; the turns before it are trained in their own rows only.
        earlier = len(sample.turns) - 1
        report.earlier_turns += earlier
        if verdict == "drop-long":
            report.dropped_long += 1
            return
        if verdict == "drop-unsupervised":
            report.dropped_unsupervised += 1
            return
        report.cut += verdict == "cut"
        report.last_turn_only += last_turn_only and self.format.rerendered
        report.exported += 1
        report.rows += 1
        report.tokens += len(input_ids)
        self.writer.add(sample, input_ids, loss_mask)

    def finish(self) -> None:
        if self.conversations is not None:
            rest = self.conversations.rest()
            self.report.unfinished_conversations = len(rest)
            for sample in rest:
                self.emit(sample)
        self.checks.finish()

    def read(self, reading: ReadReport) -> None:
        """Lines that were not records: damage the user must hear of (a torn last line is a write the crash
        cut short, regenerated on resume, so it is not counted)."""
        self.report.unreadable = reading.corrupt + len(reading.damaged)
        for problem in [*reading.examples, *reading.damaged]:
            if problem.problem.startswith("torn"):
                continue
            self.report.note("unreadable line", f"{problem.where}:{problem.line}", problem.problem)

    def refused_by_template(self) -> bool:
        template = self.report.template
        # Only a trainer that re-renders the text is fed the template's tokens; the tokenized formats carry
        # the server's ids, so for them the check is a report.
        return (self.format.rerendered and not self.options.allow_template_mismatch and template.checked > 0
                and template.mismatch_share > self.options.max_template_mismatch)


def _discard(writer: Writer, part: Path, checks: OrderedChecks) -> None:
    """Close and remove OUT.part. A second Ctrl-C or SIGTERM (people press twice) waits until it is gone: the
    first already stops the export, and the second must not skip the removal; the inner `finally` covers
    one that came before the hold. Closing a writer whose file already failed raises again (pyarrow:
    "Operation on closed file"); the first error is the one."""
    with interrupts_held():
        try:
            with contextlib.suppress(Exception):
                checks.close()  # its worker processes end with the export
            with contextlib.suppress(Exception):
                writer.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()


def export(location: str, tok: ChatTokenizer, out: Path, options: ExportOptions,
           s3_endpoint_url: str | None = None) -> ExportReport:
    """Write OUT from the results at `location`; the report says what was written, left out and why."""
    part = out.with_name(out.name + ".part")
    run = _Pass(tok, part, options)
    try:
        reading = ReadReport()
        report = run.report
        with ExportProgress(lambda: (report.records, report.template.checked, reading.expected)) as progress:
            for item, record in iter_records(location, reading, s3_endpoint_url=s3_endpoint_url):
                run.record(f"{item.where}:{item.line}: {record['id']}", record)
                progress.tick()
            run.finish()
        run.read(reading)
        run.report.template_refused = run.refused_by_template()
        # The setting the file is written for: asked for, or needed by a row written (an agentic row under
        # Qwen3.5/3.6, which SpecForge trains exactly only on its last span).
        run.report.train_only_last_turn = run.format.rerendered and (
            options.train_only_last_turn == "on" or run.report.last_turn_only > 0)
        finished = not run.report.without_ids and not run.report.template_refused
        run.writer.close()
    except BaseException:
        # A full disk, Ctrl-C or SIGTERM: no partial OUT.part is left to fill the disk.
        _discard(run.writer, part, run.checks)
        raise
    if finished:
        os.replace(part, out)
        run.report.written = True
    else:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()
    return run.report


def summary(report: ExportReport) -> dict[str, Any]:
    data: dict[str, Any] = {k: v for k, v in vars(report).items() if k not in ("problems", "examples", "template")}
    data["problems"] = dict(report.problems)
    data["examples"] = report.examples
    data["left_out"] = report.left_out
    data["left_out_by_reason"] = report.left_out_by_reason()
    data["template"] = report.template.summary()
    return data
