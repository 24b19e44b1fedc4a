"""How a kind of server's replies carry what the OpenAI standard does not, as one value `wire` is handed
(`ReplyDialect`): where its streamed chunks put the token ids, how the object a chunk without choices
carries (its trailer) is read into ids and MTP figures, and which Prometheus metrics report its load.

`wire` knows no kind by name: each kind's dialect lives with its profile (client.fleet.servers), and the
run hands an endpoint its kind's dialect once the kind is known (client.engine.fields). A kind the client
does not ship brings its own reader; nothing here changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from client.core.records import Spec, Usage


@dataclass(frozen=True, slots=True)
class TrailerIds:
    """What a trailer gave of the exact ids (None: not in this trailer)."""

    prompt: list[int] | None = None
    completion: list[int] | None = None


@dataclass(frozen=True, slots=True)
class MetricNames:
    """The Prometheus families (`/metrics`) that report one kind's load; every sample of a family is summed."""

    running: str  # requests running
    waiting: str  # requests queued
    generated: str  # the counter of generated tokens
    usage: tuple[str, ...] = ()  # KV-cache use 0..1, per rank (the fullest counts); the first present is read
    throughput: str | None = None  # generated tokens per second
    accept_length: str | None = None  # MTP/speculative mean accepted length, one sample per rank (averaged)


@dataclass(frozen=True, slots=True)
class ReplyDialect:
    """One kind's reply side. The per-chunk keys are looked up on every chunk as the standard fields are, so
    a dialect costs the hot path nothing; "" names no key (no server sends an empty key)."""

    choice_ids: str = ""  # the key on a chunk's first choice holding that chunk's generated ids (a list)
    prompt_ids: str = ""  # the chunk key holding the prompt's ids (a list)
    # The key of the object a chunk without choices carries, read by `read_trailer`; with several such
    # chunks their objects are merged, later keys winning.
    trailer: str = ""
    read_trailer: Callable[[dict[str, Any]], TrailerIds] | None = None
    # The reply's MTP figures from the merged trailer, at the end; may fill what `usage` lacks.
    figures: Callable[[dict[str, Any], Usage], Spec | None] | None = None
    metrics: MetricNames | None = None


# A server that sends the standard fields only: no ids, no figures, no metrics the client reads.
PLAIN = ReplyDialect()


def int_list(value: object) -> list[int] | None:
    """`value` when it is a list of ints, else None: the shape every kind's ids must arrive in."""
    if isinstance(value, list) and all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        return value
    return None
