"""The template check at the job's scale: every sample handed back in the order it came, with its verdict,
checked in this process or, on more than one core, in worker processes a chunk at a time.

The check is CPU work on one row at a time (a render and a tokenization, `client.export.fidelity`), so
threads would share one core; worker processes use the others. The pass over the results stays in this
process (reading, the counts, the writer); the workers get chunks of samples and send back verdicts only.
At most `2 x jobs` chunks are out at once (the memory held stays bounded whatever the run's size), and
results are taken oldest first, so the rows, the report and its examples are the same as in one process.
The pool starts with the first full chunk: an export of fewer rows never starts a process.
"""

from __future__ import annotations

import os
import signal
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

from client.export import fidelity
from client.export.render import ChatTokenizer
from client.export.rows import Sample

CHUNK = 32  # samples a worker checks at a time: small enough that Ctrl-C and the last chunk do not wait long


@dataclass(frozen=True, slots=True)
class CheckSettings:
    """What the trainer is run with, as the check assumes it."""

    last_turn: fidelity.LastTurn = "off"  # SpecForge's data.train_only_last_turn: off, on, or auto (the rows say)
    max_length: int | None = None


# A sample's check: its verdict, or why its record cannot be checked (a record this tool did not write as
# it writes them; the pass counts it malformed, as it counts one it cannot read).
Checked = fidelity.Verdict | str
Done = Callable[[Sample, Checked | None], None]  # a sample and its check (None: not checked)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_one(sample: Sample, tok: ChatTokenizer, settings: CheckSettings) -> Checked:
    try:
        return fidelity.check(sample, tok, last_turn=settings.last_turn,
                              max_length=settings.max_length)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        return f"cannot be read as a result record: {type(exc).__name__}: {exc}"


class OrderedChecks:
    """Samples in, (sample, verdict) out through `done`, in the order they came in."""

    def __init__(self, tok: ChatTokenizer, settings: CheckSettings, done: Done, *, jobs: int = 1,
                 chunk: int = CHUNK) -> None:
        self.tok = tok
        self.settings = settings
        self.done = done
        self.jobs = max(1, jobs)
        self.chunk = max(1, chunk)
        self.pending: list[tuple[Sample, bool]] = []
        self.out: deque[tuple[list[tuple[Sample, bool]], Future[list[Checked]]]] = deque()
        self.pool: ProcessPoolExecutor | None = None

    def add(self, sample: Sample, *, checked: bool) -> None:
        """Hand a sample on; `checked` False passes it through unchecked, in its place."""
        if self.jobs == 1:
            self.done(sample, check_one(sample, self.tok, self.settings) if checked else None)
            return
        self.pending.append((sample, checked))
        if len(self.pending) >= self.chunk:
            self._send()
        while len(self.out) > 2 * self.jobs:
            self._take()

    def finish(self) -> None:
        """Every sample handed on; then the pool is stopped."""
        if self.pending:
            if self.pool is None:  # fewer rows than a chunk: not worth a process
                for sample, checked in self.pending:
                    self.done(sample, check_one(sample, self.tok, self.settings) if checked else None)
                self.pending = []
            else:
                self._send()
        while self.out:
            self._take()
        self.close()

    def close(self) -> None:
        """Stop the workers; what is still out is dropped (an export that failed or was stopped)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def _send(self) -> None:
        items, self.pending = self.pending, []
        samples = [sample for sample, checked in items if checked]
        if self.pool is None:
            self.pool = ProcessPoolExecutor(self.jobs, mp_context=get_context("spawn"), initializer=_start,
                                            initargs=(self.tok, self.settings))
        self.out.append((items, self.pool.submit(_check_chunk, samples)))

    def _take(self) -> None:
        items, future = self.out.popleft()
        verdicts = iter(future.result())
        for sample, checked in items:
            self.done(sample, next(verdicts) if checked else None)


_worker: tuple[ChatTokenizer, CheckSettings] | None = None


def _start(tok: ChatTokenizer, settings: CheckSettings) -> None:
    global _worker
    # Ctrl-C reaches every process of the terminal's group: the export stops the workers itself, so they
    # do not each print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker = (tok, settings)


def _check_chunk(samples: list[Sample]) -> list[Checked]:
    assert _worker is not None, "a worker is started with the tokenizer"
    tok, settings = _worker
    return [check_one(sample, tok, settings) for sample in samples]
