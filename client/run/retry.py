"""One generation with retries: pick an endpoint, stream, classify the failure, back off, try again.

Retries follow the error class (client.core.errors): connection errors, 5xx, 429 (honouring Retry-After), a
dropped, stalled or error-event stream are tried again on any healthy endpoint, preferring another one;
4xx is permanent. A stop request ends the wait between attempts at once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import orjson
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from client.core.errors import AttemptError, RateLimited
from client.core.payload import FieldPolicy, SamplingSettings, build_payload
from client.core.records import Completion, Prompt
from client.core.stats import RunStats
from client.fleet.dispatcher import DispatchClosed, Dispatcher
from client.run.rate import RequestRate
from client.wire.endpoint import Endpoint


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 6
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    jitter_s: float = 1.0


@dataclass(frozen=True, slots=True)
class Generation:
    completion: Completion
    endpoint: Endpoint
    attempts: int
    queued_s: float
    ttft_s: float | None
    total_s: float


class GenerationFailed(Exception):
    """Every attempt failed, or the failure was permanent."""

    def __init__(self, error: AttemptError, attempts: int, endpoint: Endpoint | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts
        self.endpoint = endpoint


class Abandoned(Exception):
    """The run is stopping: this generation is left for the next run."""


class Generator:
    def __init__(self, *, dispatcher: Dispatcher, stats: RunStats, settings: SamplingSettings, model: str,
                 retry: RetryPolicy, stopping: asyncio.Event, policy: FieldPolicy | None = None,
                 rate: RequestRate | None = None) -> None:
        self.dispatcher = dispatcher
        self.stats = stats
        self.settings = settings
        self.model = model
        self.policy = policy or FieldPolicy.everything()
        # --max-requests-per-second: a hosted endpoint's agreed request rate, retries included.
        self.rate = rate
        self.retry = retry
        self.stopping = stopping
        self._backoff = wait_exponential_jitter(initial=retry.initial_backoff_s, max=retry.max_backoff_s,
                                                jitter=retry.jitter_s)

    def _wait(self, state: RetryCallState) -> float:
        backoff = self._backoff(state)
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, RateLimited) and error.retry_after is not None:
            return max(backoff, error.retry_after)
        return float(backoff)

    async def _sleep(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self.stopping.wait()
        except TimeoutError:
            return
        raise Abandoned

    async def generate(self, prompt: Prompt, messages: list[dict[str, Any]], *,
                       prefer: int | None = None) -> Generation:
        """`prefer`: the endpoint to use while it is up (a conversation's earlier turns went there)."""
        attempts = 0
        queued_s = 0.0
        started = time.monotonic()
        last: Endpoint | None = None
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.max_attempts),
            wait=self._wait,
            retry=retry_if_exception(lambda exc: isinstance(exc, AttemptError) and exc.retryable),
            sleep=self._sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    waited_from = time.monotonic()
                    if self.rate is not None:
                        await self.rate.wait_turn()
                    try:
                        endpoint = await self.dispatcher.acquire(
                            avoid=last.index if last is not None else None,
                            prefer=prefer if last is None else None)
                    except DispatchClosed:
                        raise Abandoned from None
                    queued_s += time.monotonic() - waited_from
                    last = endpoint
                    completion, ttft = await self._attempt(endpoint, prompt, messages, attempts)
        except AttemptError as exc:
            raise GenerationFailed(exc, attempts, last) from exc
        assert last is not None
        return Generation(completion, last, attempts, queued_s, ttft, time.monotonic() - started)

    async def _attempt(self, endpoint: Endpoint, prompt: Prompt, messages: list[dict[str, Any]],
                       attempt: int) -> tuple[Completion, float | None]:
        payload = build_payload(prompt, messages, self.settings, model=self.model,
                                id_fields=endpoint.id_fields, policy=self.policy)
        try:
            result = await endpoint.stream_chat(orjson.dumps(payload), max_tokens=payload.get("max_tokens"))
        except AttemptError as exc:
            self.stats.record_error(endpoint.counters, exc.kind, str(exc))
            await self.dispatcher.report_failure(endpoint, exc)
            if exc.retryable and attempt < self.retry.max_attempts and not self.stopping.is_set():
                self.stats.retries += 1
            raise
        finally:
            await self.dispatcher.release(endpoint)
        await self.dispatcher.report_success(endpoint)
        return result
