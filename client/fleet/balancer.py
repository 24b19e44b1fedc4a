"""Pure policy: which endpoint gets the next request, from a snapshot of loads. No I/O, no clocks.

Each endpoint is kept filled to a target depth: its capacity (decode slots: DP ranks x running slots)
plus a small headroom of queued requests, so a finished request's slot is refilled at once, and no
more. A shallow queue is also what keeps the end of a run short: the tail of long requests cannot pile
up behind one server while the others idle, because no server ever holds much work that has not
started. Among endpoints below their target, the one with the lowest load relative to its capacity wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_HEADROOM = 0.125


@dataclass(frozen=True, slots=True)
class EndpointLoad:
    available: bool  # in rotation (healthy, circuit closed)
    in_flight: int  # this client's requests in flight there
    capacity: int  # decode slots, as the server reports them or as configured/learned
    max_in_flight: int  # the client's hard cap for the endpoint (its connection pool)
    # Server running + waiting at the last poll, plus what this client sent since, minus what finished
    # since; None until the first poll answers.
    server_outstanding: int | None = None


def target_depth(capacity: int, headroom: float = DEFAULT_HEADROOM) -> int:
    return capacity + max(2, math.ceil(capacity * headroom))


def estimated_load(load: EndpointLoad) -> int:
    """The server's view when polled (it also sees other clients' work), never less than our own."""
    if load.server_outstanding is None:
        return load.in_flight
    return max(load.in_flight, load.server_outstanding)


def pick_endpoint(loads: Sequence[EndpointLoad], avoid: int | None = None,
                  headroom: float = DEFAULT_HEADROOM) -> int | None:
    """The endpoint for the next request, or None when every available endpoint is at its target depth.

    `avoid` (the endpoint a retry just failed on) is used only when no other endpoint has room.
    Ties go to the larger endpoint, then to the lower index, so the choice is deterministic.
    """
    best: int | None = None
    best_key: tuple[float, int, int] | None = None
    fallback: int | None = None
    for index, load in enumerate(loads):
        if not load.available or load.in_flight >= load.max_in_flight:
            continue
        capacity = max(1, load.capacity)
        current = estimated_load(load)
        if current >= target_depth(capacity, headroom):
            continue
        if index == avoid:
            fallback = index
            continue
        key = (current / capacity, -capacity, index)
        if best_key is None or key < best_key:
            best, best_key = index, key
    return best if best is not None else fallback
