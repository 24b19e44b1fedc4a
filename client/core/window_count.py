"""Is a window's prompt count true? `--train-window` caps each reply at the window minus the prompt's
count, asked of the server before the request (its tokenize route) or made on this host (`--tokenizer`).
The reply's own `usage.prompt_tokens` is the server's count of the prompt it actually rendered; when the
two disagree by more than the tolerance, the cap was set by a wrong count: a count too high cut replies the
trainer would have kept, one too low let them run past the window. Both the run (a warning at the end) and
the audit (a finding) judge records by this one rule.

Tolerance: a count may differ from usage by at most `max(ABSOLUTE_TOKENS, RELATIVE_SHARE x usage)`. A
server's tokenize route renders the same template as its chat route, so it agrees exactly; a local count
(`--tokenizer`) may part from the server's by a few tokens where a template renders its generation prompt
otherwise.
"""

from __future__ import annotations

from typing import Any

ABSOLUTE_TOKENS = 8
RELATIVE_SHARE = 0.02


def miscounted(counted: int, reported: int) -> bool:
    """True when the window's count of a prompt is off from the server's usage beyond the tolerance."""
    return abs(counted - reported) > max(ABSOLUTE_TOKENS, RELATIVE_SHARE * reported)


def record_miscount(record: dict[str, Any]) -> tuple[int, int] | None:
    """(counted, reported) for a result record whose window count disagrees with its usage, else None."""
    window, usage = record.get("train_window"), record.get("usage")
    if not isinstance(window, dict) or not isinstance(usage, dict):
        return None
    counted, reported = window.get("prompt_tokens"), usage.get("prompt_tokens")
    if type(counted) is not int or type(reported) is not int:
        return None
    return (counted, reported) if miscounted(counted, reported) else None
