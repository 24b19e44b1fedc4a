"""Pure policy: which endpoint gets the next request, from a snapshot of loads. No I/O, no clocks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EndpointLoad:
    available: bool  # in rotation (healthy, circuit closed)
    in_flight: int  # the client's requests in flight there
    limit: int  # the most the client sends there at once


def pick_endpoint(loads: Sequence[EndpointLoad], avoid: int | None = None) -> int | None:
    """Least in flight relative to its limit; None when every available endpoint is full.

    `avoid` (the endpoint a retry just failed on) is skipped when any other endpoint has room.
    """
    best: int | None = None
    best_key = (2.0, 0)
    fallback: int | None = None
    for index, load in enumerate(loads):
        if not load.available or load.in_flight >= load.limit:
            continue
        if index == avoid:
            fallback = index
            continue
        key = (load.in_flight / load.limit, index)
        if key < best_key:
            best, best_key = index, key
    return best if best is not None else fallback
