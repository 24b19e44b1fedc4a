"""Endpoint slots and rotation: blocks dispatch while every endpoint is full, and keeps each endpoint's
state (starting / up / down) from its failures (circuit breaker) and `/health` probes.

The choice itself is the balancer's pure function; this module only holds the mutable side of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from client.balancer import EndpointLoad, pick_endpoint
from client.endpoint import Endpoint
from client.errors import AttemptError, ConnectFailed, ServerError, StreamDropped, StreamStalled

STARTING, UP, DOWN = "starting", "up", "down"

# Failures that say something about the server rather than about the request.
_SERVER_FAULTS = (ConnectFailed, ServerError, StreamDropped, StreamStalled)


class DispatchClosed(Exception):
    """Dispatch stopped (shutdown) while waiting for a slot."""


class Dispatcher:
    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        *,
        failure_threshold: int = 3,
        probe_interval: float = 2.0,
        health_interval: float = 15.0,
    ) -> None:
        self.endpoints = list(endpoints)
        self.failure_threshold = failure_threshold
        self.probe_interval = probe_interval
        self.health_interval = health_interval
        self._changed = asyncio.Condition()
        self._consecutive_failures = [0] * len(self.endpoints)
        self._went_down = [asyncio.Event() for _ in self.endpoints]
        self._closed = False

    def _loads(self) -> list[EndpointLoad]:
        return [
            EndpointLoad(available=e.counters.state == UP, in_flight=e.counters.in_flight, limit=e.max_in_flight)
            for e in self.endpoints
        ]

    async def acquire(self, avoid: int | None = None) -> Endpoint:
        async with self._changed:
            while True:
                if self._closed:
                    raise DispatchClosed
                index = pick_endpoint(self._loads(), avoid)
                if index is not None:
                    endpoint = self.endpoints[index]
                    endpoint.counters.in_flight += 1
                    return endpoint
                await self._changed.wait()

    async def release(self, endpoint: Endpoint) -> None:
        endpoint.counters.in_flight -= 1
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def close(self) -> None:
        self._closed = True
        await self._notify()

    async def report_success(self, endpoint: Endpoint) -> None:
        self._consecutive_failures[endpoint.index] = 0

    async def report_failure(self, endpoint: Endpoint, error: AttemptError) -> None:
        if not isinstance(error, _SERVER_FAULTS):
            return
        self._consecutive_failures[endpoint.index] += 1
        if self._consecutive_failures[endpoint.index] >= self.failure_threshold or isinstance(error, ConnectFailed):
            await self.set_state(endpoint, DOWN)

    async def set_state(self, endpoint: Endpoint, state: str) -> None:
        previous = endpoint.counters.state
        endpoint.counters.state = state
        if state == DOWN and previous != DOWN:
            self._went_down[endpoint.index].set()
        if state == UP:
            self._consecutive_failures[endpoint.index] = 0
        await self._notify()

    async def watch(self, endpoint: Endpoint) -> None:
        """Keep one endpoint's state true: probe while it is out, check now and then while it is in."""
        went_down = self._went_down[endpoint.index]
        while not self._closed:
            if endpoint.counters.state == UP:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.health_interval):
                        await went_down.wait()
                went_down.clear()
                if endpoint.counters.state == UP and await endpoint.health() not in (200, None):
                    await self.set_state(endpoint, DOWN)
                continue
            status = await endpoint.health()
            if status == 200:
                await self.set_state(endpoint, UP)
            else:
                await asyncio.sleep(self.probe_interval)
