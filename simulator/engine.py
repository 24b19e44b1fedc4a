"""The capacity model: DP ranks that decode a bounded batch at a time, like a GPU scheduler.

Each rank owns one asyncio task. A step admits waiting requests (FIFO) while the batch has room, sleeps
for the step's cost, and advances every running request by one decode step (1..K tokens with MTP).
A request's handler awaits its own future, which the engine resolves after each step; there is no timer
per request, so a rank carries thousands of open streams. Releasing a request (finished or its client
gone) frees its slot at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from dataclasses import dataclass, field

from simulator.config import SimConfig

_MAX_LAG = 0.05  # seconds the decode schedule may run behind before it is reset
# When the host starves the simulator, a slot freed by a finished request waits for the client's next one
# this long at most (wall seconds) before the next step: see Rank._await_refill. A starved client on a busy
# two-core machine can take a few hundred ms to answer; a run that drains pays it once.
_REFILL_WAIT_S = 0.5
_BEHIND_S = 0.002  # at least this late (or one step alone) counts as behind: a timer's own overshoot does not


def step_ms(config: SimConfig, batch: int) -> float:
    """A decode step's modelled time at `batch` running requests, ms at speed 1."""
    return config.step_ms * (1 + config.batch_cost * batch / config.max_running) + config.request_ms * batch


def tokens_per_step(config: SimConfig) -> float:
    """Mean tokens a running request gains per step."""
    if config.accept_length > 1:
        return config.accept_length
    k = config.tokens_per_chunk
    return (1 + k) / 2 if config.random_chunk else float(k)


def decode_tok_s(config: SimConfig, batch: int) -> float:
    """Output tokens a second of one rank decoding `batch` requests, on the modelled clock."""
    return batch * tokens_per_step(config) / (step_ms(config, batch) / 1000) if step_ms(config, batch) > 0 else 0.0


class EngineRequest:
    """One generation in a rank: how many tokens it will produce and how many it has produced."""

    __slots__ = ("_waiter", "finished", "produced", "prompt_tokens", "rank", "target")

    def __init__(self, target: int, prompt_tokens: int) -> None:
        self.target = target
        self.prompt_tokens = prompt_tokens
        self.produced = 0
        self.finished = False
        self.rank = -1
        self._waiter: asyncio.Future[None] | None = None

    async def wait_beyond(self, seen: int) -> int:
        """Wait until more than `seen` tokens exist (or the request is finished); return the count."""
        while self.produced <= seen and not self.finished:
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            await waiter
        return self.produced

    async def wait_finished(self) -> int:
        while not self.finished:
            await self.wait_beyond(self.produced)
        return self.produced

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)


@dataclass
class RankStats:
    """Counters a rank keeps for /v1/loads and /metrics."""

    generation_tokens: int = 0
    prompt_tokens: int = 0
    finished_requests: int = 0
    gen_throughput: float = 0.0
    window_start: float = 0.0
    window_tokens: int = 0
    prefill_busy_us: int = 0
    # The modelled clock: seconds the modelled GPU spent on this rank's steps (at speed 1, whatever the host
    # did meanwhile); it stands still while the rank is idle. GET /sim/clock reports it.
    busy_s: float = 0.0
    # SGLang's decode moment sums: steps, batch, step_us, batch^2, batch*step_us, generated tokens.
    decode_moments: list[float] = field(default_factory=lambda: [0.0] * 6)


