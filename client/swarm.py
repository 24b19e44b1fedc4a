"""TaskGroup orchestration of one run: read prompts, dispatch, retry, write, shut down.

One TaskGroup owns every task: a producer (reads prompts in a thread, in batches, into a bounded queue),
a fixed pool of workers (one per request the run may have in flight, never one per prompt), one watcher
per endpoint, the segment rotator, and any companion loops (the console). Stop: dispatch ends at once, the
requests in flight get a grace period, then they are cancelled; what is not written is sent again on the
next run.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from client.dispatch import DispatchClosed, Dispatcher
from client.endpoint import Endpoint
from client.errors import AttemptError, InputError, RateLimited, RegenError, SinkError
from client.records import Completion, FailureRecord, Prompt, ResultRecord
from client.request import SamplingSettings, build_payload, request_messages
from client.sink import ResultSink
from client.source import PromptSource
from client.stats import RunStats


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 6
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    jitter_s: float = 1.0


@dataclass
class SwarmOutcome:
    interrupted: bool = False
    fatal: RegenError | None = None
    abandoned: int = 0


class _Abandoned(Exception):
    """The run is stopping: this prompt is left for the next run."""


def _take(iterator: Iterator[Prompt], count: int) -> list[Prompt]:
    return list(itertools.islice(iterator, count))


class Swarm:
    def __init__(
        self,
        *,
        endpoints: list[Endpoint],
        source: PromptSource,
        sink: ResultSink,
        stats: RunStats,
        settings: SamplingSettings,
        model: str,
        retry: RetryPolicy = RetryPolicy(),
        grace_s: float = 30.0,
        rotate_check_s: float = 5.0,
        dispatcher: Dispatcher | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.source = source
        self.sink = sink
        self.stats = stats
        self.settings = settings
        self.model = model
        self.retry = retry
        self.grace_s = grace_s
        self.rotate_check_s = rotate_check_s
        self.dispatcher = dispatcher or Dispatcher(endpoints)
        self.outcome = SwarmOutcome()
        self.concurrency = sum(e.max_in_flight for e in endpoints)
        self._queue: asyncio.Queue[Prompt | None] = asyncio.Queue(maxsize=max(8, self.concurrency))
        self._stopping = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self._producer: asyncio.Task[None] | None = None
        self._recorded = self.settings.recorded()
        self._backoff = wait_exponential_jitter(initial=retry.initial_backoff_s, max=retry.max_backoff_s,
                                                jitter=retry.jitter_s)

    # -- control ---------------------------------------------------------------------------------------

    def request_stop(self, *, immediate: bool = False) -> None:
        """First call: stop dispatching and give in-flight requests the grace period. `immediate`: cancel now."""
        if not self._stopping.is_set():
            self.outcome.interrupted = self.outcome.fatal is None
            self._stopping.set()
            if self._producer is not None:
                self._producer.cancel()
            asyncio.get_running_loop().create_task(self.dispatcher.close())
            self._release_idle_workers()
            if not immediate:
                asyncio.get_running_loop().call_later(self.grace_s, self._cancel_workers)
        if immediate:
            self._cancel_workers()

    def _release_idle_workers(self) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()
        for _ in self._workers:
            self._queue.put_nowait(None)

    def _cancel_workers(self) -> None:
        for task in self._workers:
            task.cancel()

    def _fail(self, error: RegenError, *, immediate: bool = True) -> None:
        if self.outcome.fatal is None:
            self.outcome.fatal = error
        self.request_stop(immediate=immediate)

    # -- the run ---------------------------------------------------------------------------------------

    async def run(self, companions: list[Callable[[], Coroutine[Any, Any, None]]] | None = None) -> SwarmOutcome:
        await self.dispatcher.prime()
        async with asyncio.TaskGroup() as group:
            side = [group.create_task(self.dispatcher.watch(e)) for e in self.endpoints]
            side.append(group.create_task(self._rotate()))
            side.extend(group.create_task(make()) for make in companions or [])
            self._workers = [group.create_task(self._work()) for _ in range(self.concurrency)]
            self._producer = group.create_task(self._produce())
            await asyncio.wait(self._workers)
            self._producer.cancel()
            await self.dispatcher.close()
            for task in side:
                task.cancel()
        return self.outcome

    async def _produce(self) -> None:
        prompts = iter(self.source)
        try:
            while not self._stopping.is_set():
                batch = await asyncio.to_thread(_take, prompts, 256)
                if not batch:
                    break
                for prompt in batch:
                    await self._queue.put(prompt)
        except InputError as exc:
            # --strict: the requests already in flight still get their grace period and are kept.
            self._fail(exc, immediate=False)
            return
        for _ in self._workers:
            await self._queue.put(None)

    async def _rotate(self) -> None:
        while True:
            await asyncio.sleep(self.rotate_check_s)
            try:
                self.sink.rotate_if_due()
            except SinkError as exc:
                self._fail(exc)
                return

    async def _work(self) -> None:
        while True:
            prompt = await self._queue.get()
            if prompt is None:
                return
            if self._stopping.is_set():
                continue
            try:
                await self._process(prompt)
            except _Abandoned:
                self.outcome.abandoned += 1
            except SinkError as exc:
                self._fail(exc)
                return

    # -- one prompt ------------------------------------------------------------------------------------

    def _wait(self, state: RetryCallState) -> float:
        backoff = self._backoff(state)
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, RateLimited) and error.retry_after is not None:
            return max(backoff, error.retry_after)
        return float(backoff)

    async def _sleep(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self._stopping.wait()
        except TimeoutError:
            return
        raise _Abandoned

    async def _process(self, prompt: Prompt) -> None:
        messages = request_messages(prompt)
        attempts = 0
        queued_s = 0.0
        started = time.monotonic()
        last_endpoint: Endpoint | None = None
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
                    try:
                        endpoint = await self.dispatcher.acquire(
                            avoid=last_endpoint.index if last_endpoint is not None else None)
                    except DispatchClosed:
                        raise _Abandoned from None
                    queued_s += time.monotonic() - waited_from
                    last_endpoint = endpoint
                    completion, ttft = await self._attempt(endpoint, prompt, messages, attempts)
        except AttemptError as exc:
            self._record_failure(prompt, exc, attempts, last_endpoint)
            return
        assert last_endpoint is not None
        self._record_result(prompt, messages, completion, last_endpoint, attempts,
                            queued_s, ttft, time.monotonic() - started)

    async def _attempt(self, endpoint: Endpoint, prompt: Prompt, messages: list[dict[str, Any]],
                       attempt: int) -> tuple[Completion, float | None]:
        payload = build_payload(prompt, messages, self.settings, model=self.model,
                                return_token_ids=endpoint.supports_token_ids)
        try:
            result = await endpoint.stream_chat(orjson.dumps(payload))
        except AttemptError as exc:
            self.stats.record_error(endpoint.counters, exc.kind, str(exc))
            await self.dispatcher.report_failure(endpoint, exc)
            if exc.retryable and attempt < self.retry.max_attempts and not self._stopping.is_set():
                self.stats.retries += 1
            raise
        finally:
            await self.dispatcher.release(endpoint)
        await self.dispatcher.report_success(endpoint)
        return result

    def _record_result(self, prompt: Prompt, messages: list[dict[str, Any]], completion: Completion,
                       endpoint: Endpoint, attempts: int, queued_s: float, ttft: float | None,
                       total_s: float) -> None:
        record: ResultRecord = {
            "id": prompt.id,
            "messages": messages,
            "sampling": self._recorded,
            "reasoning": completion.reasoning,
            "content": completion.content,
            "tool_calls": [call.to_wire() for call in completion.tool_calls],
            "finish_reason": completion.finish_reason,
            "usage": completion.usage,
            "model": completion.model or self.model,
            "endpoint": endpoint.url,
            "timings": {"queued_s": round(queued_s, 4), "ttft_s": None if ttft is None else round(ttft, 4),
                        "total_s": round(total_s, 4)},
            "attempts": attempts,
            "created": time.time(),
        }
        if prompt.tools:
            record["tools"] = prompt.tools
        if completion.prompt_token_ids is not None:
            record["prompt_token_ids"] = completion.prompt_token_ids
        if completion.completion_token_ids is not None:
            record["completion_token_ids"] = completion.completion_token_ids
        if prompt.meta is not None:
            record["meta"] = prompt.meta
        self.sink.write_result(record)
        usage = completion.usage
        self.stats.record_done(endpoint.counters, int(usage.get("completion_tokens", 0)),
                               int(usage.get("prompt_tokens", 0)), completion.finish_reason)

    def _record_failure(self, prompt: Prompt, error: AttemptError, attempts: int,
                        endpoint: Endpoint | None) -> None:
        failure: FailureRecord = {
            "id": prompt.id,
            "error_class": error.kind,
            "last_error": str(error),
            "attempts": attempts,
            "endpoint": endpoint.url if endpoint is not None else None,
            "created": time.time(),
        }
        self.sink.write_failure(failure)
        self.stats.failed += 1

