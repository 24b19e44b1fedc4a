"""Which records of a finished run an extension continues, and with what budget: pure policy, no I/O.

A record is continued when the old limit cut it (`finish_reason` "length"), it has its exact ids (the prompt's
and the reply's, from `--token-ids on`), it is a one-turn record (a conversation's cut turn ended the
conversation; what followed was never generated), and the new limit leaves it room: its whole budget is
the larger of the new `--max-tokens` and the one it was sent with and, under `--train-window`, the window less the
prompt's exact count. Every other record is carried over as it is, and the reason is counted.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class Verdict(enum.Enum):
    CONTINUE = "continued"
    ENDED = "ended by itself"
    NO_IDS = "cut, without its token ids (run with --token-ids on)"
    CONVERSATION = "a conversation's cut turn (--turns all)"
    NO_ROOM = "cut, and the new limit leaves it no room"


@dataclass(frozen=True, slots=True)
class Limits:
    """The extension's limits; None: the record's own."""

    train_window: int | None
    max_tokens: int | None


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    budget: int = 0  # the reply's whole budget under the new limits (CONTINUE only)
    max_tokens: int = 0  # the max_tokens the reply now has, before the window
    window: int | None = None  # the training window it now has


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(i) is int for i in value)


def sent_max_tokens(record: Mapping[str, Any]) -> int | None:
    """The max_tokens the record's reply was asked with, before any window."""
    sampling = record.get("sampling")
    value = sampling.get("max_tokens") if isinstance(sampling, Mapping) else None
    return value if type(value) is int else None


def decide(record: Mapping[str, Any], limits: Limits) -> Decision:
    if record.get("finish_reason") != "length":
        return Decision(Verdict.ENDED)
    if "conversation_id" in record:
        return Decision(Verdict.CONVERSATION)
    prompt_ids, ids = record.get("prompt_token_ids"), record.get("completion_token_ids")
    if not isinstance(prompt_ids, list) or not _int_list(prompt_ids) or not isinstance(ids, list) \
            or not all(type(i) is int for i in ids):
        return Decision(Verdict.NO_IDS)
    # An extension never narrows: the larger of the new --max-tokens and the one the reply was sent with.
    max_tokens = max(limits.max_tokens or 0, sent_max_tokens(record) or 0) or len(ids)
    budget = max_tokens
    window = limits.train_window or record_window(record)
    if window is not None:
        budget = min(budget, window - len(prompt_ids))
    if budget <= len(ids):
        return Decision(Verdict.NO_ROOM, max_tokens=max_tokens, window=window)
    return Decision(Verdict.CONTINUE, budget=budget, max_tokens=max_tokens, window=window)


def record_window(record: Mapping[str, Any]) -> int | None:
    """The --train-window the record was made under, if any."""
    window = record.get("train_window")
    size = window.get("size") if isinstance(window, Mapping) else None
    return size if type(size) is int else None

