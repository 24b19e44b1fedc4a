"""The dispatcher's waiting workers: a freed slot wakes one waiter (oldest first), room that
appears at once (an endpoint coming up) reaches as many waiters as it has slots, a cancelled waiter never
swallows a wakeup, and close() releases everyone. Endpoints here are never connected: this is the slot
bookkeeping alone, driven step by step on one event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from client.fleet.dispatcher import DOWN, UP, DispatchClosed, Dispatcher, DispatchSettings
from client.wire.endpoint import Endpoint

SLOTS = 4


@pytest.fixture
async def endpoints() -> AsyncIterator[list[Endpoint]]:
    made = [Endpoint(f"http://127.0.0.1:{9 + i}", index=i, max_in_flight=SLOTS) for i in range(2)]
    yield made
    await asyncio.gather(*(e.aclose() for e in made))


def dispatcher_for(endpoints: list[Endpoint]) -> Dispatcher:
    # Target depth = slots; the hard cap (max_in_flight) is the same, so exactly SLOTS per endpoint.
    dispatcher = Dispatcher(endpoints, DispatchSettings(default_capacity=SLOTS, headroom=0.0))
    for endpoint in endpoints:
        dispatcher.starting(endpoint, ready=True)
    return dispatcher


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_release_wakes_the_oldest_waiter_and_only_one(endpoints: list[Endpoint]) -> None:
    dispatcher = dispatcher_for(endpoints)
    held = [await dispatcher.acquire() for _ in range(2 * SLOTS)]
    order: list[int] = []

    async def waiter(n: int) -> None:
        await dispatcher.acquire()
        order.append(n)

    tasks = [asyncio.create_task(waiter(n)) for n in range(5)]
    await settle()
    assert order == [] and len(dispatcher._waiters) == 5
    dispatcher.release(held.pop())
    await settle()
    assert order == [0], "one freed slot, one waiter served: the oldest"
    assert len(dispatcher._waiters) == 4, "the others were not woken"
    for _ in range(4):
        dispatcher.release(held.pop())
    await settle()
    assert order == [0, 1, 2, 3, 4]
    await asyncio.gather(*tasks)


async def test_room_that_appears_at_once_reaches_as_many_waiters(endpoints: list[Endpoint]) -> None:
    dispatcher = dispatcher_for(endpoints)
    dispatcher.set_state(endpoints[1], DOWN)
    held = [await dispatcher.acquire() for _ in range(SLOTS)]
    served: list[int] = []

    async def waiter(n: int) -> None:
        await dispatcher.acquire()
        served.append(n)

    tasks = [asyncio.create_task(waiter(n)) for n in range(SLOTS + 2)]
    await settle()
    assert served == []
    dispatcher.set_state(endpoints[1], UP)  # SLOTS free slots appear at once
    await settle()
    assert sorted(served) == list(range(SLOTS)), "every free slot is taken, no more"
    assert len(dispatcher._waiters) == 2
    for endpoint in held[:2]:
        dispatcher.release(endpoint)
    await asyncio.gather(*tasks)


async def test_a_cancelled_waiter_passes_its_wakeup_on(endpoints: list[Endpoint]) -> None:
    dispatcher = dispatcher_for(endpoints)
    held = [await dispatcher.acquire() for _ in range(2 * SLOTS)]
    first = asyncio.create_task(dispatcher.acquire())
    second = asyncio.create_task(dispatcher.acquire())
    await settle()
    dispatcher.release(held.pop())  # wakes `first`...
    first.cancel()                         # ...which is cancelled before it runs
    await settle()
    assert first.cancelled()
    assert second.done(), "the wakeup went on to the next waiter"
    assert not dispatcher._waiters and dispatcher._woken == 0


async def test_close_releases_every_waiter(endpoints: list[Endpoint]) -> None:
    dispatcher = dispatcher_for(endpoints)
    for _ in range(2 * SLOTS):
        await dispatcher.acquire()
    tasks = [asyncio.create_task(dispatcher.acquire()) for _ in range(3)]
    await settle()
    dispatcher.close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, DispatchClosed) for r in results)
    with pytest.raises(DispatchClosed):
        await dispatcher.acquire()
