"""The end-of-run summary: what was done, and the reconciliation that accounts for every input record.

Its tokens are the progress line's: the completion tokens of written replies, then those streamed that no
written record holds (requests a stop cancelled mid-stream, failed attempts), each named. A request
cancelled in flight is counted apart from the prompts never sent, and the first few are named by id.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from client.core.durations import format_duration
from client.core.stats import StatsSnapshot
from client.engine.swarm import SwarmOutcome
from client.local.source import SourceCounts
from client.run.console import say


def print_summary(counts: SourceCounts, snap: StatsSnapshot, outcome: SwarmOutcome, failures_path: Path, *,
                  turns: str) -> None:
    say("")
    say(_headline(snap, outcome, turns))
    if snap.unwritten_tokens:
        say(_unwritten(snap))
    if snap.cancelled_in_flight:
        say(_cancelled(snap))
    say(_conversations(counts, outcome) if turns == "all" else _reconciliation(counts, snap))
    for applies, advice in _ADVICE:
        if applies(counts, snap, outcome):
            say(advice(counts, snap, outcome, failures_path))


def _headline(snap: StatsSnapshot, outcome: SwarmOutcome, turns: str) -> str:
    unit = "event(s)" if turns == "all" else "done"
    return (f"run {'stopped' if outcome.interrupted else 'ended'} after {format_duration(snap.elapsed_s)}: "
            f"{snap.done:,} {unit}, {snap.failed:,} failed, {snap.retries:,} retries, {snap.truncated:,} truncated "
            f"(finish_reason length), {snap.completion_tokens:,} completion tokens written"
            + (f", {snap.loops_stopped:,} stopped as loops" if snap.loops_stopped else "")
            + (f", {snap.continued:,} continued from their ids ({snap.continued_kept:,} tokens not generated again)"
               if snap.continued else ""))


def _unwritten(snap: StatsSnapshot) -> str:
    stopped = (f"{snap.cancelled_in_flight:,} request(s) cancelled in flight by the stop"
               if snap.cancelled_in_flight else "")
    failed = "attempts that failed and were retried or given up" if snap.retries or snap.failed else ""
    why = " and ".join(part for part in (stopped, failed) if part) or "requests that did not finish"
    return (f"{snap.unwritten_tokens:,} more token(s) were streamed but are in no written record: {why} "
            "(the progress line showed them as in flight)")


def _cancelled(snap: StatsSnapshot) -> str:
    more = snap.cancelled_in_flight - len(snap.cancelled_ids)
    named = ", ".join(json.dumps(i, ensure_ascii=False) for i in snap.cancelled_ids)  # any string is an id
    return f"cancelled in flight (sent again by the next run): {named}" + (f" and {more:,} more" if more > 0 else "")


def _conversations(counts: SourceCounts, outcome: SwarmOutcome) -> str:
    cut_short = (f", {outcome.cut_short:,} at a turn that did not end by itself (cut by max_tokens or stopped as a "
                 "loop), not continued" if outcome.cut_short else "")
    return (f"conversations: inputs {counts.records:,} = worked on {counts.yielded:,} + already-finished "
            f"{counts.skipped_done:,} + skipped-invalid {counts.invalid:,} + duplicate {counts.duplicates:,} "
            f"+ other-shards {counts.other_shards:,}; this run finished {outcome.conversations_finished:,} "
            f"({outcome.diverged:,} ended early where the regenerated tool calls diverged from the source"
            f"{cut_short})")


def _reconciliation(counts: SourceCounts, snap: StatsSnapshot) -> str:
    """Every input record in exactly one term; a term that is zero and rare is left out."""
    fresh = counts.records - counts.skipped_done - counts.other_shards - counts.skipped_too_long
    cancelled = snap.cancelled_in_flight
    not_reached = fresh - counts.invalid - counts.duplicates - snap.done - snap.failed - cancelled
    permanent = [f"too_long {snap.too_long - snap.fills_window:,}" if snap.too_long > snap.fills_window else "",
                 f"fills_window {snap.fills_window:,}" if snap.fills_window else ""]
    too_long = f" ({', '.join(p for p in permanent if p)})" if snap.too_long else ""
    optional = [("too-long-or-fills-window-earlier", counts.skipped_too_long), ("cancelled-in-flight", cancelled),
                ("not-yet-sent", not_reached)]
    return (f"reconciliation: inputs {counts.records:,} = done {snap.done:,} + failed {snap.failed:,}{too_long} "
            f"+ skipped-invalid {counts.invalid:,} + duplicate {counts.duplicates:,} "
            f"+ already-done {counts.skipped_done:,} + other-shards {counts.other_shards:,}"
            + "".join(f" + {name} {value:,}" for name, value in optional if value))


_Applies = Callable[[SourceCounts, StatsSnapshot, SwarmOutcome], bool]
_Advice = Callable[[SourceCounts, StatsSnapshot, SwarmOutcome, Path], str]

# What to do next, one rule a row, in the order they are said.
_ADVICE: tuple[tuple[_Applies, _Advice], ...] = (
    (lambda counts, snap, outcome: bool(counts.invalid or counts.duplicates),
     lambda counts, snap, outcome, failures: (
         f"{counts.invalid + counts.duplicates} record(s) were skipped as invalid; each was reported above "
         "(first few) with file:line. Fix them and run again, or pass --strict to stop on the first.")),
    (lambda counts, snap, outcome: bool(snap.fills_window),
     lambda counts, snap, outcome, failures: (
         f"{snap.fills_window} prompt(s) alone fill the training window (fills_window, in {failures}): "
         "not sent, and left out by later runs unless --retry-too-long")),
    (lambda counts, snap, outcome: snap.too_long > snap.fills_window,
     lambda counts, snap, outcome, failures: (
         f"{snap.too_long - snap.fills_window} prompt(s) are longer than the server's context (too_long, in "
         f"{failures}): they are not retried by the next run; shorten them, raise the context, or lower "
         "--max-tokens, then pass --retry-too-long")),
    (lambda counts, snap, outcome: bool(outcome.window_miscounts),
     lambda counts, snap, outcome, failures: (
         f"warning: {outcome.window_miscounts:,} record(s) were capped by a --train-window count that disagrees "
         f"with the server's own usage.prompt_tokens (beyond the tolerance of client.core.window_count), e.g. "
         f"{outcome.window_miscount_example}. Their max_tokens were set from a wrong count: check the server's "
         "tokenize route (or --tokenizer); client.audit lists them.")),
    (lambda counts, snap, outcome: snap.failed > snap.too_long,
     lambda counts, snap, outcome, failures: (
         f"{snap.failed - snap.too_long} request(s) failed after all attempts; see {failures}. "
         "Run the same command again to retry them.")),
)
