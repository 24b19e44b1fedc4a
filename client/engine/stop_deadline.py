"""The stop of a run as one fact: a deadline on the worker pool's scope.

No loop polls a flag. A stop ends dispatch at once (client.engine.swarm closes the channel and the
dispatcher) and sets this deadline `grace_s` ahead; a second stop, or an immediate one, moves it to now.
The workers still in flight when it passes are cancelled by the scope, as the dispatcher's
`scope(endpoint)` cancels a request whose endpoint leaves the rotation. A stop asked before the pool's
scope opens (a signal during the first load poll) is kept and applied when it opens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class StopDeadline:
    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._at: float | None = None  # loop time the pool's scope ends; None until a stop
        self._scope: asyncio.Timeout | None = None

    @property
    def requested(self) -> bool:
        return self._at is not None

    def stop(self, *, immediate: bool = False) -> bool:
        """Set (or bring forward) the deadline; True for the first stop of the run."""
        now = asyncio.get_running_loop().time()
        at = now if immediate else now + self.grace_s
        first = self._at is None
        self._at = at if self._at is None else min(self._at, at)
        if self._scope is not None:
            self._scope.reschedule(self._at)
        return first

    @contextlib.asynccontextmanager
    async def scope(self) -> AsyncIterator[None]:
        """The worker pool's scope: its body ends (without error) when the deadline passes."""
        try:
            async with asyncio.timeout(self._at) as scope:
                self._scope = scope
                try:
                    yield
                finally:
                    self._scope = None
        except TimeoutError:
            if not scope.expired():
                raise  # a request's own timeout, not the stop
