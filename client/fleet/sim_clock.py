"""A simulated fleet's modelled clock: whether every server has one, its readings over time, and a wall time
read on it.

A simulated server (simulator) answers `GET /sim/clock` with `busy_s`: the seconds its modelled GPU has spent
on its steps so far at speed 1, whatever the host did meanwhile (it stands still while the server is idle), and
its `speed` and `accelerator`. On a shared CPU the wall clock of a simulated run moves with the host's load; the
modelled clock does not. A real server has no such route (SGLang answers 404), so a fleet is simulated only when
every server answers it; then its time is read on that clock, and a real fleet keeps the wall clock.

`ClockTrace` keeps, per server, readings (the wall time of the reply, busy_s) taken every `EVERY_S` by
`follow` while a sample runs; `at(url, t)` reads the wall time `t` on that server's clock by linear
interpolation between the readings around it (clamped at the ends), so a record's start and end, stamped on
the wall clock, become modelled seconds. The readings are a few per second and server, whatever the run's size.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from client.core.errors import AttemptError
from client.core.stats import EndpointLive
from client.wire.endpoint import Endpoint

PATH = "/sim/clock"
EVERY_S = 0.05  # a simulated decode step at --speed 10 takes 2-4 ms: a reading every 10-25 steps
_LIMIT_S = 5.0


@dataclass(frozen=True, slots=True)
class SimulatedFleet:
    """What the servers of a simulated fleet say of themselves (GET /sim/clock)."""

    servers: int
    speeds: tuple[float, ...]  # the distinct --speed values
    accelerators: tuple[str, ...]  # the distinct device names they model

    def as_record(self) -> dict[str, Any]:
        """The fleet as run.json and the estimate's report name it."""
        return {"simulated": True, "servers": self.servers, "speed": _one_or_all(self.speeds),
                "kind": _one_or_all(self.accelerators), "clock": "modelled"}


def describe_fleet(live: Sequence[EndpointLive], simulated: SimulatedFleet | None) -> dict[str, Any]:
    """The fleet as run.json's `fleets` records it: the servers, the GPUs they report (None unless every one
    says how many: a GPU count is never the count of ports) and their kinds, and whether it is simulated."""
    counts = [e.gpus for e in live]
    gpus = sum(c for c in counts if c) if counts and all(counts) else None
    kinds = sorted({e.accelerator for e in live if e.accelerator})
    described: dict[str, Any] = {"simulated": False, "servers": len(live), "gpus": gpus, "kind": _one_or_all(kinds)
                                 if kinds else None, "clock": "wall"}
    if simulated is not None:
        described.update(simulated.as_record())
    return described


def _one_or_all(values: Sequence[Any]) -> Any:
    return values[0] if len(values) == 1 else list(values)


def _busy(document: Any) -> float | None:
    """busy_s of a /sim/clock document; None when the body is not one (another server's JSON at that path)."""
    if not isinstance(document, dict):
        return None
    busy = document.get("busy_s")
    if isinstance(busy, bool) or not isinstance(busy, int | float) or not math.isfinite(busy) or busy < 0:
        return None
    return float(busy)


def _counters(document: dict[str, Any]) -> tuple[float, float, float]:
    """(generation tokens, decode steps, requests decoded summed over the steps) of a /sim/clock document."""
    out = []
    for key in ("generation_tokens", "decode_steps", "decode_batch"):
        value = document.get(key)
        out.append(float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0)
    return out[0], out[1], out[2]


async def _read(endpoint: Endpoint) -> tuple[float, float, dict[str, Any]] | None:
    """(wall time of the reply, busy_s, the document), or None when the server has no modelled clock."""
    try:
        document = await endpoint.get_json(PATH, _LIMIT_S)
    except AttemptError:
        return None
    busy = _busy(document)
    return None if busy is None else (time.time(), busy, document)