class Rank:
    """One DP rank: a running batch of at most `max_running`, a FIFO queue, and its decode loop."""

    def __init__(self, index: int, config: SimConfig, rng: random.Random) -> None:
        self.index = index
        self.config = config
        self.running: dict[EngineRequest, None] = {}
        self.waiting: dict[EngineRequest, None] = {}
        self.stats = RankStats(window_start=time.monotonic())
        self._rng = rng
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._owed = 0  # slots freed by finished requests that no new request has taken yet
        self._patient = True  # False after a wait that nothing ended, until the client sends again

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"sim-rank-{self.index}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def submit(self, req: EngineRequest) -> None:
        req.rank = self.index
        self.waiting[req] = None
        self._owed = max(0, self._owed - 1)
        self._patient = True
        self._wakeup.set()

    def release(self, req: EngineRequest) -> None:
        self.running.pop(req, None)
        self.waiting.pop(req, None)

    @property
    def used_tokens(self) -> int:
        return sum(r.prompt_tokens + r.produced for r in self.running)

    @property
    def pending_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.waiting)

    def _admit(self) -> int:
        """Move waiting requests into the batch; return the prompt tokens prefilled in this step."""
        cfg = self.config
        prefill = 0
        used = self.used_tokens
        while self.waiting and len(self.running) < cfg.max_running:
            req = next(iter(self.waiting))
            if self.running and used + req.prompt_tokens > cfg.max_total_tokens:
                break  # KV cache full: the head of the queue waits, as in SGLang's scheduler
            del self.waiting[req]
            self.running[req] = None
            used += req.prompt_tokens
            prefill += req.prompt_tokens
        return prefill

    def _step_seconds(self, prefill_tokens: int) -> tuple[float, float]:
        """(decode, prefill) seconds of the next step."""
        cfg = self.config
        batch = len(self.running)
        decode_ms = step_ms(cfg, batch)
        prefill_ms = cfg.prefill_ms_per_1k * prefill_tokens / 1000
        return decode_ms / 1000 / cfg.speed, prefill_ms / 1000 / cfg.speed

    def _tokens_this_step(self) -> int:
        accept = self.config.accept_length
        if accept > 1:
            whole = int(accept)
            return whole + (self._rng.random() < accept - whole)
        k = self.config.tokens_per_chunk
        return self._rng.randint(1, k) if self.config.random_chunk and k > 1 else k

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            if not self.running and not self.waiting:
                self._wakeup.clear()
                await self._wakeup.wait()
                next_at = loop.time()
                continue
            behind = loop.time() - next_at > max(_BEHIND_S, self.config.step_ms / 1000 / self.config.speed)
            if self._owed and self._patient and behind:
                await self._await_refill(loop)
            prefill = self._admit()
            self.stats.prompt_tokens += prefill
            decode_s, prefill_s = self._step_seconds(prefill)
            self.stats.prefill_busy_us += int(prefill_s * 1e6)
            self.stats.busy_s += (decode_s + prefill_s) * self.config.speed
            # Steps follow a schedule rather than sleeping their cost each time: the event loop cannot
            # sleep less than ~1 ms, so at high --speed short steps run back to back to keep the rate.
            next_at += decode_s + prefill_s
            delay = next_at - loop.time()
            if delay < -_MAX_LAG:
                next_at, delay = loop.time(), 0.0  # far behind (CPU starved): do not burst to catch up
            await asyncio.sleep(max(0.0, delay))
            self._decode_step(decode_s)

    async def _await_refill(self, loop: asyncio.AbstractEventLoop) -> None:
        """Behind schedule with slots that finished requests freed: wait (at most _REFILL_WAIT_S) for the
        client's next requests before the next step. A starved host delays the client's turnaround by many
        steps, which a GPU's client does not take (it answers within a step), so stepping on would decode
        thin batches the modelled GPU would not: its busy time would then move with the host's load. The
        wait is idle, which the modelled clock (busy_s) does not count; a host that keeps up never waits. A wait
        that nothing ends means the run is draining: no more waits until the client sends again."""
        deadline = loop.time() + _REFILL_WAIT_S
        while self._owed and len(self.running) + len(self.waiting) < self.config.max_running:
            left = deadline - loop.time()
            if left <= 0:
                break
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), left)
        if loop.time() >= deadline:
            self._owed, self._patient = 0, False  # nothing came: the run is draining

    def _decode_step(self, seconds: float) -> None:
        batch = len(self.running)
        made = 0
        done: list[EngineRequest] = []
        for req in self.running:
            k = min(self._tokens_this_step(), req.target - req.produced)
            req.produced += k
            made += k
            if req.produced >= req.target:
                req.finished = True
                done.append(req)
            req._wake()
        for req in done:
            del self.running[req]
        self._owed += len(done)
        st = self.stats
        step_us = seconds * 1e6
        for i, value in enumerate((1, batch, step_us, batch * batch, batch * step_us, made)):
            st.decode_moments[i] += value
        st.generation_tokens += made
        st.finished_requests += len(done)
        st.window_tokens += made
        now = time.monotonic()
        if now - st.window_start >= 1.0:
            st.gen_throughput = st.window_tokens / (now - st.window_start)
            st.window_start, st.window_tokens = now, 0


class Engine:
    """All DP ranks of one server; new requests go round-robin, as SGLang's DP controller does."""

    def __init__(self, config: SimConfig) -> None:
        rng = random.Random(config.seed ^ 0xC0FFEE)
        self.config = config
        self.ranks = [Rank(i, config, random.Random(rng.getrandbits(64))) for i in range(config.dp_size)]
        self._next_rank = itertools.cycle(range(config.dp_size))

    def start(self) -> None:
        for rank in self.ranks:
            rank.start()

    async def stop(self) -> None:
        for rank in self.ranks:
            await rank.stop()

    def submit(self, target: int, prompt_tokens: int) -> EngineRequest:
        req = EngineRequest(max(1, target), prompt_tokens)
        self.ranks[next(self._next_rank)].submit(req)
        return req

    def release(self, req: EngineRequest) -> None:
        if 0 <= req.rank < len(self.ranks):
            self.ranks[req.rank].release(req)
