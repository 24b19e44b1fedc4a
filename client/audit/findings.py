"""The audit's findings: each a rule that turns the scan's counts into a sentence a person can act on, at
level "fail" (the data is broken) or "warn". `judge` runs the rules in order; adding a finding is one
function and one line in RULES.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from client.audit import loops
from client.audit.scan import IdCheck, Scan, mixed_settings
from client.results.reader import ReadReport


@dataclass(frozen=True, slots=True)
class Thresholds:
    short_tokens: int = 8
    max_stub_share: float = 0.05
    max_empty_reasoning_share: float = 0.10
    max_bad_tool_call_share: float = 0.05
    warn_truncated_share: float = 0.20


@dataclass(frozen=True, slots=True)
class Finding:
    level: str  # "fail" or "warn"
    message: str


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the rules read: the scan of the results, the id check (with --prompts), the reader's report."""

    scan: Scan
    ids: IdCheck | None
    report: ReadReport
    limits: Thresholds


Rule = Callable[[Evidence], Finding | None]

# What to do about edited prompts. `client.run --redo-edited` rewrites local segments; an S3 run's segments
# are uploaded and never rewritten, so there the edited prompts need ids of their own.
LOCAL_REDO_ADVICE = "run client.run with --redo-edited to generate them again"
S3_REDO_ADVICE = ("client.run --redo-edited rewrites local segments only, and an S3 run's segments are never "
                  "rewritten: to generate the edited prompts again, give them new ids in the prompt file and run "
                  "the same client.run --s3 command (the old results stay under the old ids)")


def share(part: float, whole: int) -> float:
    return part / whole if whole else 0.0


def stubs(e: Evidence) -> Finding | None:
    scan, limits = e.scan, e.limits
    stubbed = share(max(scan.stub_pattern, scan.short), scan.records)
    if stubbed > limits.max_stub_share:
        most = "most completions are" if stubbed > 0.5 else f"{stubbed:.0%} of completions are"
        return Finding("fail", f"{most} stubs: {scan.stub_pattern:,} match the '<think></think> OK.' pattern "
                               f"and {scan.short:,} have under {limits.short_tokens} tokens and no tool call")
    if scan.stub_pattern or scan.short:
        return Finding("warn", f"{stubbed:.1%} of completions look like stubs (short or 'OK.')")
    return None


def empty_reasoning(e: Evidence) -> Finding | None:
    scan = e.scan
    empty = share(scan.empty_reasoning, scan.thinking_on)
    if empty > e.limits.max_empty_reasoning_share:
        return Finding("fail", "reasoning is missing although thinking was requested: "
                               f"{scan.empty_reasoning:,} of {scan.thinking_on:,} thinking-on completions "
                               f"({empty:.0%}) have no reasoning")
    if scan.empty_reasoning:
        return Finding("warn", f"{scan.empty_reasoning:,} thinking-on completion(s) have empty reasoning")
    return None


def bad_tool_calls(e: Evidence) -> Finding | None:
    scan = e.scan
    bad = sum(scan.bad_calls.values())
    whole = scan.tool_calls - scan.truncated_calls  # a call cut off by max_tokens is truncated, not invalid
    if bad and share(bad, whole) > e.limits.max_bad_tool_call_share:
        return Finding("fail", f"{bad:,} of {whole:,} tool calls are invalid "
                               f"({', '.join(f'{k}: {v}' for k, v in scan.bad_calls.most_common())})")
    if bad:
        return Finding("warn", f"{bad:,} tool call(s) are invalid")
    return None


def truncated_calls(e: Evidence) -> Finding | None:
    if not e.scan.truncated_calls:
        return None
    return Finding("warn", f"{e.scan.truncated_calls:,} tool call(s) were cut off by max_tokens (finish_reason "
                           "length): counted as truncated, not invalid (client.export leaves them out of specforge "
                           "rows; --drop-truncated out of every format)")


def mixed_models(e: Evidence) -> Finding | None:
    if len(e.scan.models) <= 1:
        return None
    return Finding("fail", "the results come from more than one model ("
                           + ", ".join(f"{m}: {c:,}" for m, c in e.scan.models.most_common())
                           + "); a run must come from one model")


def truncated(e: Evidence) -> Finding | None:
    # A reply cut at its training window's room is what the trainer keeps anyway: not damage.
    cut = share(e.scan.finish.get("length", 0) - e.scan.window_cuts, e.scan.records)
    if cut <= e.limits.warn_truncated_share:
        return None
    return Finding("warn", f"{cut:.0%} of completions hit max_tokens (finish_reason length); consider a larger cap")


def looping(e: Evidence) -> Finding | None:
    message = loops.finding(e.scan.loops.summary(e.scan.records, sum(e.scan.lengths)))
    return Finding("warn", message) if message else None


def odd_finish_reasons(e: Evidence) -> Finding | None:
    odd = {k: v for k, v in e.scan.finish.items() if k not in ("stop", "length", "tool_calls", loops.REPETITION)}
    if not odd:
        return None
    return Finding("warn", "unusual finish reasons: " + ", ".join(f"{k}: {v:,}" for k, v in odd.items()))


def no_usage(e: Evidence) -> Finding | None:
    if not e.scan.no_usage:
        return None
    return Finding("warn", f"{e.scan.no_usage:,} record(s) carry no usage.completion_tokens")