@dataclass
class ClockTrace:
    """Per server URL, its readings in order: the wall time of the reply, then the cumulative counters."""

    walls: dict[str, list[float]] = field(default_factory=dict)
    busy: dict[str, list[float]] = field(default_factory=dict)
    counters: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)  # tokens, steps, batch
    ranks: dict[str, int] = field(default_factory=dict)

    def add(self, url: str, wall: float, busy_s: float, counters: tuple[float, float, float] = (0.0, 0.0, 0.0),
            ranks: int = 1) -> None:
        walls = self.walls.setdefault(url, [])
        values = self.busy.setdefault(url, [])
        if walls and wall <= walls[-1]:
            return  # two replies within the clock's resolution: the first one stands
        walls.append(wall)
        values.append(max(busy_s, values[-1]) if values else busy_s)  # the clock never runs back
        self.counters.setdefault(url, []).append(counters)
        self.ranks[url] = max(1, ranks)

    def at(self, url: str, wall: float) -> float | None:
        """`wall` (seconds since 1970) read on the server's modelled clock, in seconds since its first reading;
        None for a server without readings."""
        walls = self.walls.get(url)
        if not walls:
            return None
        values = self.busy[url]
        origin = values[0]
        i = bisect.bisect_right(walls, wall)
        if i == 0:
            return 0.0
        if i == len(walls):
            return values[-1] - origin
        w0, w1, b0, b1 = walls[i - 1], walls[i], values[i - 1], values[i]
        return b0 - origin + (b1 - b0) * (wall - w0) / (w1 - w0)

    def _counters_at(self, url: str, modelled: float) -> tuple[float, float, float]:
        """The server's counters when its modelled clock read `modelled` (seconds since its first reading)."""
        values, counts = self.busy[url], self.counters[url]
        target = values[0] + modelled
        i = bisect.bisect_left(values, target)
        if i == 0:
            return counts[0]
        if i == len(values):
            return counts[-1]
        b0, b1 = values[i - 1], values[i]
        share = (target - b0) / (b1 - b0) if b1 > b0 else 1.0
        return tuple(a + (b - a) * share for a, b in zip(counts[i - 1], counts[i], strict=True))  # type: ignore[return-value]

    def served(self, start: float, end: float) -> tuple[float, float] | None:
        """(tokens per modelled second, requests the fleet decoded at once on average) between `start` and
        `end` on the modelled clocks: the servers' own counts of what their GPUs did, None without them.

        A client's view of its requests (first token to last) is stretched and bunched when its host is
        starved, and a window picked by it over-counts; the servers count every token once, at the step
        that made it, and the batch each step really held."""
        if end <= start or not self.busy:
            return None
        tokens = concurrency = 0.0
        for url in self.busy:
            t0, s0, b0 = self._counters_at(url, start)
            t1, s1, b1 = self._counters_at(url, end)
            tokens += t1 - t0
            if s1 > s0:
                concurrency += (b1 - b0) / (s1 - s0) * self.ranks.get(url, 1)
        return tokens / (end - start), concurrency

    def modelled_s(self) -> dict[str, float]:
        """Per server, the modelled seconds between its first and last reading."""
        return {url: values[-1] - values[0] for url, values in self.busy.items() if values}


async def probe(endpoints: Sequence[Endpoint]) -> SimulatedFleet | None:
    """The fleet's modelled clock: a SimulatedFleet when every server answers GET /sim/clock, else None
    (a real fleet, or a mixed one: its times stay on the wall clock)."""
    if not endpoints:
        return None
    found = await asyncio.gather(*(_read(e) for e in endpoints))
    documents = [f[2] for f in found if f is not None]
    if len(documents) != len(endpoints):
        return None
    speeds = sorted({float(d["speed"]) for d in documents if isinstance(d.get("speed"), int | float)})
    kinds = sorted({str(d["accelerator"]) for d in documents if isinstance(d.get("accelerator"), str)})
    return SimulatedFleet(len(endpoints), tuple(speeds), tuple(kinds))


async def read_once(endpoints: Sequence[Endpoint], trace: ClockTrace) -> None:
    """One reading of every server's clock into `trace` (a server that does not answer this time is skipped)."""
    found = await asyncio.gather(*(_read(e) for e in endpoints))
    for endpoint, reading in zip(endpoints, found, strict=True):
        if reading is not None:
            ranks = reading[2].get("dp_size")
            trace.add(endpoint.url, reading[0], reading[1], _counters(reading[2]),
                      ranks if isinstance(ranks, int) and not isinstance(ranks, bool) else 1)


async def follow(endpoints: Sequence[Endpoint], trace: ClockTrace, every_s: float = EVERY_S) -> None:
    """Read every server's clock into `trace` every `every_s` until cancelled."""
    while True:
        await read_once(endpoints, trace)
        await asyncio.sleep(every_s)
