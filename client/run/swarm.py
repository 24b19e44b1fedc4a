"""TaskGroup orchestration of one run: read prompts, hand them to workers, write what comes back, stop.

One TaskGroup owns every task: a producer (reads prompts in a thread, in batches, into a bounded queue),
a fixed pool of workers (one per request the run may have in flight, never one per prompt), one watcher
per endpoint, the segment rotator, a stop supervisor, and any companion loops (console, S3 uploader).

`--turns last` (default) generates one turn per prompt. `--turns all` regenerates every assistant turn
of a conversation in order, on the model's own history (client.run.conversation), one worker per
conversation, so its turns run one after another and stay on one endpoint while it is healthy.

Stop: dispatch ends at once, the requests in flight get a grace period, then they are cancelled; what
is not written is sent again on the next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from client.core.errors import InputError, RegenError, SinkError, TooLong
from client.core.payload import FieldPolicy, SamplingSettings, request_messages
from client.core.records import Prompt, ResultRecord
from client.core.stats import RunStats
from client.fleet.dispatcher import Dispatcher
from client.local.sink import ResultSink
from client.local.source import PromptSource
from client.run.conversation import Conversation, event_id
from client.run.rate import RequestRate
from client.run.result_rows import failure_record, result_record
from client.run.retry import Abandoned, Generation, GenerationFailed, Generator, RetryPolicy
from client.run.turns import TurnLedger
from client.wire.endpoint import Endpoint

__all__ = ["RetryPolicy", "Swarm", "SwarmOutcome"]

Turns = Literal["last", "all"]


@dataclass
class SwarmOutcome:
    interrupted: bool = False
    fatal: RegenError | None = None
    abandoned: int = 0
    conversations_finished: int = 0
    diverged: int = 0


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
        retry: RetryPolicy | None = None,
        grace_s: float = 30.0,
        rotate_check_s: float = 5.0,
        dispatcher: Dispatcher | None = None,
        turns: Turns = "last",
        ledger: TurnLedger | None = None,
        policy: FieldPolicy | None = None,
        rate: RequestRate | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.source = source
        self.sink = sink
        self.stats = stats
        self.settings = settings
        self.model = model
        self.grace_s = grace_s
        self.rotate_check_s = rotate_check_s
        self.dispatcher = dispatcher or Dispatcher(endpoints)
        self.turns = turns
        self.ledger = ledger or TurnLedger()
        self.outcome = SwarmOutcome()
        self.concurrency = sum(e.max_in_flight for e in endpoints)
        self._queue: asyncio.Queue[Prompt | None] = asyncio.Queue(maxsize=max(8, self.concurrency))
        self._stopping = asyncio.Event()
        self._immediate = False
        self._workers: list[asyncio.Task[None]] = []
        self._producer: asyncio.Task[None] | None = None
        self._recorded = settings.recorded(policy)
        self.generator = Generator(dispatcher=self.dispatcher, stats=stats, settings=settings, model=model,
                                   retry=retry or RetryPolicy(), stopping=self._stopping, policy=policy,
                                   rate=rate)

    # -- control ---------------------------------------------------------------------------------------

    def request_stop(self, *, immediate: bool = False) -> None:
        """First call: stop dispatching, give in-flight requests the grace period. `immediate`: cancel now."""
        if not self._stopping.is_set():
            self.outcome.interrupted = self.outcome.fatal is None
            self._stopping.set()
            if self._producer is not None:
                self._producer.cancel()
            self._release_idle_workers()
        if immediate:
            self._immediate = True
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

    async def _supervise_stop(self) -> None:
        await self._stopping.wait()
        await self.dispatcher.close()
        if not self._immediate:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.grace_s):
                    await asyncio.wait(self._workers)
        self._cancel_workers()

    # -- the run ---------------------------------------------------------------------------------------

    async def run(self, companions: list[Callable[[], Coroutine[Any, Any, None]]] | None = None) -> SwarmOutcome:
        await self.dispatcher.prime()
        async with asyncio.TaskGroup() as group:
            side = [group.create_task(self.dispatcher.watch(e)) for e in self.endpoints]
            side.append(group.create_task(self._rotate()))
            side.extend(group.create_task(make()) for make in companions or [])
            self._workers = [group.create_task(self._work()) for _ in range(self.concurrency)]
            side.append(group.create_task(self._supervise_stop()))
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
                if self.turns == "all":
                    await self._conversation(prompt)
                else:
                    await self._single(prompt)
            except Abandoned:
                self.outcome.abandoned += 1
            except SinkError as exc:
                self._fail(exc)
                return

    # -- one prompt ------------------------------------------------------------------------------------

    async def _single(self, prompt: Prompt) -> None:
        messages = request_messages(prompt)
        try:
            generation = await self.generator.generate(prompt, messages)
        except GenerationFailed as failed:
            self._write_failure(prompt.id, failed)
            return
        self._write(result_record(prompt.id, prompt, messages, generation, sampling=self._recorded,
                                  model=self.model), generation)

    async def _conversation(self, prompt: Prompt) -> None:
        conversation = Conversation(prompt.id, prompt.messages, preserve_thinking=self.settings.preserve_thinking)
        if self.ledger.is_finished(prompt.id):
            return
        earlier = self.ledger.latest.get(prompt.id)
        if earlier is not None:
            conversation.restore(earlier)
        prefer: int | None = None
        while not conversation.finished:
            messages = conversation.next_request()
            turn = conversation.turn + 1
            try:
                generation = await self.generator.generate(prompt, messages, prefer=prefer)
            except GenerationFailed as failed:
                # Its earlier turns stay written; the next run continues this conversation at this turn.
                self._write_failure(event_id(prompt.id, turn), failed)
                return
            diverged = conversation.advance(messages, generation.completion)
            record = result_record(event_id(prompt.id, turn, last=conversation.finished), prompt, messages,
                                   generation, sampling=self._recorded, model=self.model,
                                   conversation=(prompt.id, turn), diverged=diverged)
            self._write(record, generation)
            prefer = generation.endpoint.index
            if diverged is not None:
                self.outcome.diverged += 1
        self.outcome.conversations_finished += 1

    def _write(self, record: ResultRecord, generation: Generation) -> None:
        self.sink.write_result(record)
        completion = generation.completion
        self.stats.record_done(generation.endpoint.counters, completion.usage, completion.finish_reason)

    def _write_failure(self, record_id: str, failed: GenerationFailed) -> None:
        endpoint = failed.endpoint.url if failed.endpoint is not None else None
        self.sink.write_failure(failure_record(record_id, failed.error, failed.attempts, endpoint))
        self.stats.failed += 1
        if isinstance(failed.error, TooLong):
            self.stats.too_long += 1
