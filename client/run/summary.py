"""The end-of-run summary: what was done, and the reconciliation that accounts for every input record."""

from __future__ import annotations

from pathlib import Path

from client.core.durations import format_duration
from client.core.stats import StatsSnapshot
from client.local.source import SourceCounts
from client.run.console import say
from client.run.swarm import SwarmOutcome


def print_summary(counts: SourceCounts, snap: StatsSnapshot, outcome: SwarmOutcome, failures_path: Path, *,
                  turns: str) -> None:
    say("")
    unit = "event(s)" if turns == "all" else "done"
    say(f"run {'stopped' if outcome.interrupted else 'ended'} after {format_duration(snap.elapsed_s)}: "
        f"{snap.done:,} {unit}, {snap.failed:,} failed, {snap.retries:,} retries, {snap.truncated:,} truncated "
        f"(finish_reason length), {snap.completion_tokens:,} completion tokens"
        + (f", {snap.loops_stopped:,} stopped as loops" if snap.loops_stopped else ""))
    if turns == "all":
        worked = counts.yielded
        say(f"conversations: inputs {counts.records:,} = worked on {worked:,} + already-finished "
            f"{counts.skipped_done:,} + skipped-invalid {counts.invalid:,} + duplicate {counts.duplicates:,} "
            f"+ other-shards {counts.other_shards:,}; this run finished {outcome.conversations_finished:,} "
            f"({outcome.diverged:,} ended early where the regenerated tool calls diverged from the source"
            + (f", {outcome.cut_short:,} at a turn that did not end by itself (cut by max_tokens or stopped as a "
               "loop), not continued" if outcome.cut_short else "") + ")")
    else:
        fresh = counts.records - counts.skipped_done - counts.other_shards - counts.skipped_too_long
        not_reached = fresh - counts.invalid - counts.duplicates - snap.done - snap.failed
        permanent = [f"too_long {snap.too_long - snap.fills_window:,}" if snap.too_long > snap.fills_window else "",
                     f"fills_window {snap.fills_window:,}" if snap.fills_window else ""]
        too_long = f" ({', '.join(p for p in permanent if p)})" if snap.too_long else ""
        say(f"reconciliation: inputs {counts.records:,} = done {snap.done:,} + failed {snap.failed:,}{too_long} "
            f"+ skipped-invalid {counts.invalid:,} + duplicate {counts.duplicates:,} "
            f"+ already-done {counts.skipped_done:,} + other-shards {counts.other_shards:,}"
            + (f" + too-long-or-fills-window-earlier {counts.skipped_too_long:,}" if counts.skipped_too_long else "")
            + (f" + not-yet-sent {not_reached:,}" if not_reached else ""))
    if counts.invalid or counts.duplicates:
        say(f"{counts.invalid + counts.duplicates} record(s) were skipped as invalid; each was reported above "
            "(first few) with file:line. Fix them and run again, or pass --strict to stop on the first.")
    if snap.fills_window:
        say(f"{snap.fills_window} prompt(s) alone fill the training window (fills_window, in {failures_path}): "
            "not sent, and left out by later runs unless --retry-too-long")
    if snap.too_long > snap.fills_window:
        say(f"{snap.too_long - snap.fills_window} prompt(s) are longer than the server's context (too_long, in "
            f"{failures_path}): "
            "they are not retried by the next run; shorten them, raise the context, or lower --max-tokens, "
            "then pass --retry-too-long")
    if outcome.window_miscounts:
        say(f"warning: {outcome.window_miscounts:,} record(s) were capped by a --train-window count that disagrees "
            f"with the server's own usage.prompt_tokens (beyond the tolerance of client.core.window_count), e.g. "
            f"{outcome.window_miscount_example}. Their max_tokens were set from a wrong count: check the server's "
            "tokenize route (or --tokenizer); client.audit lists them.")
    if snap.failed > snap.too_long:
        say(f"{snap.failed - snap.too_long} request(s) failed after all attempts; see {failures_path}. "
            "Run the same command again to retry them.")
