"""TaskGroup orchestration of one run: read prompts, hand them to workers, write what comes back, stop.

One TaskGroup owns every task: a producer (reads prompts in a thread, in batches, into a bounded,
closable channel), one watcher per endpoint, the segment rotator, any companion loops (console, S3
uploader), and the pool of workers (never one per prompt) in a TaskGroup of its own under the stop's
deadline.

The pool is sized by what the fleet can take: the sum of every endpoint's target depth (its decode slots
plus the balancer's small queue, within --max-in-flight), not by the hard cap. It grows when the
dispatcher learns that an endpoint holds more, so no crowd of workers waits parked for slots that do not
exist. The producer closes the channel at the end of the prompts; a worker ends when the channel is
closed and empty.

`--turns last` (default) generates one turn per prompt. `--turns all` regenerates every assistant turn
of a conversation in order, on the model's own history (client.engine.conversation), one worker per
conversation, so its turns run one after another and stay on one endpoint while it is healthy.

Stop (client.engine.stop_deadline): dispatch ends at once, and the worker pool's scope gets a deadline a
grace period ahead; the requests still in flight then are cancelled by it. What is not written is sent
again on the next run. A part that fails for good (the disk: SinkError; the S3 manifest taken by another
writer: ManifestConflict) raises, which ends the TaskGroup with that error.
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

from client.core.errors import FillsWindow, InputError, RegenError, TooLong
from client.core.payload import request_messages
from client.core.records import Prompt, ResultRecord
from client.core.stats import RunStats
from client.core.window_count import record_miscount
from client.engine.conversation import Conversation, Turns, event_id
from client.engine.partials import PartialKeeper
from client.engine.rate import RequestRate
from client.engine.result_rows import failure_record, result_record
from client.engine.retry import Abandoned, Generation, GenerationFailed, Generator, LocalCount, RetryPolicy
from client.engine.session import Fleet
from client.engine.stop_deadline import StopDeadline
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
    keeper: PartialKeeper | None = None  # --continue-replies: replies in flight kept in OUT/partials


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


def _first_leaf(group: BaseExceptionGroup[RegenError]) -> RegenError:
    """The first error of a (nested) group: the pool's TaskGroup nests in the run's."""
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


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
        self._stop = StopDeadline(self.settings.grace_s)
        self._started = 0
        self._pool: asyncio.TaskGroup | None = None
        self._growing: asyncio.Task[None] | None = None
        self.generator = Generator(dispatcher=self.dispatcher, stats=stats, shape=fleet.shape,
                                   retry=self.settings.retry, rate=self.settings.rate,
                                   stop_loops=self.settings.stop_loops, train_window=self.settings.train_window,
                                   local_count=self.settings.local_count, native=fleet.native,
                                   keeper=self.settings.keeper)

    @property
    def workers(self) -> int:
        """Workers started so far (the pool only grows)."""
        return self._started

    # -- control ---------------------------------------------------------------------------------------

    def request_stop(self, *, immediate: bool = False) -> None:
        """Dispatch ends at once; the requests in flight get the grace period (`immediate`: none, also when
        a stop is already under way). What the channel still holds is left for the next run."""
        if self._stop.stop(immediate=immediate):
            self.dispatcher.close()
            self._send.close()
            self._discard_unsent()

    def _discard_unsent(self) -> None:
        with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
            while True:
                self._receive.receive_nowait()

    # -- the run ---------------------------------------------------------------------------------------

    async def run(self, companions: list[Callable[[], Coroutine[Any, Any, None]]] | None = None) -> SwarmOutcome:
        """Until every prompt is done or the stop's deadline; an error that ends any part of the run (the
        disk, the S3 manifest) ends the TaskGroup and is the outcome's `fatal`."""
        await self.dispatcher.prime()
        try:
            async with asyncio.TaskGroup() as group:
                side = [group.create_task(self.dispatcher.watch(e)) for e in self.fleet.endpoints]
                side.append(group.create_task(self._rotate()))
                side.extend(group.create_task(make()) for make in companions or [])
                side.append(group.create_task(self._produce()))
                keeper = self.settings.keeper
                if keeper is not None:
                    side.append(group.create_task(keeper.keep()))
                try:
                    await self._run_pool()
                finally:
                    if keeper is not None:  # what the stop left in flight, for the next run to continue
                        await keeper.flush()
                for task in side:
                    task.cancel()
        except* RegenError as failed:
            if self.outcome.fatal is None:
                self.outcome.fatal = _first_leaf(failed)
        finally:
            self.dispatcher.close()
            self._receive.close()
        self.outcome.interrupted = self._stop.requested and self.outcome.fatal is None
        return self.outcome

    async def _run_pool(self) -> None:
        """The workers in their own TaskGroup, under the stop's deadline; it ends when the channel is
        closed and empty and every worker has finished its prompt, or when the deadline passes."""
        async with self._stop.scope(), asyncio.TaskGroup() as pool:
            self._pool = pool
            self._growing = pool.create_task(self._grow_with_capacity())
            self._grow()

    def _grow(self) -> None:
        """Start workers up to what the fleet can take now."""
        assert self._pool is not None
        while self._started < self.dispatcher.worker_target():
            self._started += 1
            self._pool.create_task(self._work())

    async def _grow_with_capacity(self) -> None:
        while True:
            await self.dispatcher.capacity_grew()
            self._grow()

    async def _produce(self) -> None:
        prompts = iter(self.source)
        try:
            with self._send:
                while True:
                    batch = await asyncio.to_thread(_take, prompts, _BATCH)
                    if not batch:
                        break
                    for prompt in batch:
                        await self._send.send(prompt)
        except InputError as exc:
            # --strict: a stop, not a crash; the requests already in flight get their grace period.
            self.outcome.fatal = exc
            self.request_stop()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # a stop closed the channel, or every worker has ended: nothing left to hand out

    async def _rotate(self) -> None:
        while True:
            await asyncio.sleep(self.settings.rotate_check_s)
            closed = await asyncio.to_thread(self.sink.rotate)
            self.sink.announce(closed)

    async def _work(self) -> None:
        async for prompt in self._receive:
            try:
                if self.settings.turns == "all":
                    await self._conversation(prompt)
                else:
                    await self._single(prompt)
            except Abandoned:
                pass
        # The channel is closed and empty: no worker will get another prompt, so the pool stops growing.
        if self._growing is not None:
            self._growing.cancel()

    # -- one prompt ------------------------------------------------------------------------------------

    async def _single(self, prompt: Prompt) -> None:
        messages = request_messages(prompt)
        try:
            generation = await self.generator.generate(prompt, messages)
        except GenerationFailed as failed:
            self._write_failure(prompt.id, failed)
            self._ended(prompt.id)
            return
        self._write(result_record(prompt.id, prompt, messages, generation, sampling=self.fleet.shape.recorded(prompt),
                                  model=self.fleet.model), generation)
        self._ended(prompt.id)

    def _ended(self, prompt_id: str) -> None:
        if self.settings.keeper is not None:
            self.settings.keeper.end(prompt_id)

    async def _conversation(self, prompt: Prompt) -> None:
        preserve = self.fleet.shape.preserve_thinking(prompt)
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
                                   generation, sampling=self.fleet.shape.recorded(prompt), model=self.fleet.model,
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
        if completion.continued:
            self.stats.record_continued(sum(part["tokens"] for part in completion.continued[:-1]))

    def _write_failure(self, record_id: str, failed: GenerationFailed) -> None:
        endpoint = failed.endpoint.url if failed.endpoint is not None else None
        self.sink.write_failure(failure_record(record_id, failed.error, failed.attempts, endpoint))
        self.stats.failed += 1
        if isinstance(failed.error, TooLong):
            self.stats.too_long += 1
        if isinstance(failed.error, FillsWindow):
            self.stats.fills_window += 1
