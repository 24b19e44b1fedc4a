"""The run's results as plain data, written by the swarm; frozen snapshots for readers (console, summary,
the Prometheus endpoint). Each endpoint's live state is owned where it changes (health, in-flight and load
by the dispatcher, streamed-token counters by the endpoint) and handed to `snapshot` as EndpointLive rows.

Throughput is the completion tokens counted as they stream (exact where the server sends running usage,
client.wire.sse), over a short and a 5-minute window (client.core.meter), so it reads true while long
replies are still being written. Beside it stands what each server says it generates, which includes any
other traffic on a shared server. The ETA divides the tokens still expected (remaining prompts times
the estimate's mean, or the mean so far) by the 5-minute token rate.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from client.core.meter import WindowedRates


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
    fills_window: int = 0  # of too_long: prompts that alone fill --train-window
    waiting: int = 0  # requests sleeping before their next attempt (backoff or Retry-After)
    waiting_wake_s: tuple[float, float] | None = None  # (soonest, latest) wake, seconds from the snapshot

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
    long_window_s: float = 300.0
    started: float = field(default_factory=time.monotonic)
    total: int | None = None
    done: int = 0
    failed: int = 0
    too_long: int = 0  # of `failed`: prompts over the context, not retried by later runs
    fills_window: int = 0  # of `too_long`: prompts that alone fill --train-window
    retries: int = 0
    truncated: int = 0
    loops_stopped: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    expected_tokens_per_prompt: float | None = None  # the estimate's mean, when the run was given one
    errors_by_kind: Counter[str] = field(default_factory=Counter)
    endpoints: list[EndpointResults] = field(default_factory=list)  # by endpoint index
    _finished: deque[float] = field(default_factory=deque)
    _waits: dict[int, float] = field(default_factory=dict)  # wait id -> monotonic wake time
    _wait_ids: itertools.count[int] = field(default_factory=itertools.count)
    _streamed: WindowedRates | None = None
    _server: WindowedRates | None = None

    def track(self, endpoints: int) -> None:
        """Results are kept for this many endpoints (by index)."""
        self.endpoints = [EndpointResults() for _ in range(endpoints)]

    def record_done(self, index: int, usage: Mapping[str, Any], finish_reason: str | None) -> None:
        now = time.monotonic()
        completion_tokens = int(usage.get("completion_tokens") or 0)
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
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
        self._finished.append(now)
        horizon = now - self.long_window_s
        while self._finished and self._finished[0] < horizon:
            self._finished.popleft()

    def record_error(self, index: int | None, kind: str, message: str) -> None:
        self.errors_by_kind[kind] += 1
        if index is not None:
            endpoint = self.endpoints[index]
            endpoint.errors += 1
            endpoint.last_error = message[:200]

    def begin_wait(self, seconds: float) -> int:
        """A request sleeps `seconds` before its next attempt; returns the id to pass to `end_wait`."""
        wait = next(self._wait_ids)
        self._waits[wait] = time.monotonic() + seconds
        return wait

    def end_wait(self, wait: int) -> None:
        self._waits.pop(wait, None)

    def _rates(self, now: float, fleet: Sequence[EndpointLive]
               ) -> tuple[list[float | None], list[float | None], list[float | None]]:
        """(streamed tok/s short, streamed tok/s long, server-counted tok/s short), per endpoint."""
        if self._streamed is None or self._server is None:
            self._streamed = WindowedRates(self.started, keep_s=self.long_window_s + 30)
            self._server = WindowedRates(self.started, keep_s=self.short_window_s + 30)
        streamed = [float(e.streamed_tokens) for e in fleet]
        generated = [e.server_generated for e in fleet]
        self._streamed.sample(now, streamed)
        self._server.sample(now, generated)
        return (self._streamed.rates(now, streamed, self.short_window_s),
                self._streamed.rates(now, streamed, self.long_window_s),
                self._server.rates(now, generated, self.short_window_s, from_zero=False))

    def _eta(self, remaining: int | None, in_flight: int, streamed: int, tokens_rate: float,
             requests_rate: float) -> float | None:
        """From the tokens still expected over the 5-minute token rate; by requests when no mean is known."""
        if remaining is None:
            return None
        if remaining == 0:
            return 0.0
        mean = self.expected_tokens_per_prompt or (self.completion_tokens / self.done if self.done else None)
        if mean is not None and tokens_rate > 0:
            # Tokens already streamed for requests still open count as done work.
            partial = min(max(0, streamed - self.completion_tokens), in_flight * mean)
            return max(0.0, remaining * mean - partial) / tokens_rate
        return remaining / requests_rate if requests_rate > 0 else None

    def snapshot(self, fleet: Sequence[EndpointLive] = (), sync: SyncView | None = None) -> StatsSnapshot:
        """The figures now, from the results kept here and the fleet's live view (`fleet`, by endpoint index)."""
        now = time.monotonic()
        elapsed = max(1e-9, now - self.started)
        long_span = min(self.long_window_s, elapsed)
        short_rates, long_rates, server_rates = self._rates(now, fleet)
        requests_rate = sum(1 for t in self._finished if t >= now - long_span) / long_span
        remaining = None if self.total is None else max(0, self.total - self.done - self.failed)
        in_flight = sum(e.in_flight for e in fleet)
        streamed = sum(e.streamed_tokens for e in fleet)
        tokens_long = sum(r or 0.0 for r in long_rates)
        eta = self._eta(remaining, in_flight, streamed, tokens_long, requests_rate)
        gpu_hours = None if not self.gpus or eta is None else self.gpus * (elapsed + eta) / 3600.0
        server_own = [e.server_gen_rate if e.server_gen_rate is not None else server_rates[i]
                      for i, e in enumerate(fleet)]
        results = [self.endpoints[i] if i < len(self.endpoints) else EndpointResults() for i in range(len(fleet))]
        endpoints = tuple(
            EndpointSnapshot(
                url=e.url, state=e.state, in_flight=e.in_flight, max_in_flight=e.max_in_flight, capacity=e.capacity,
                done=r.done, errors=r.errors, tokens_per_s=short_rates[i] or 0.0,
                server_running=e.server_running, server_waiting=e.server_waiting,
                last_error=e.note if e.state != "up" and e.note else r.last_error,
                tokens_per_s_long=long_rates[i] or 0.0, server_tokens_per_s=server_own[i],
                token_usage=e.server_token_usage, accept_length=e.server_accept_length,
                cache_hit=None if r.cached_tokens is None or not r.prompt_tokens else r.cached_tokens / r.prompt_tokens,
            )
            for i, (e, r) in enumerate(zip(fleet, results, strict=True))
        )
        cached = _sum([None if r.cached_tokens is None else float(r.cached_tokens) for r in self.endpoints])
        accepts = [e.server_accept_length for e in fleet if e.server_accept_length is not None]
        wakes = self._waits.values()
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
            tokens_per_s_short=sum(r or 0.0 for r in short_rates),
            tokens_per_s_long=tokens_long,
            eta_s=eta,
            gpu_hours_projected=gpu_hours,
            errors_by_kind=dict(self.errors_by_kind),
            endpoints=endpoints,
            streamed_tokens=streamed,
            server_tokens_per_s=_sum(server_own),
            cache_hit=None if cached is None or not self.prompt_tokens else cached / self.prompt_tokens,
            gpu_hours_so_far=None if not self.gpus else self.gpus * elapsed / 3600.0,
            expected_tokens_per_prompt=self.expected_tokens_per_prompt,
            sync=sync,
            accept_length=sum(accepts) / len(accepts) if accepts else None,
            loops_stopped=self.loops_stopped,
            waiting=len(self._waits),
            waiting_wake_s=(min(wakes) - now, max(wakes) - now) if wakes else None,
        )
