"""Table-driven tests of the dispatch policy (pure function)."""

from __future__ import annotations

import pytest

from client.balancer import EndpointLoad, pick_endpoint


def load(in_flight: int, limit: int = 4, available: bool = True) -> EndpointLoad:
    return EndpointLoad(available=available, in_flight=in_flight, limit=limit)


@pytest.mark.parametrize(("loads", "avoid", "expected"), [
    ([load(0), load(0)], None, 0),
    ([load(2), load(1)], None, 1),
    ([load(4), load(4)], None, None),
    ([load(0, available=False), load(3)], None, 1),
    ([load(0, available=False), load(4)], None, None),
    ([load(2, limit=8), load(1, limit=2)], None, 0),
    ([load(0), load(1)], 0, 1),
    ([load(0), load(4)], 0, 0),
    ([], None, None),
], ids=["idle-tie", "least", "all-full", "down-skipped", "down-and-full", "relative", "avoid", "avoid-only-room",
        "none"])
def test_pick_endpoint(loads: list[EndpointLoad], avoid: int | None, expected: int | None) -> None:
    assert pick_endpoint(loads, avoid) == expected
