"""Per result record: its completion tokens past the trainer's window, and those a loop stop would have
saved. Pure arithmetic; `client.estimate.purpose` describes the method and projects it onto the set."""

from __future__ import annotations

from typing import Any

from client.loops.repetition import TEXT_RULE, Kind, RepetitionRule, find_repetition
from client.loops.repetition_rule import STOP_SHARE

REPETITION = "repetition"  # the finish_reason of a reply a loop stop ended
DFLASH_WINDOW = 4096  # SpecForge's max_length in the DFlash recipe


def kept_in_window(completion: int, prompt: int, window: int) -> int:
    """Completion tokens a run with `--train-window window` would still generate."""
    return min(completion, max(0, window - prompt))


def past_window(completion: int, prompt: int, window: int) -> int:
    """Completion tokens past the trainer's window: min(L, max(0, P + L - N))."""
    return completion - kept_in_window(completion, prompt, window)


def loop_stop_point(text_length: int, block: int, span: int, rule: RepetitionRule = TEXT_RULE,
                    kind: Kind = "exact") -> float:
    """The character at which a stream's detector would stop a loop of `block` x ... covering the last
    `span` characters: the loop's start, plus the repeats the rule needs for a block of its kind (prose
    repeated exactly, prose with moving counters, structured text), plus half a check interval."""
    start = text_length - span
    return min(float(text_length), start + rule.needed(kind, block) + rule.check_every / 2)


def loop_saving(text: str, completion: int, finish_reason: object,
                rule: RepetitionRule = TEXT_RULE) -> tuple[bool, int]:
    """(does the reply loop, completion tokens a loop stop would have saved). The stream stop (client.wire.
    endpoint) is armed only past 90% of max_tokens and cuts exact repeats only: a reply that ran to its cap
    (`length`, so its length is its budget) with such a tail saves what follows the later of that point and
    the rule's; one whose counters move, or that ended by itself, saves nothing."""
    found = find_repetition(text[-rule.window:], rule)
    if found is not None:  # the rule reads the tail; the whole text only to measure how far back it goes
        found = find_repetition(text, rule)
    if finish_reason == REPETITION:
        return True, 0
    if found is None or not text:
        return False, 0
    if finish_reason != "length" or found.kind == "counter":
        return True, 0
    stop = max(loop_stop_point(len(text), found.block, found.span, rule, found.kind), STOP_SHARE * len(text))
    return True, round(completion * (len(text) - stop) / len(text))


def record_text(record: dict[str, Any]) -> str:
    reasoning, content = record.get("reasoning"), record.get("content")
    return (reasoning if isinstance(reasoning, str) else "") + (content if isinstance(content, str) else "")


def loop_stop_assumption(rule: RepetitionRule = TEXT_RULE) -> dict[str, Any]:
    """The rule and delay the loop-stop figures assume, for the JSON and the docs."""
    return {"max_block_chars": rule.max_block, "min_repeats": rule.min_repeats, "min_span_chars": rule.min_span,
            "counter_span_chars": rule.counter_span, "structured_span_chars": rule.structured_span,
            "check_every_chars": rule.check_every, "mean_delay_chars": rule.check_every / 2,
            "armed_at_share_of_max_tokens": STOP_SHARE, "counters_stopped": False}
