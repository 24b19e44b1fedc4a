"""Who hears Ctrl-C and SIGTERM, phase by phase: the one owner of the run's signal policy.

- Before the event loop runs and after it ends (the lock, starting a simulated fleet): SIGTERM raises
  KeyboardInterrupt like Ctrl-C, so both end as exit 130.
- Start-up checks, `--wait-ready`, the preflight: a signal cancels the main task (exit 130, nothing sent).
- The swarm: the first signal stops dispatch and gives the requests in flight the grace period; the
  second stops them at once.
- The final S3 upload wait: a signal skips the wait (what is left goes up with the next run).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_Handler = Callable[[int, FrameType | None], Any] | int | None


class StopController:
    """A context manager for the process; the phase methods are called inside the event loop."""

    def __init__(self) -> None:
        self._previous_term: _Handler = None
        self._previous_int: _Handler = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> StopController:
        self._previous_term = signal.signal(signal.SIGTERM, signal.default_int_handler)
        # A shell without job control starts a background command with SIGINT ignored; a stop is a stop.
        self._previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        signal.signal(signal.SIGTERM, self._previous_term)
        signal.signal(signal.SIGINT, self._previous_int)

    def _install(self, handler: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        for signum in _STOP_SIGNALS:
            self._loop.add_signal_handler(signum, handler)

    def cancel_on_signal(self) -> None:
        """Start-up: a signal cancels the task that calls this (the caller turns that into exit 130)."""
        task = asyncio.current_task()
        assert task is not None

        def cancel() -> None:
            task.cancel()

        self._install(cancel)

    def graceful(self, stop: Callable[[bool], None], announce: Callable[[], None]) -> None:
        """The swarm: `stop(immediate)`; the first signal is also announced."""
        seen = 0

        def on_signal() -> None:
            nonlocal seen
            seen += 1
            if seen == 1:
                announce()
            stop(seen > 1)

        self._install(on_signal)

    def skip_on_signal(self) -> asyncio.Event:
        """The final wait: a signal sets the returned event."""
        skip = asyncio.Event()
        self._install(skip.set)
        return skip

    def release(self) -> None:
        """Leaving the event loop: back to the process policy (KeyboardInterrupt)."""
        if self._loop is not None:
            for signum in _STOP_SIGNALS:
                self._loop.remove_signal_handler(signum)
            self._loop = None
        signal.signal(signal.SIGTERM, signal.default_int_handler)
