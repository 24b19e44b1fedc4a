"""Run counters as plain data, written by the swarm; frozen snapshots for readers (console, summary).

Throughput is measured from `usage.completion_tokens` of finished requests (never from chunk counts) over
a short and a long window.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field


@dataclass
class EndpointCounters:
    url: str
    index: int
    state: str = "starting"
    in_flight: int = 0
    max_in_flight: int = 0
    capacity: int | None = None
    done: int = 0
    errors: int = 0
    completion_tokens: int = 0
    chunks: int = 0  # SSE events received, for the client-cost benchmark and debugging
    reads: int = 0  # transport reads that delivered them
    server_running: int | None = None
    server_waiting: int | None = None
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    url: str
    state: str
    in_flight: int
    max_in_flight: int
    capacity: int | None
    done: int
    errors: int
    tokens_per_s: float
    server_running: int | None
    server_waiting: int | None
    last_error: str


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
    requests_per_s_long: float
    eta_s: float | None
    gpu_hours_projected: float | None
    sync_lag: str
    errors_by_kind: dict[str, int]
    endpoints: tuple[EndpointSnapshot, ...]

    @property
    def remaining(self) -> int | None:
        return None if self.total is None else max(0, self.total - self.done - self.failed)


@dataclass
class RunStats:
    """Mutable counters; only the swarm writes them, in the event loop thread."""

    gpus: int | None = None
    short_window_s: float = 15.0
    long_window_s: float = 300.0
    started: float = field(default_factory=time.monotonic)
    total: int | None = None
    done: int = 0
    failed: int = 0
    too_long: int = 0  # of `failed`: prompts over the context, not retried by later runs
    retries: int = 0
    truncated: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    sync_lag: str = ""
    errors_by_kind: Counter[str] = field(default_factory=Counter)
    endpoints: list[EndpointCounters] = field(default_factory=list)
    _finished: deque[tuple[float, int, int]] = field(default_factory=deque)

    def record_done(self, endpoint: EndpointCounters, completion_tokens: int, prompt_tokens: int,
                    finish_reason: str | None) -> None:
        now = time.monotonic()
        self.done += 1
        self.completion_tokens += completion_tokens
        self.prompt_tokens += prompt_tokens
        if finish_reason == "length":
            self.truncated += 1
        endpoint.done += 1
        endpoint.completion_tokens += completion_tokens
        self._finished.append((now, completion_tokens, endpoint.index))
        horizon = now - self.long_window_s
        while self._finished and self._finished[0][0] < horizon:
            self._finished.popleft()

    def record_error(self, endpoint: EndpointCounters | None, kind: str, message: str) -> None:
        self.errors_by_kind[kind] += 1
        if endpoint is not None:
            endpoint.errors += 1
            endpoint.last_error = message[:200]

    def snapshot(self) -> StatsSnapshot:
        now = time.monotonic()
        elapsed = max(1e-9, now - self.started)
        short_from = now - self.short_window_s
        long_span = min(self.long_window_s, elapsed)
        short_span = min(self.short_window_s, elapsed)
        short_tokens = long_tokens = long_requests = 0
        per_endpoint = [0] * len(self.endpoints)
        for finished_at, tokens, index in self._finished:
            if finished_at >= now - long_span:
                long_tokens += tokens
                long_requests += 1
            if finished_at >= short_from:
                short_tokens += tokens
                per_endpoint[index] += tokens
        requests_rate = long_requests / long_span if long_span > 0 else 0.0
        remaining = None if self.total is None else max(0, self.total - self.done - self.failed)
        eta = remaining / requests_rate if remaining is not None and requests_rate > 0 else None
        if remaining == 0:
            eta = 0.0
        gpu_hours = None
        if self.gpus and eta is not None:
            gpu_hours = self.gpus * (elapsed + eta) / 3600.0
        endpoints = tuple(
            EndpointSnapshot(
                url=e.url, state=e.state, in_flight=e.in_flight, max_in_flight=e.max_in_flight, capacity=e.capacity,
                done=e.done, errors=e.errors,
                tokens_per_s=per_endpoint[i] / short_span if short_span > 0 else 0.0,
                server_running=e.server_running, server_waiting=e.server_waiting, last_error=e.last_error,
            )
            for i, e in enumerate(self.endpoints)
        )
        return StatsSnapshot(
            elapsed_s=elapsed,
            total=self.total,
            done=self.done,
            failed=self.failed,
            too_long=self.too_long,
            retries=self.retries,
            truncated=self.truncated,
            in_flight=sum(e.in_flight for e in self.endpoints),
            completion_tokens=self.completion_tokens,
            prompt_tokens=self.prompt_tokens,
            tokens_per_s_short=short_tokens / short_span if short_span > 0 else 0.0,
            tokens_per_s_long=long_tokens / long_span if long_span > 0 else 0.0,
            requests_per_s_long=requests_rate,
            eta_s=eta,
            gpu_hours_projected=gpu_hours,
            sync_lag=self.sync_lag,
            errors_by_kind=dict(self.errors_by_kind),
            endpoints=endpoints,
        )