def some_without_ids(e: Evidence) -> Finding | None:
    # A run whose servers give ids has a record without them: a server that stopped giving them, or a run
    # resumed with other --token-ids. Those records cannot be exported exactly.
    scan = e.scan
    without = scan.records - scan.with_ids
    if not (scan.with_ids and without):
        return None
    return Finding("warn", f"{without:,} of {scan.records:,} record(s) carry no token ids while {scan.with_ids:,} do; "
                           "client.export re-renders them (--require-exact-ids refuses the run)")


def mixed_sampling(e: Evidence) -> Finding | None:
    return Finding("warn", mixed_settings(e.scan.sampling_mix())) if len(e.scan.samplings) > 1 else None


def diverged(e: Evidence) -> Finding | None:
    if not e.scan.diverged:
        return None
    return Finding("warn", f"{e.scan.diverged:,} conversation(s) ended early where the regenerated tool calls "
                           "diverged from the source's")


def window_miscounts(e: Evidence) -> Finding | None:
    # The window's cap came from a count the server's own usage contradicts: replies were cut shorter than
    # the trainer keeps (count too high) or ran past its window (too low).
    scan = e.scan
    if not scan.window_miscounts:
        return None
    return Finding("fail", f"{scan.window_miscounts:,} record(s) were capped by a --train-window prompt count that "
                           f"disagrees with their usage.prompt_tokens ({scan.window_miscount_examples[0]}): their "
                           "max_tokens came from a wrong count, so their cuts are not the window's. Check the "
                           "server's tokenize route (or --tokenizer), then regenerate them")


def broken_continuations(e: Evidence) -> Finding | None:
    broken = e.scan.continued_broken
    if not broken:
        return None
    return Finding("fail", f"{len(broken):,} record(s) say they were continued, and their `continued` does not "
                           f"describe their reply ({broken[0]}): which attempt made which tokens is unknown; "
                           "regenerate them")


def duplicate_events(e: Evidence) -> Finding | None:
    if not (e.scan.conversation_events and e.scan.duplicate_events()):
        return None
    return Finding("fail", f"{e.scan.duplicate_events():,} multi-turn event(s) were written more than once")


def damaged_segments(e: Evidence) -> Finding | None:
    damaged = e.report.damaged
    if not damaged:
        return None
    return Finding("fail", f"{len(damaged):,} S3 segment(s) are not the bytes their manifest lists ({damaged[0]}): "
                           "their records were not read and their ids count as missing. Run client.run with the "
                           "same --s3 again: it regenerates those ids (and its own writer drops the damaged "
                           "entries from its manifest)")


def unreadable_lines(e: Evidence) -> Finding | None:
    report = e.report
    if not (report.corrupt or report.torn_tails):
        return None
    return Finding("warn", f"{report.corrupt:,} unreadable line(s) and {report.torn_tails:,} torn segment tail(s) "
                           "were skipped")


def duplicated_ids(e: Evidence) -> Finding | None:
    ids = e.ids
    if ids is None or not ids.duplicated:
        return None
    return Finding("fail", f"{ids.duplicated:,} id(s) were written more than once ({ids.duplicate_lines:,} extra "
                           "line(s))")


def unknown_ids(e: Evidence) -> Finding | None:
    if e.ids is None or not e.ids.unknown:
        return None
    return Finding("fail", f"{e.ids.unknown:,} result id(s) are not in the prompt set; are these the right --prompts?")


def edited(e: Evidence) -> Finding | None:
    ids = e.ids
    if ids is None or not ids.edited:
        return None
    return Finding("warn", f"{ids.edited:,} done prompt(s) were edited after their result was written (the prompt "
                           "differs from the one the result answers, e.g. "
                           f"{'; '.join(ids.examples.get('edited', [])[:3])}): {ids.redo_advice}")


def invalid_prompts(e: Evidence) -> Finding | None:
    ids = e.ids
    if ids is None or not ids.invalid_prompts:
        return None
    return Finding("warn", f"{ids.invalid_prompts:,} line(s) of the prompt files are not valid records (e.g. "
                           f"{ids.examples['invalid_prompts'][0]}); the run skips them, so they are not counted as "
                           "missing: fix them and run again to have them generated")


def missing(e: Evidence) -> Finding | None:
    ids = e.ids
    if ids is None or not ids.missing:
        return None
    return Finding("warn", f"incomplete: {ids.missing:,} of {ids.prompts:,} prompt id(s) have no result")


RULES: tuple[Rule, ...] = (
    stubs, empty_reasoning, bad_tool_calls, truncated_calls, mixed_models, truncated, looping, odd_finish_reasons,
    no_usage, some_without_ids, mixed_sampling, diverged, window_miscounts, broken_continuations, duplicate_events,
    damaged_segments,
    unreadable_lines, duplicated_ids, unknown_ids, edited, invalid_prompts, missing,
)


def judge(scan: Scan, ids: IdCheck | None, report: ReadReport, limits: Thresholds) -> list[Finding]:
    """Counts -> findings, in the order of RULES."""
    if scan.records == 0:
        return [Finding("fail", "there are no result records at all")]
    evidence = Evidence(scan, ids, report, limits)
    return [finding for rule in RULES if (finding := rule(evidence)) is not None]
