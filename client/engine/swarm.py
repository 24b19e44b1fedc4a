"""TaskGroup orchestration of one run: read prompts, hand them to workers, write what comes back, stop.

One TaskGroup owns every task: a producer (reads prompts in a thread, in batches, into a bounded,
closable channel), a pool of workers (never one per prompt), one watcher per endpoint, the segment
rotator, a stop supervisor, and any companion loops (console, S3 uploader).

The pool is sized by what the fleet can take: the sum of every endpoint's target depth (its decode slots
plus the balancer's small queue, within --max-in-flight), not by the hard cap. It grows when the
dispatcher learns that an endpoint holds more, so no crowd of workers waits parked for slots that do not
exist. The producer closes the channel at the end of the prompts; a worker ends when the channel is
closed and empty.

`--turns last` (default) generates one turn per prompt. `--turns all` regenerates every assistant turn
of a conversation in order, on the model's own history (client.engine.conversation), one worker per
conversation, so its turns run one after another and stay on one endpoint while it is healthy.

Stop: dispatch ends at once, the requests in flight get a grace period, then they are cancelled; what
is not written is sent again on the next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from client.core.errors import FillsWindow, InputError, RegenError, SinkError, TooLong
from client.core.payload import request_messages
from client.core.records import Prompt, ResultRecord
from client.core.stats import RunStats
from client.core.window_count import record_miscount
from client.engine.conversation import Conversation, Turns, event_id
from client.engine.rate import RequestRate
from client.engine.result_rows import failure_record, result_record
from client.engine.retry import Abandoned, Generation, GenerationFailed, Generator, LocalCount, RetryPolicy
from client.engine.session import Fleet
from client.engine.turns import TurnLedger
from client.local.sink import ResultSink
from client.local.source import PromptSource

__all__ = ["RetryPolicy", "Swarm", "SwarmOutcome", "SwarmSettings"]

_BATCH = 256  # prompts read per trip to the reading thread


@dataclass(frozen=True, slots=True)
class SwarmSettings:
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    grace_s: float = 30.0
    rotate_check_s: float = 5.0
    turns: Turns = "last"
    rate: RequestRate | None = None  # --max-requests-per-second
    stop_loops: bool = False  # --loop-stop
    train_window: int | None = None  # --train-window
    local_count: LocalCount | None = None  # --tokenizer


@dataclass
class SwarmOutcome:
    interrupted: bool = False
    fatal: RegenError | None = None
    conversations_finished: int = 0
    diverged: int = 0
    cut_short: int = 0  # conversations ended at a turn that did not end by itself
    window_miscounts: int = 0  # --train-window: records whose prompt count disagrees with their usage
    window_miscount_example: str | None = None


def _take(iterator: Iterator[Prompt], count: int) -> list[Prompt]:
    return list(itertools.islice(iterator, count))


class Swarm:
    def __init__(self, fleet: Fleet, source: PromptSource, sink: ResultSink, stats: RunStats,
                 settings: SwarmSettings | None = None, *, ledger: TurnLedger | None = None) -> None:
        self.fleet = fleet
        self.dispatcher = fleet.dispatcher
        self.source = source
        self.sink = sink
        self.stats = stats
        self.settings = settings or SwarmSettings()
        self.ledger = ledger or TurnLedger()
        self.outcome = SwarmOutcome()
        self._send: MemoryObjectSendStream[Prompt]
        self._receive: MemoryObjectReceiveStream[Prompt]
        self._send, self._receive = anyio.create_memory_object_stream[Prompt](max(8, self.dispatcher.worker_target()))
        self._stopping = asyncio.Event()
        self._immediate = False
        self._started = 0
        self._workers: set[asyncio.Task[None]] = set()
        self._workers_done = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None
        self._producer: asyncio.Task[None] | None = None
        self.generator = Generator(dispatcher=self.dispatcher, stats=stats, shape=fleet.shape,
                                   retry=self.settings.retry, stopping=self._stopping, rate=self.settings.rate,
                                   stop_loops=self.settings.stop_loops, train_window=self.settings.train_window,
                                   local_count=self.settings.local_count)

    @property
    def workers(self) -> int:
        """Workers started so far (the pool only grows)."""
        return self._started

    # -- control ---------------------------------------------------------------------------------------

    def request_stop(self, *, immediate: bool = False) -> None:
        """First call: stop dispatching, give in-flight requests the grace period. `immediate`: cancel now."""
        if not self._stopping.is_set():
            self.outcome.interrupted = self.outcome.fatal is None
            self._stopping.set()
            if self._producer is not None:
                self._producer.cancel()
            self._send.close()
        if immediate:
            self._immediate = True
            self._cancel_workers()

    def _cancel_workers(self) -> None:
        for task in self._workers:
            task.cancel()

    def _fail(self, error: RegenError, *, immediate: bool = True) -> None:
        if self.outcome.fatal is None:
            self.outcome.fatal = error
        self.request_stop(immediate=immediate)

    async def _supervise_stop(self) -> None:
        await self._stopping.wait()
        self.dispatcher.close()
        if not self._immediate:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.grace_s):
                    await self._workers_done.wait()
        self._cancel_workers()

    # -- the run ---------------------------------------------------------------------------------------

    async def run(self, companions: list[Callable[[], Coroutine[Any, Any, None]]] | None = None) -> SwarmOutcome:
        await self.dispatcher.prime()
        async with asyncio.TaskGroup() as group:
            self._group = group
            side = [group.create_task(self.dispatcher.watch(e)) for e in self.fleet.endpoints]
            side.append(group.create_task(self._rotate()))
            side.extend(group.create_task(make()) for make in companions or [])
            self._grow()
            side.append(group.create_task(self._grow_with_capacity()))
            side.append(group.create_task(self._supervise_stop()))
            self._producer = group.create_task(self._produce())
            await self._workers_done.wait()
            self._producer.cancel()
            self.dispatcher.close()
            for task in side:
                task.cancel()
        self._receive.close()
        return self.outcome

    def _grow(self) -> None:
        """Start workers up to what the fleet can take now."""
        assert self._group is not None
        while self._started < self.dispatcher.worker_target() and not self._workers_done.is_set():
            self._started += 1
            task = self._group.create_task(self._work())
            self._workers.add(task)
            task.add_done_callback(self._worker_ended)

    def _worker_ended(self, task: asyncio.Task[None]) -> None:
        self._workers.discard(task)
        if not self._workers:
            self._workers_done.set()

    async def _grow_with_capacity(self) -> None:
        while True:
            await self.dispatcher.capacity_grew()
            self._grow()

    async def _produce(self) -> None:
        prompts = iter(self.source)
        try:
            with self._send:
                while not self._stopping.is_set():
                    batch = await asyncio.to_thread(_take, prompts, _BATCH)
                    if not batch:
                        break
                    for prompt in batch:
                        await self._send.send(prompt)
        except InputError as exc:
            # --strict: the requests already in flight still get their grace period and are kept.
            self._fail(exc, immediate=False)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # a stop closed the channel, or every worker has ended: nothing left to hand out

    async def _rotate(self) -> None:
        while True:
            await asyncio.sleep(self.settings.rotate_check_s)
            try:
                closed = await asyncio.to_thread(self.sink.rotate)
            except SinkError as exc:
                self._fail(exc)
                return
            self.sink.announce(closed)

    async def _work(self) -> None:
        async for prompt in self._receive:
            if self._stopping.is_set():
                continue  # what is left in the channel is for the next run
            try:
                if self.settings.turns == "all":
                    await self._conversation(prompt)
                else:
                    await self._single(prompt)
            except Abandoned:
                pass
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
        self._write(result_record(prompt.id, prompt, messages, generation, sampling=self.fleet.shape.sampling,
                                  model=self.fleet.model), generation)

    async def _conversation(self, prompt: Prompt) -> None:
        preserve = self.fleet.shape.settings.preserve_thinking
        conversation = Conversation(prompt.id, prompt.messages, preserve_thinking=preserve)
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
            ended = conversation.advance(messages, generation.completion)
            cut_short = ended is not None and conversation.cut_short
            record = result_record(event_id(prompt.id, turn, last=conversation.finished), prompt, messages,
                                   generation, sampling=self.fleet.shape.sampling, model=self.fleet.model,
                                   conversation=(prompt.id, turn), diverged=None if cut_short else ended,
                                   ended_early=ended if cut_short else None)
            self._write(record, generation)
            prefer = generation.endpoint.index
            if cut_short:
                self.outcome.cut_short += 1
            elif ended is not None:
                self.outcome.diverged += 1
        self.outcome.conversations_finished += 1

    def _write(self, record: ResultRecord, generation: Generation) -> None:
        self.sink.write_result(record)
        miscount = record_miscount(cast("dict[str, Any]", record)) if generation.window is not None else None
        if miscount is not None:
            self.outcome.window_miscounts += 1
            if self.outcome.window_miscount_example is None:
                self.outcome.window_miscount_example = (
                    f"{record['id']!r}: counted {miscount[0]:,} prompt tokens before the request, the reply's usage "
                    f"says {miscount[1]:,} (on {generation.endpoint.url})")
        completion = generation.completion
        self.stats.record_done(generation.endpoint.index, completion.usage, completion.finish_reason)

    def _write_failure(self, record_id: str, failed: GenerationFailed) -> None:
        endpoint = failed.endpoint.url if failed.endpoint is not None else None
        self.sink.write_failure(failure_record(record_id, failed.error, failed.attempts, endpoint))
        self.stats.failed += 1
        if isinstance(failed.error, TooLong):
            self.stats.too_long += 1
        if isinstance(failed.error, FillsWindow):
            self.stats.fills_window += 1
