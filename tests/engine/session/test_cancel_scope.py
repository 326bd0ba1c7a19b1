"""A turn's cancel scope: ``/stop`` drops the work in flight and the turn goes on to record
it; any other cancellation stays one; nothing of it leaks past the scope."""

from __future__ import annotations

import asyncio

import pytest

from engine.session.turn.cancel import CancelScope, TurnCancelled


async def in_flight(scope: CancelScope) -> asyncio.Task[None]:
    """A task inside ``scope.run`` with work that waits until it is dropped."""
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(scope.run(work()))
    await started.wait()
    return task


async def test_a_stop_drops_the_work_in_flight_and_the_turn_carries_on() -> None:
    scope = CancelScope()
    started = asyncio.Event()
    cleaned_up = False

    async def model_call() -> str:
        nonlocal cleaned_up
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned_up = True
        return "never"

    async def turn() -> str:
        try:
            await scope.run(model_call())
        except TurnCancelled:
            await asyncio.sleep(0)  # the turn's task is not cancelled: it can still await
            return "recorded"
        return "answered"

    task = asyncio.create_task(turn())
    await started.wait()
    scope.cancel()
    assert await task == "recorded"
    assert cleaned_up
    assert task.cancelling() == 0


async def test_the_work_runs_in_the_callers_task() -> None:
    scope = CancelScope()
    caller = asyncio.current_task()

    async def which() -> asyncio.Task[object] | None:
        return asyncio.current_task()

    assert await scope.run(which()) is caller


async def test_a_cancelled_scope_runs_nothing_more() -> None:
    scope = CancelScope()
    scope.cancel()
    ran = False

    async def work() -> None:
        nonlocal ran
        ran = True

    with pytest.raises(TurnCancelled):
        await scope.run(work())
    assert not ran
    with pytest.raises(TurnCancelled):
        scope.check()


async def test_a_cancellation_from_outside_the_scope_stays_a_cancellation() -> None:
    task = await in_flight(CancelScope())
    task.cancel()  # the service stopping, not /stop
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_stop_and_a_shutdown_at_once_end_as_the_shutdown() -> None:
    scope = CancelScope()
    task = await in_flight(scope)
    scope.cancel()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_stop_from_inside_the_work_strikes_at_the_next_check_not_later() -> None:
    scope = CancelScope()

    async def stops_itself() -> str:
        scope.cancel()
        return "done"

    async def turn() -> str:
        result = await scope.run(stops_itself())
        await asyncio.sleep(0)  # outside the scope: no cancellation may land here
        return result

    assert await asyncio.create_task(turn()) == "done"
    with pytest.raises(TurnCancelled):
        scope.check()


async def test_work_that_swallows_the_stop_leaves_its_task_uncancelled() -> None:
    scope = CancelScope()
    started = asyncio.Event()

    async def stubborn() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "swallowed"
        return "never"

    async def turn() -> tuple[str, int]:
        result = await scope.run(stubborn())
        current = asyncio.current_task()
        assert current is not None
        await asyncio.sleep(0)
        return result, current.cancelling()

    task = asyncio.create_task(turn())
    await started.wait()
    scope.cancel()
    assert await task == ("swallowed", 0)


async def test_a_stop_reaches_every_sub_agent_in_flight_once() -> None:
    scope = CancelScope()
    started = [asyncio.Event() for _ in range(3)]

    async def sub_agent(index: int) -> str:
        async def round_() -> None:
            started[index].set()
            await asyncio.Event().wait()

        try:
            await scope.run(scope.run(round_()))  # a gate inside a tool: runs nest
        except TurnCancelled:
            return "stopped"
        return "answered"

    tasks = [asyncio.create_task(sub_agent(i)) for i in range(3)]
    for event in started:
        await event.wait()
    scope.cancel()
    scope.cancel()  # a second /stop changes nothing
    assert await asyncio.gather(*tasks) == ["stopped"] * 3
    assert all(t.cancelling() == 0 for t in tasks)
