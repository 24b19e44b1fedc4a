"""Endpoint slots and rotation: the mutable side of balancing and health.

Holds, per endpoint, the last polled server load, what was sent and finished since that poll, the GPUs
its `/v1/loads` names (client.fleet.device) and the state (starting / up / down). One watcher per
endpoint polls its load about once a second while it is up, checks `/health` now and then, probes
`/health` while it is out, and brings it back when healthy.
Dispatch blocks while every endpoint is at its target depth. The choice itself is the balancer's pure
function.

Taking an endpoint out of rotation ends its requests in flight: each runs inside the endpoint's scope
(`scope`, an asyncio timeout with no deadline that going down moves to now), so the attempt ends as a
retryable StreamDropped, and a shutdown's cancellation still propagates as a cancellation.
`worker_target` is how many requests the fleet can take at once (the target depths), which sizes the
run's worker pool; `capacity_grew` wakes when it grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from client.core.errors import AttemptError, ConnectFailed, LoadFormatError, RequestRejected, StreamDropped
from client.core.options import DEFAULT_CIRCUIT_FAILURES
from client.core.stats import EndpointLive
from client.fleet.balancer import DEFAULT_HEADROOM, EndpointLoad, pick_endpoint, target_depth
from client.fleet.device import Device, parse_device
from client.fleet.kinds import metric_families
from client.fleet.readiness import NO_HEALTH_ROUTE, probe
from client.wire.endpoint import Endpoint
from client.wire.loads import ServerLoad, load_sources


class Health(enum.StrEnum):
    STARTING = "starting"  # not ready at start; probed until it is
    UP = "up"  # in rotation
    DOWN = "down"  # out of rotation; probed until it is healthy again


STARTING, UP, DOWN = Health.STARTING, Health.UP, Health.DOWN

DEVICE_SOURCE = "/v1/loads"  # the load document that also names the GPUs (client.fleet.device)


class DispatchClosed(Exception):
    """Dispatch stopped (shutdown) while waiting for a slot."""


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    failure_threshold: int = DEFAULT_CIRCUIT_FAILURES  # failures in a row that take an endpoint out
    poll_interval: float = 1.0
    poll_timeout: float = 5.0
    probe_interval: float = 2.0
    health_interval: float = 30.0
    probe_timeout: float = 30.0  # a health probe of an endpoint out of rotation; slow is not dead
    headroom: float = DEFAULT_HEADROOM
    default_capacity: int = 32  # decode slots assumed when a server does not report them
    rediscover_s: float = 30.0  # retry load sources after all of them failed


class _Tracked:
    """Mutable per-endpoint bookkeeping, owned by the dispatcher."""

    __slots__ = (
        "consecutive_failures",
        "device",
        "down_reason",
        "finished_since_poll",
        "health",
        "in_flight",
        "learned_capacity",
        "load",
        "load_source",
        "no_source_until",
        "note",
        "polled",
        "scopes",
        "sent_since_poll",
        "server_generated",
        "went_down",
    )

    def __init__(self) -> None:
        self.health = Health.STARTING
        self.in_flight = 0  # this client's requests there
        self.note = ""  # why it is out of rotation or not ready, for the console
        self.server_generated: float | None = None  # kept while down, so the server's rate stays continuous
        self.polled = False  # a load document has answered at least once
        self.load: ServerLoad | None = None
        self.load_source: int = 0
        self.no_source_until = 0.0
        self.sent_since_poll = 0
        self.finished_since_poll = 0
        self.learned_capacity = 0
        self.consecutive_failures = 0
        self.went_down = asyncio.Event()
        self.scopes: set[asyncio.Timeout] = set()  # the requests in flight here
        self.down_reason = ""
        self.device: Device | None = None  # what its /v1/loads says of its GPUs


class Dispatcher:
    def __init__(self, endpoints: Sequence[Endpoint], settings: DispatchSettings | None = None) -> None:
        self.endpoints = list(endpoints)
        self.settings = settings or DispatchSettings()
        self._tracked = [_Tracked() for _ in self.endpoints]
        self._load_sources = load_sources(metric_families())  # /metrics read with every known kind's names
        self._waiters: deque[asyncio.Future[None]] = deque()  # workers waiting for a slot, oldest first
        self._woken = 0  # waiters woken that have not run yet
        self._closed = asyncio.Event()  # set once: no slot is handed out after it (a stop, or the end)
        self._announced_target = self.worker_target()
        self._grew = asyncio.Event()

    # -- the policy's input ------------------------------------------------------------------------------

    def capacity(self, index: int) -> int:
        """Reported by the server, else learned (its running count while it had a queue), else configured."""
        tracked = self._tracked[index]
        if tracked.load is not None and tracked.load.capacity:
            return tracked.load.capacity
        return tracked.learned_capacity or self.settings.default_capacity

    def _snapshot(self, index: int) -> EndpointLoad:
        endpoint, tracked = self.endpoints[index], self._tracked[index]
        outstanding = None
        if tracked.load is not None:
            outstanding = (tracked.load.running + tracked.load.waiting
                           + tracked.sent_since_poll - tracked.finished_since_poll)
        return EndpointLoad(available=tracked.health is UP, in_flight=tracked.in_flight,
                            capacity=self.capacity(index), max_in_flight=endpoint.max_in_flight,
                            server_outstanding=outstanding)

    def loads(self) -> list[EndpointLoad]:
        return [self._snapshot(i) for i in range(len(self.endpoints))]

    # -- slots -----------------------------------------------------------------------------------------

    async def acquire(self, avoid: int | None = None, prefer: int | None = None) -> Endpoint:
        """A slot on the balancer's choice; `prefer` wins while it is up and under its hard cap, so a
        conversation's turns stay where its prefix is cached."""
        queued = False
        while True:
            if self._closed.is_set():
                raise DispatchClosed
            # A newcomer may take a free slot before a woken waiter runs: making it queue instead left the
            # slot idle for a loop cycle per request, which cost the full-run throughput about 7%.
            index = pick_endpoint(self.loads(), avoid, self.settings.headroom)
            if prefer is not None:
                preferred = self.endpoints[prefer]
                held = self._tracked[prefer]
                if held.health is UP and held.in_flight < preferred.max_in_flight:
                    index = prefer
            if index is not None:
                # No await between the choice and taking the slot: on one event loop nothing interleaves.
                endpoint = self.endpoints[index]
                self._tracked[index].in_flight += 1
                self._tracked[index].sent_since_poll += 1
                if queued and self._waiters and not self._woken and self._has_room():
                    self._wake(1)  # more room than wakeups (e.g. an endpoint came up): pass it on
                return endpoint
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            queued = True
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._woken -= 1
                    self._wake(1)  # woken, then cancelled: the wakeup belongs to someone else
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
            self._woken -= 1

    def worker_target(self) -> int:
        """Requests the fleet can take at once: every endpoint's target depth, within its hard cap."""
        return sum(min(e.max_in_flight, target_depth(self.capacity(i), self.settings.headroom))
                   for i, e in enumerate(self.endpoints))

    async def capacity_grew(self) -> None:
        """Returns once `worker_target` has grown past what it was when last announced."""
        await self._grew.wait()
        self._grew.clear()

    def _check_growth(self) -> None:
        target = self.worker_target()
        if target > self._announced_target:
            self._announced_target = target
            self._grew.set()

    @contextlib.asynccontextmanager
    async def scope(self, endpoint: Endpoint) -> AsyncIterator[None]:
        """Run one request so that taking `endpoint` out of rotation ends it as a retryable StreamDropped."""
        tracked = self._tracked[endpoint.index]
        try:
            async with asyncio.timeout(None) as deadline:
                tracked.scopes.add(deadline)
                try:
                    yield
                finally:
                    tracked.scopes.discard(deadline)
        except TimeoutError:
            if not deadline.expired():
                raise
            raise StreamDropped(f"endpoint taken out of rotation ({tracked.down_reason or 'unhealthy'})") from None

    def release(self, endpoint: Endpoint) -> None:
        self._tracked[endpoint.index].in_flight -= 1
        self._tracked[endpoint.index].finished_since_poll += 1
        # One freed slot serves one waiter: waking them all made the CPU per request grow with the number
        # of waiting workers (bench.dispatch). Changes that can free many slots at once (a load poll, an
        # endpoint coming up, close) wake every waiter.
        self._wake(1)

    def _has_room(self) -> bool:
        return pick_endpoint(self.loads(), None, self.settings.headroom) is not None

    def _wake(self, count: int) -> None:
        while count > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._woken += 1
                count -= 1

    def _notify(self) -> None:
        self._wake(len(self._waiters))

    def close(self) -> None:
        self._closed.set()
        self._notify()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        """Returns once the dispatcher is closed: a retry's backoff ends there (client.engine.retry)."""
        await self._closed.wait()

    # -- health ----------------------------------------------------------------------------------------

    def report_success(self, endpoint: Endpoint) -> None:
        self._tracked[endpoint.index].consecutive_failures = 0

    def report_failure(self, endpoint: Endpoint, error: AttemptError) -> None:
        if not error.blames_server:
            return
        tracked = self._tracked[endpoint.index]
        tracked.consecutive_failures += 1
        if tracked.consecutive_failures >= self.settings.failure_threshold or isinstance(error, ConnectFailed):
            self.set_state(endpoint, DOWN, str(error))

    def health(self, endpoint: Endpoint) -> Health:
        return self._tracked[endpoint.index].health

    def in_flight(self, endpoint: Endpoint) -> int:
        return self._tracked[endpoint.index].in_flight

    def starting(self, endpoint: Endpoint, ready: bool, reason: str = "") -> None:
        """What the start-up check found: ready endpoints go into rotation, the others are probed."""
        tracked = self._tracked[endpoint.index]
        tracked.health = UP if ready else STARTING
        tracked.note = "" if ready else f"not ready: {reason}"[:200]

    def live(self) -> list[EndpointLive]:
        """Every endpoint now, by index: what the stats snapshot and the console show."""
        rows = []
        for endpoint, tracked in zip(self.endpoints, self._tracked, strict=True):
            load = tracked.load
            rows.append(EndpointLive(
                url=endpoint.url, state=tracked.health.value, in_flight=tracked.in_flight,
                max_in_flight=endpoint.max_in_flight,
                capacity=self.capacity(endpoint.index) if tracked.polled else None,
                streamed_tokens=endpoint.wire.streamed_tokens, note=tracked.note,
                server_running=load.running if load else None, server_waiting=load.waiting if load else None,
                server_gen_rate=load.gen_throughput if load else None,
                server_generated=tracked.server_generated,
                server_token_usage=load.token_usage if load else None,
                server_accept_length=load.accept_length if load else None,
                accelerator=tracked.device.accelerator if tracked.device else None,
                gpus=tracked.device.gpus if tracked.device else None))
        return rows

    def set_state(self, endpoint: Endpoint, state: Health, reason: str = "") -> None:
        tracked = self._tracked[endpoint.index]
        if tracked.health is state:
            return
        tracked.health = state
        if state == DOWN:
            tracked.went_down.set()
            tracked.load = None
            if reason:
                tracked.note = f"out of rotation: {reason}"[:200]
            # Its requests in flight would only stall or fail there: send them elsewhere now.
            tracked.down_reason = reason
            now = asyncio.get_running_loop().time()
            for deadline in tracked.scopes:
                deadline.reschedule(now)
        if state == UP:
            tracked.consecutive_failures = 0
        self._notify()

    async def prime(self) -> None:
        """One load poll of every endpoint that is up, so the first requests already go by capacity."""
        await asyncio.gather(*(self._poll_load(e, self._tracked[e.index]) for e in self.endpoints
                               if self._tracked[e.index].health is UP))

    async def watch(self, endpoint: Endpoint) -> None:
        """Keep one endpoint's state and load true, for the whole run."""
        tracked = self._tracked[endpoint.index]
        next_health = time.monotonic() + self.settings.health_interval
        while not self._closed.is_set():
            if tracked.health is not UP:
                readiness = await probe(endpoint, limit_s=self.settings.probe_timeout)
                if readiness.ready:
                    tracked.went_down.clear()
                    self.set_state(endpoint, UP)
                    next_health = time.monotonic() + self.settings.health_interval
                else:
                    tracked.note = f"not ready: {readiness.reason}"[:200]
                    await asyncio.sleep(self.settings.probe_interval)
                continue
            await self._poll_load(endpoint, tracked)
            if time.monotonic() >= next_health:
                next_health = time.monotonic() + self.settings.health_interval
                status = await endpoint.health(limit_s=10.0)
                # No answer in time is not proof of death (SGLang's /health generates a token and can be
                # slow under load); a non-200 answer is, and a refused connection shows in the polls.
                if status is not None and status != 200 and status not in NO_HEALTH_ROUTE:
                    self.set_state(endpoint, DOWN, f"/health answered {status}")
                    continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.poll_interval):
                    await tracked.went_down.wait()

    async def _poll_load(self, endpoint: Endpoint, tracked: _Tracked) -> None:
        now = time.monotonic()
        if now < tracked.no_source_until:
            return
        sources = self._load_sources
        while tracked.load_source < len(sources):
            path, parse = sources[tracked.load_source]
            try:
                body = await endpoint.get_bytes(path, limit_s=self.settings.poll_timeout)
                load = parse(body)
                if path == DEVICE_SOURCE:
                    tracked.device = parse_device(body) or tracked.device
            except ConnectFailed as exc:
                self.set_state(endpoint, DOWN, str(exc))
                return
            except RequestRejected:
                tracked.load_source += 1  # 404/405: this server does not offer that source; try the next
                continue
            except LoadFormatError:
                tracked.load_source += 1
                continue
            except AttemptError:
                # Slow or busy (vLLM answers /metrics late while it decodes): keep the source, and the
                # last load, and ask again at the next poll.
                return
            self._apply_load(endpoint, tracked, load)
            return
        # No source works: balance on our own in-flight counts and look again later.
        tracked.load_source = 0
        tracked.load = None
        tracked.no_source_until = now + self.settings.rediscover_s

    def _apply_load(self, endpoint: Endpoint, tracked: _Tracked, load: ServerLoad) -> None:
        tracked.load = load
        tracked.sent_since_poll = 0
        tracked.finished_since_poll = 0
        if load.waiting > 0 and load.running > tracked.learned_capacity:
            tracked.learned_capacity = load.running  # a queue means the batch was full
        tracked.polled = True
        if load.generation_tokens_total is not None:
            tracked.server_generated = load.generation_tokens_total
        self._check_growth()
        self._notify()
