"""One generation with retries: pick an endpoint, stream, classify the failure, back off, try again.

Retries follow the error class (client.core.errors): connection errors, 5xx, 429 (honouring Retry-After), a
dropped, stalled or error-event stream are tried again on any healthy endpoint, preferring another one;
4xx is permanent. A stop request ends the wait between attempts at once. The rule is tenacity's alone: its
predicate decides a retry, and the retry count is taken where tenacity goes to sleep for one.

A server's Retry-After is honoured up to `max_retry_after_s` (--max-retry-after, DEFAULT_MAX_RETRY_AFTER_S):
`Retry-After: 100000` from a misconfigured proxy would otherwise park a prompt for 28 hours. Each wait is
entered in the run's stats (RunStats.begin_wait), so the console shows the waiting requests and when they
wake. So is each stream (RunStats.begin_attempt), for the ETA's requests in flight; one that a stop cancels
mid-stream is named there, for the summary.

Under `--token-ids on` a reply without the ids is a failed attempt (MissingTokenIds, retried): the shape
says which endpoints must give them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from client.core.errors import AttemptError, FillsWindow, MissingTokenIds, RateLimited
from client.core.options import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_RETRY_AFTER_S
from client.core.payload import RequestShape
from client.core.records import Completion, Prompt
from client.core.stats import RunStats
from client.engine.native_reply import ReplyInProgress, native_attempt, prompt_ids
from client.engine.partials import PartialKeeper
from client.engine.rate import RequestRate
from client.fleet.dispatcher import DispatchClosed, Dispatcher
from client.wire.endpoint import LOOP_FINISH_REASON, Endpoint
from client.wire.native import Parsers

# --tokenizer DIR: a prompt's token count by the model's own chat template and tokenizer, on this host.
LocalCount = Callable[[Prompt, list[dict[str, Any]]], int]

# Five minutes: longer than any rate-limit window an inference server or gateway announces in practice,
# short enough that a bogus Retry-After cannot stall a prompt for hours.


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    jitter_s: float = 1.0
    max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S


@dataclass(frozen=True, slots=True)
class WindowCut:
    """--train-window: the prompt's exact count (the server's own) and the max_tokens the request got."""

    size: int
    prompt_tokens: int
    max_tokens: int


@dataclass(frozen=True, slots=True)
class Generation:
    completion: Completion
    endpoint: Endpoint
    attempts: int
    queued_s: float
    ttft_s: float | None
    total_s: float
    window: WindowCut | None = None


class GenerationFailed(Exception):
    """Every attempt failed, or the failure was permanent."""

    def __init__(self, error: AttemptError, attempts: int, endpoint: Endpoint | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts
        self.endpoint = endpoint


class Abandoned(Exception):
    """The run is stopping: this generation is left for the next run."""


def _retryable(error: BaseException) -> bool:
    return isinstance(error, AttemptError) and error.retryable


class Generator:
    def __init__(self, *, dispatcher: Dispatcher, stats: RunStats, shape: RequestShape, retry: RetryPolicy,
                 rate: RequestRate | None = None, stop_loops: bool = False,
                 train_window: int | None = None, local_count: LocalCount | None = None,
                 native: Parsers | None = None, keeper: PartialKeeper | None = None) -> None:
        self.dispatcher = dispatcher
        self.stats = stats
        self.shape = shape
        # --max-requests-per-second: a hosted endpoint's agreed request rate, retries included.
        self.rate = rate
        self.retry = retry
        self.stop_loops = stop_loops  # --loop-stop: end a stream whose tail repeats (client.loops.repetition)
        self.train_window = train_window  # --train-window: max_tokens = the window minus the prompt's count
        self.local_count = local_count  # --tokenizer: counts prompts for servers that cannot count them
        # --continue-replies: replies made on /generate from exact ids, a broken one continued (native_reply)
        self.native = native
        self.keeper = keeper  # --continue-replies: the replies in flight, kept in OUT/partials
        self._backoff = wait_exponential_jitter(multiplier=retry.initial_backoff_s, max=retry.max_backoff_s,
                                                jitter=retry.jitter_s)

    def _wait(self, state: RetryCallState) -> float:
        backoff = self._backoff(state)
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, RateLimited) and error.retry_after is not None:
            return max(backoff, min(error.retry_after, self.retry.max_retry_after_s))
        return float(backoff)

    def _count_retry(self, state: RetryCallState) -> None:
        """Called by tenacity once it has decided to try again: the one place a retry is counted."""
        if not self.dispatcher.closed:  # a stop's abandoned attempt is not a retry
            self.stats.retries += 1

    async def _sleep(self, seconds: float) -> None:
        wait = self.stats.begin_wait(seconds)
        try:
            async with asyncio.timeout(seconds):
                await self.dispatcher.wait_closed()
        except TimeoutError:
            return
        finally:
            self.stats.end_wait(wait)
        raise Abandoned

    async def generate(self, prompt: Prompt, messages: list[dict[str, Any]], *,
                       prefer: int | None = None) -> Generation:
        """`prefer`: the endpoint to use while it is up (a conversation's earlier turns went there)."""
        attempts = 0
        queued_s = 0.0
        started = time.monotonic()
        last: Endpoint | None = None
        window: list[WindowCut] = []  # counted once per prompt, on the first endpoint that answers
        # --continue-replies: the ids received so far, kept across attempts (and runs, with the keeper)
        reply = self.keeper.begin(prompt) if self.keeper is not None else ReplyInProgress()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.max_attempts),
            wait=self._wait,
            retry=retry_if_exception(_retryable),
            before_sleep=self._count_retry,
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
                    completion, ttft = await self._attempt(endpoint, prompt, messages, window, reply, attempts)
        except AttemptError as exc:
            raise GenerationFailed(exc, attempts, last) from exc
        assert last is not None
        return Generation(completion, last, attempts, queued_s, ttft, time.monotonic() - started,
                          window[0] if window else None)

    async def _window(self, endpoint: Endpoint, prompt: Prompt, messages: list[dict[str, Any]],
                      size: int) -> WindowCut:
        path = self.shape.count_path(endpoint.index)
        if path is not None:
            counted = await endpoint.count_prompt(path, orjson.dumps(self.shape.count_request(prompt, messages)))
        elif self.local_count is not None:
            # Rendering and encoding a long prompt takes milliseconds: off the event loop.
            counted = await asyncio.to_thread(self.local_count, prompt, messages)
        else:  # refused at start (client.engine.fields); a guard, not a path
            raise RuntimeError(f"{endpoint.url} cannot count prompt tokens")
        return self._cut(endpoint, prompt, counted, size)

    def _cut(self, endpoint: Endpoint, prompt: Prompt, counted: int, size: int) -> WindowCut:
        room = size - counted
        if room < 1:
            raise FillsWindow(f"the prompt alone is {counted} tokens on {endpoint.url}, the training window "
                              f"--train-window {size}: the trainer would keep none of the reply, so it is not sent",
                              size)
        return WindowCut(size, counted, min(room, self.shape.max_tokens(prompt)))

    async def _native(self, endpoint: Endpoint, prompt: Prompt, messages: list[dict[str, Any]],
                      window: list[WindowCut], reply: ReplyInProgress, attempt: int,
                      parsers: Parsers) -> tuple[Completion, float | None]:
        """--continue-replies: the reply on /generate from its exact ids, continued after a broken attempt."""
        ids = await prompt_ids(endpoint, self.shape, prompt, messages, reply)
        if self.train_window is not None and not window:
            window.append(self._cut(endpoint, prompt, len(ids), self.train_window))
        max_tokens = window[0].max_tokens if window else self.shape.max_tokens(prompt)
        return await native_attempt(endpoint, self.shape, prompt, messages, reply, attempt=attempt,
                                    max_tokens=max_tokens, parsers=parsers)

    async def _chat(self, endpoint: Endpoint, prompt: Prompt, messages: list[dict[str, Any]],
                    window: list[WindowCut]) -> tuple[Completion, float | None]:
        if self.train_window is not None and not window:
            window.append(await self._window(endpoint, prompt, messages, self.train_window))
        max_tokens = window[0].max_tokens if window else self.shape.max_tokens(prompt)
        body = orjson.dumps(self.shape.payload(prompt, messages, endpoint.index, max_tokens if window else None))
        # The endpoint's scope ends the stream as a retryable StreamDropped if it goes out of rotation.
        streaming = self.stats.begin_attempt(endpoint.index)
        cancelled: str | None = prompt.id  # unless the stream ends by itself
        try:
            async with self.dispatcher.scope(endpoint):
                completion, ttft = await endpoint.stream_chat(body, max_tokens=max_tokens, stop_loops=self.stop_loops)
            cancelled = None
        except Exception:
            cancelled = None  # a failed attempt, not a cancelled one
            raise
        finally:
            self.stats.end_attempt(streaming, cancelled_id=cancelled)
        return completion, ttft

    async def _attempt(self, endpoint: Endpoint, prompt: Prompt, messages: list[dict[str, Any]],
                       window: list[WindowCut], reply: ReplyInProgress,
                       attempt: int) -> tuple[Completion, float | None]:
        ids = self.shape.ids_for(endpoint.index)
        try:
            try:
                if self.native is not None:
                    streaming = self.stats.begin_attempt(endpoint.index)
                    try:
                        async with self.dispatcher.scope(endpoint):
                            completion, ttft = await self._native(endpoint, prompt, messages, window, reply, attempt,
                                                                  self.native)
                    finally:
                        self.stats.end_attempt(streaming, cancelled_id=None)
                else:
                    completion, ttft = await self._chat(endpoint, prompt, messages, window)
            finally:
                self.dispatcher.release(endpoint)
            # A reply the loop stop ended never reached the chunk that carries SGLang's ids; it is kept without.
            if ids.required and not completion.completion_token_ids and completion.finish_reason != LOOP_FINISH_REASON:
                raise MissingTokenIds(f"{endpoint.url} answered without the token ids --token-ids on asked for "
                                      f"({', '.join(ids.fields)})")
        except AttemptError as exc:
            self.stats.record_error(endpoint.index, exc.kind, str(exc))
            self.dispatcher.report_failure(endpoint, exc)
            raise
        self.dispatcher.report_success(endpoint)
        return completion, ttft
