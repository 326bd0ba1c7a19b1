"""``SourceRegistry``: a source's state is created once with its session, and dropped
from memory only when it has no work and no recent activity."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from engine.hub.turns.sources import SourceRegistry, SourceState
from engine.hub.types import SendOptions
from tests.engine.hub.conftest import ManualSleep


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeSessions:
    def __init__(self) -> None:
        self.created: list[str] = []

    async def for_source(self, source: str, *, agent_id: str = "main") -> SimpleNamespace:
        await asyncio.sleep(0)  # a database round trip: another caller may come in
        self.created.append(source)
        return SimpleNamespace(id=len(self.created))


def registry(clock: FakeClock) -> tuple[SourceRegistry, FakeSessions]:
    sessions = FakeSessions()
    engine = SimpleNamespace(store=SimpleNamespace(sessions=sessions))
    return SourceRegistry(engine, clock), sessions  # type: ignore[arg-type]


async def test_two_first_messages_at_once_make_one_state_and_one_session() -> None:
    sources, sessions = registry(FakeClock())

    first, second = await asyncio.gather(sources.state("telegram:1"), sources.state("telegram:1"))

    assert first is second and sources.get("telegram:1") is first
    assert sessions.created == ["telegram:1"]
    assert len(sources) == 1


async def test_only_sources_without_work_and_idle_long_enough_are_evicted() -> None:
    clock = FakeClock()
    sources, _ = registry(clock)
    quiet = await sources.state("telegram:1")
    queued = await sources.state("telegram:2")
    queued.inbox.push("pending", SendOptions(), 1)
    clock.now += 30
    recent = await sources.state("telegram:3")

    assert sources.evict_idle(60) == 0  # nobody is idle for 60 s yet
    clock.now += 30

    assert sources.evict_idle(60) == 1
    assert sources.get(quiet.name) is None
    assert sources.get(queued.name) is queued  # its message is still to run
    assert sources.get(recent.name) is recent  # active 30 s ago


async def test_a_source_with_a_running_turn_is_busy_and_kept() -> None:
    clock = FakeClock()
    sources, _ = registry(clock)
    state = await sources.state("telegram:1")
    release = asyncio.Event()
    state.turn = asyncio.create_task(release.wait())

    assert state.is_processing and not state.is_idle
    assert sources.evict_idle(60, now=clock.now + 1000) == 0
    assert list(sources.tasks()) == [state.turn]

    release.set()
    await state.turn
    assert not state.is_processing


def test_a_source_is_idle_only_with_nothing_to_run_or_resume() -> None:
    state = SourceState("console", 1)
    assert state.is_idle

    state.resume_first = True
    assert not state.is_idle
    state.resume_first = False
    state.inbox.push("hi", SendOptions(), None)
    assert not state.is_idle


async def test_the_sweeper_evicts_every_quarter_of_the_idle_time() -> None:
    clock = FakeClock()
    sources, _ = registry(clock)
    sleep = ManualSleep()
    await sources.state("telegram:1")
    sweeper = asyncio.create_task(sources.sweep(60, sleep))
    try:
        clock.now += 60
        await sleep.release(15)
        await sleep.release(15)  # the second sleep starts once the first sweep ran
        assert len(sources) == 0
    finally:
        sweeper.cancel()
