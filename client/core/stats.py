"""The run's results as plain data, written by the swarm; frozen snapshots for readers (console, summary,
the Prometheus endpoint). Each endpoint's live state is owned where it changes (health, in-flight and load
by the dispatcher, streamed-token counters by the endpoint) and handed to `snapshot` as EndpointLive rows.

Throughput is the completion tokens counted as they stream (exact where the server sends running usage,
client.wire.sse), over a short and a 5-minute window (client.core.meter), so it reads true while long
replies are still being written. Beside it stands what each server says it generates, which includes any
other traffic on a shared server.

The ETA is client.core.eta's rule. Its inputs are kept here: the lengths of the replies seen (this run's,
and on a resume the records already done, `seed_lengths`), the requests in flight (`begin_attempt` /
`end_attempt`, with their start times) and the pace of one request (the streamed rate over the last
5 s divided by the mean number of requests in flight over them: short, since a thinning batch decodes
faster). What each request in flight has
streamed is estimated from each server's counters (client.core.inflight). GPU-hours use `--gpus`, else the
GPUs the servers report (`/v1/loads` num_accelerators, client.fleet.device) when every server reports.
Every clock reading goes through `clock`, so tests drive the figures with their own.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from client.core.eta import EtaParts, LengthHistogram, eta
from client.core.inflight import UNNAMED, streamed_by_request
from client.core.meter import WindowedRates
from client.core.pace import PaceModel

PACE_POINT_S = 1.0  # the shortest interval a pace-model point is measured over: chunks arrive in bursts
CANCELLED_IDS_KEPT = 20  # ids of requests cancelled in flight named in the summary


@dataclass(frozen=True, slots=True)
class EndpointLive:
    """One endpoint as the fleet sees it now: its configuration, health and load (the dispatcher's) and what
    it has streamed (its own wire counters). Built by client.fleet.dispatcher, read by `snapshot`."""

    url: str
    state: str  # starting / up / down
    in_flight: int
    max_in_flight: int
    capacity: int | None = None
    streamed_tokens: int = 0  # completion tokens as they stream, failed attempts included
    server_running: int | None = None
    server_waiting: int | None = None
    server_gen_rate: float | None = None  # tok/s the server reports itself (SGLang gen_throughput)
    server_generated: float | None = None  # the server's lifetime generated-tokens counter (/metrics)
    server_token_usage: float | None = None  # KV-cache use, 0..1
    server_accept_length: float | None = None  # MTP: mean tokens per verify step the server reports
    note: str = ""  # why it is out of rotation or not ready
    accelerator: str | None = None  # the device its /v1/loads names
    gpus: int | None = None  # the GPUs behind it, as its /v1/loads counts them


@dataclass
class EndpointResults:
    """What one endpoint's finished requests came to; written by RunStats.record_done / record_error only."""

    done: int = 0
    errors: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int | None = None  # of prompt_tokens, served from the prefix cache (None: usage never said)
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class SyncView:
    """The S3 uploader's state in numbers (client.s3.uploader); the console words it."""

    uploaded: int
    pending: int
    pending_bytes: int
    oldest_pending_s: float | None  # how long the oldest closed segment has waited; None when none waits
    last_error: str = ""
    stopped: str = ""  # why uploading stopped for good, if it did


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    url: str
    state: str
    in_flight: int
    max_in_flight: int
    capacity: int | None
    done: int
    errors: int
    tokens_per_s: float  # streamed, over the short window
    server_running: int | None
    server_waiting: int | None
    last_error: str
    tokens_per_s_long: float = 0.0
    server_tokens_per_s: float | None = None  # what the server says it generates, other traffic included
    token_usage: float | None = None
    cache_hit: float | None = None  # cached / prompt tokens of finished requests
    accept_length: float | None = None


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    elapsed_s: float
    total: int | None
    done: int
    failed: int
    too_long: int
    retries: int
    truncated: int
    in_flight: int
    completion_tokens: int
    prompt_tokens: int
    tokens_per_s_short: float
    tokens_per_s_long: float
    eta_s: float | None
    gpu_hours_projected: float | None
    errors_by_kind: dict[str, int]
    endpoints: tuple[EndpointSnapshot, ...]
    streamed_tokens: int = 0
    server_tokens_per_s: float | None = None
    cache_hit: float | None = None
    gpu_hours_so_far: float | None = None
    expected_tokens_per_prompt: float | None = None
    sync: SyncView | None = None
    accept_length: float | None = None  # the fleet's mean MTP accept length, where servers report it
    loops_stopped: int = 0  # replies the loop stop ended (finish_reason repetition)
    continued: int = 0  # --continue-replies: replies made by more than one attempt, continued from their ids
    continued_kept: int = 0  # their tokens from the earlier attempts: not generated again
    fills_window: int = 0  # of too_long: prompts that alone fill --train-window
    waiting: int = 0  # requests sleeping before their next attempt (backoff or Retry-After)
    waiting_wake_s: tuple[float, float] | None = None  # (soonest, latest) wake, seconds from the snapshot
    gpus: int | None = None  # the GPUs GPU-hours count: --gpus, else the servers' own count
    gpus_source: str | None = None  # "--gpus" or "servers"; None when neither says
    eta_parts: EtaParts | None = None  # the ETA's inputs and terms (client.core.eta)
    cancelled_in_flight: int = 0  # requests cancelled mid-stream by a stop (sent again by the next run)
    cancelled_ids: tuple[str, ...] = ()  # the first CANCELLED_IDS_KEPT of them
    stopping: bool = False  # a stop was asked for: no prompt is sent any more, so no ETA is shown

    @property
    def unwritten_tokens(self) -> int:
        """Tokens streamed that no written record holds: requests in flight (or cancelled in flight) and
        failed attempts."""
        return max(0, self.streamed_tokens - self.completion_tokens)

    @property
    def remaining(self) -> int | None:
        return None if self.total is None else max(0, self.total - self.done - self.failed)

    @property
    def sync_lag_s(self) -> float | None:
        """Age of the oldest segment not yet in S3 (0 when all are); None without --s3."""
        return None if self.sync is None else self.sync.oldest_pending_s or 0.0


def _cached_tokens(usage: Mapping[str, Any]) -> int | None:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return cached if type(cached) is int else None


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


@dataclass
class RunStats:
    """The run's results so far; only the swarm writes them (record_done, record_error), in the event loop
    thread. The endpoints' live state is not kept here: `snapshot` is given it."""

    gpus: int | None = None
    short_window_s: float = 15.0
    pace_window_s: float = 5.0  # the ETA's pace of one request: short, since a thinning batch decodes faster
    long_window_s: float = 300.0
    clock: Callable[[], float] = time.monotonic
    started: float | None = None  # clock() at construction unless given
    total: int | None = None
    done: int = 0
    failed: int = 0
    too_long: int = 0  # of `failed`: prompts over the context, not retried by later runs
    fills_window: int = 0  # of `too_long`: prompts that alone fill --train-window
    retries: int = 0
    truncated: int = 0
    loops_stopped: int = 0
    continued: int = 0
    continued_kept: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    expected_tokens_per_prompt: float | None = None  # the estimate's mean, when the run was given one
    max_tokens: int | None = None  # the run's cap: no request is expected to run past it
    lengths: LengthHistogram = field(default_factory=LengthHistogram)  # completion tokens of replies seen
    cancelled_in_flight: int = 0
    stopping: bool = False  # set when a stop is asked for (Ctrl-C, SIGTERM): the prompts left are not sent
    cancelled_ids: list[str] = field(default_factory=list)
    errors_by_kind: Counter[str] = field(default_factory=Counter)
    endpoints: list[EndpointResults] = field(default_factory=list)  # by endpoint index
    _waits: dict[int, float] = field(default_factory=dict)  # wait id -> monotonic wake time
    _wait_ids: itertools.count[int] = field(default_factory=itertools.count)
    _streamed: WindowedRates | None = None
    _server: WindowedRates | None = None
    # attempt id -> (clock() at its start, the endpoint's index, or UNNAMED)
    _attempts: dict[int, tuple[float, int]] = field(default_factory=dict)
    _attempt_ids: itertools.count[int] = field(default_factory=itertools.count)
    _busy_s: float = 0.0  # integral of the requests in flight over time (request-seconds)
    _busy_at: float | None = None
    _pace: float | None = None  # output tok/s of one request in flight over the pace window, at the last snapshot
    pace_model: PaceModel = field(default_factory=PaceModel)  # pace by batch: the drain's shape (client.core.pace)
    _pace_mark: tuple[float, float, float] | None = None  # (clock, tokens streamed, request-seconds) last observed

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.clock()
        self._busy_at = self.started

    @property
    def start(self) -> float:
        assert self.started is not None
        return self.started

    def seed_lengths(self, lengths: Sequence[int]) -> None:
        """Lengths of replies already done (a resume's records), for the ETA's expected lengths."""
        self.lengths.extend(lengths)

    def _busy(self, now: float) -> float:
        if self._busy_at is not None and now > self._busy_at:
            self._busy_s += len(self._attempts) * (now - self._busy_at)
        self._busy_at = max(now, self._busy_at or now)
        return self._busy_s

    def begin_attempt(self, endpoint: int = UNNAMED) -> int:
        """A request starts streaming on `endpoint` (its index); returns the id to pass to `end_attempt`."""
        now = self.clock()
        self._busy(now)
        attempt = next(self._attempt_ids)
        self._attempts[attempt] = (now, endpoint)
        return attempt

    def end_attempt(self, attempt: int, *, cancelled_id: str | None = None) -> None:
        """The request's stream ended (finished, failed, or cancelled by a stop: `cancelled_id` names it)."""
        self._busy(self.clock())
        self._attempts.pop(attempt, None)
        if cancelled_id is not None:
            self.cancelled_in_flight += 1
            if len(self.cancelled_ids) < CANCELLED_IDS_KEPT:
                self.cancelled_ids.append(cancelled_id)

    def track(self, endpoints: int) -> None:
        """Results are kept for this many endpoints (by index)."""
        self.endpoints = [EndpointResults() for _ in range(endpoints)]

    def record_continued(self, kept: int) -> None:
        """A reply written whole after more than one attempt: `kept` of its tokens came from the earlier ones."""
        self.continued += 1
        self.continued_kept += kept

    def record_done(self, index: int, usage: Mapping[str, Any], finish_reason: str | None) -> None:
        completion_tokens = int(usage.get("completion_tokens") or 0)
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.lengths.add(completion_tokens)
        self.done += 1
        self.completion_tokens += completion_tokens
        self.prompt_tokens += prompt_tokens
        if finish_reason == "length":
            self.truncated += 1
        elif finish_reason == "repetition":
            self.loops_stopped += 1
        endpoint = self.endpoints[index]
        endpoint.done += 1
        endpoint.completion_tokens += completion_tokens
        endpoint.prompt_tokens += prompt_tokens
        cached = _cached_tokens(usage)
        if cached is not None:
            endpoint.cached_tokens = (endpoint.cached_tokens or 0) + cached

    def record_error(self, index: int | None, kind: str, message: str) -> None:
        self.errors_by_kind[kind] += 1
        if index is not None:
            endpoint = self.endpoints[index]
            endpoint.errors += 1
            endpoint.last_error = message[:200]

    def begin_wait(self, seconds: float) -> int:
        """A request sleeps `seconds` before its next attempt; returns the id to pass to `end_wait`."""
        wait = next(self._wait_ids)
        self._waits[wait] = self.clock() + seconds
        return wait

    def end_wait(self, wait: int) -> None:
        self._waits.pop(wait, None)

    def _rates(self, now: float, fleet: Sequence[EndpointLive]
               ) -> tuple[list[float | None], list[float | None], list[float | None]]:
        """(streamed tok/s short, streamed tok/s long, server-counted tok/s short), per endpoint."""
        if self._streamed is None or self._server is None:
            self._streamed = WindowedRates(self.start, keep_s=self.long_window_s + 30)
            self._server = WindowedRates(self.start, keep_s=self.short_window_s + 30)
        # One more counter after the endpoints': the request-seconds in flight, whose rate over a window is
        # the mean number of requests in flight over it.
        streamed = [float(e.streamed_tokens) for e in fleet] + [self._busy(now)]
        generated = [e.server_generated for e in fleet]
        self._streamed.sample(now, streamed)
        self._server.sample(now, generated)
        short = self._streamed.rates(now, streamed, self.short_window_s)
        short.pop()
        long = self._streamed.rates(now, streamed, self.long_window_s)
        long.pop()
        recent = self._streamed.rates(now, streamed, self.pace_window_s)
        busy = recent.pop() or 0.0
        tokens = sum(r or 0.0 for r in recent)
        self._pace = tokens / busy if busy > 0 and tokens > 0 else None
        self._observe_pace(now, sum(streamed[:-1]), streamed[-1])
        return short, long, self._server.rates(now, generated, self.short_window_s, from_zero=False)

    def _observe_pace(self, now: float, tokens: float, request_seconds: float) -> None:
        """One (requests in flight, pace) point per interval of at least PACE_POINT_S, for the pace model."""
        if self._pace_mark is None:
            self._pace_mark = (now, tokens, request_seconds)
            return
        then, tokens_then, busy_then = self._pace_mark
        if now - then < PACE_POINT_S:
            return
        self._pace_mark = (now, tokens, request_seconds)
        busy = request_seconds - busy_then
        if busy > 0 and tokens > tokens_then:
            self.pace_model.observe(busy / (now - then), (tokens - tokens_then) / busy)

    def _eta(self, now: float, remaining: int | None, fleet: Sequence[EndpointLive]) -> EtaParts | None:
        """client.core.eta's rule on this run's figures (see the module docstring)."""
        if remaining is None:
            return None
        shares = streamed_by_request(now, self._attempts.values(), [e.streamed_tokens for e in fleet],
                                     [e.completion_tokens for e in self.endpoints], self.completion_tokens)
        return eta(unsent=max(0, remaining - len(shares)), in_flight=shares, lengths=self.lengths, pace=self._pace,
                   prior_mean=self.expected_tokens_per_prompt, max_tokens=self.max_tokens,
                   pace_ratio=self.pace_model.ratio(len(shares)))

    def _gpus(self, fleet: Sequence[EndpointLive]) -> tuple[int | None, str | None]:
        if self.gpus:
            return self.gpus, "--gpus"
        counts = [e.gpus for e in fleet]
        if counts and all(c is not None and c > 0 for c in counts):
            return sum(c for c in counts if c is not None), "servers"
        return None, None

    def snapshot(self, fleet: Sequence[EndpointLive] = (), sync: SyncView | None = None) -> StatsSnapshot:
        """The figures now, from the results kept here and the fleet's live view (`fleet`, by endpoint index)."""
        now = self.clock()
        elapsed = max(1e-9, now - self.start)
        short_rates, long_rates, server_rates = self._rates(now, fleet)
        remaining = None if self.total is None else max(0, self.total - self.done - self.failed)
        in_flight = sum(e.in_flight for e in fleet)
        streamed = sum(e.streamed_tokens for e in fleet)
        tokens_long = _rate_sum(long_rates)
        tokens_short = _rate_sum(short_rates)
        parts = None if self.stopping else self._eta(now, remaining, fleet)
        eta_s = None if parts is None else parts.seconds
        gpus, gpus_source = self._gpus(fleet)
        gpu_hours = _gpu_hours(gpus, elapsed + eta_s) if eta_s is not None else None
        server_own = [e.server_gen_rate if e.server_gen_rate is not None else server_rates[i]
                      for i, e in enumerate(fleet)]
        results = [self.endpoints[i] if i < len(self.endpoints) else EndpointResults() for i in range(len(fleet))]
        endpoints = tuple(_endpoint_snapshot(e, r, short_rates[i], long_rates[i], server_own[i])
                          for i, (e, r) in enumerate(zip(fleet, results, strict=True)))
        cached = _sum([None if r.cached_tokens is None else float(r.cached_tokens) for r in self.endpoints])
        accepts = [e.server_accept_length for e in fleet if e.server_accept_length is not None]
        wakes = [wake - now for wake in self._waits.values()]
        return StatsSnapshot(
            elapsed_s=elapsed,
            total=self.total,
            done=self.done,
            failed=self.failed,
            too_long=self.too_long,
            fills_window=self.fills_window,
            retries=self.retries,
            truncated=self.truncated,
            in_flight=in_flight,
            completion_tokens=self.completion_tokens,
            prompt_tokens=self.prompt_tokens,
            tokens_per_s_short=tokens_short,
            tokens_per_s_long=tokens_long,
            eta_s=eta_s,
            gpu_hours_projected=gpu_hours,
            errors_by_kind=dict(self.errors_by_kind),
            endpoints=endpoints,
            streamed_tokens=streamed,
            server_tokens_per_s=_sum(server_own),
            cache_hit=_share(cached, self.prompt_tokens),
            gpu_hours_so_far=_gpu_hours(gpus, elapsed),
            expected_tokens_per_prompt=self.expected_tokens_per_prompt,
            sync=sync,
            accept_length=_mean(accepts),
            loops_stopped=self.loops_stopped,
            continued=self.continued,
            continued_kept=self.continued_kept,
            waiting=len(self._waits),
            waiting_wake_s=(min(wakes), max(wakes)) if wakes else None,
            gpus=gpus, gpus_source=gpus_source, eta_parts=parts,
            cancelled_in_flight=self.cancelled_in_flight, cancelled_ids=tuple(self.cancelled_ids),
            stopping=self.stopping,
        )


def _rate_sum(rates: Sequence[float | None]) -> float:
    return sum(r or 0.0 for r in rates)


def _gpu_hours(gpus: int | None, seconds: float) -> float | None:
    return gpus * seconds / 3600.0 if gpus else None


def _share(part: float | None, whole: int) -> float | None:
    return None if part is None or not whole else part / whole


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _endpoint_snapshot(e: EndpointLive, r: EndpointResults, short_rate: float | None, long_rate: float | None,
                       server_rate: float | None) -> EndpointSnapshot:
    """One endpoint's row: its live view (the dispatcher's) beside its results (kept here)."""
    return EndpointSnapshot(
        url=e.url, state=e.state, in_flight=e.in_flight, max_in_flight=e.max_in_flight, capacity=e.capacity,
        done=r.done, errors=r.errors, tokens_per_s=short_rate or 0.0,
        server_running=e.server_running, server_waiting=e.server_waiting,
        last_error=e.note if e.state != "up" and e.note else r.last_error,
        tokens_per_s_long=long_rate or 0.0, server_tokens_per_s=server_rate,
        token_usage=e.server_token_usage, accept_length=e.server_accept_length,
        cache_hit=_share(None if r.cached_tokens is None else float(r.cached_tokens), r.prompt_tokens),
    )
