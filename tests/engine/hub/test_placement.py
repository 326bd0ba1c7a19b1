"""The placement role's contract, run against both implementations: ``LocalPlacement``
(one process) and ``FleetWork`` (a fleet member, on SQLite and on PostgreSQL). Whatever
the role, a message accepted is queued durably and reaches its source's consumer here,
``/stop`` drops what waits, work from outside the queue runs while the source is held
here, and what no process runs is left alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.config import AppConfig, EngineConfig, load_settings
from engine.core import Engine
from engine.hub.fleet.ownership import FleetConfig, SourceOwnership
from engine.hub.fleet.work import FleetWork
from engine.hub.placement import LocalPlacement, Placement
from engine.hub.turns.inbox import Unit
from engine.hub.turns.sources import SourceRegistry, SourceState
from engine.hub.types import SendOptions
from engine.llm.registry import ModelRegistry
from engine.store.leases import Leases
from tests.engine.hub.conftest import EchoModel
from tests.pg import BACKENDS, database_url

SOURCE = "telegram:5"
ROLES = [
    pytest.param(("local", "sqlite"), id="local"),
    *(
        pytest.param(("fleet", backend.values[0]), id=f"fleet-{backend.id}", marks=backend.marks)
        for backend in BACKENDS
    ),
]


class Consumers:
    """The hub's ``Start``: the sources whose consumer would start, in order."""

    def __init__(self) -> None:
        self.started: list[SourceState] = []

    def __call__(self, state: SourceState) -> None:
        self.started.append(state)


class Rig:
    def __init__(self, engine: Engine, sources: SourceRegistry, placement: Placement) -> None:
        self.engine, self.sources, self.placement = engine, sources, placement
        self.consumers = Consumers()


@pytest.fixture(params=ROLES)
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    role, backend = request.param
    async with database_url(backend, tmp_path, migrated=True) as url:
        settings = load_settings(
            database_url=url,
            chathub_workspace=tmp_path / "workspace",
            chathub_timezone="UTC",
            _env_file=None,
        )
        config = AppConfig(settings=settings, models=(), engine=EngineConfig())
        engine = await Engine.open(config, models=ModelRegistry([EchoModel(name="m")]))
        sources = SourceRegistry(engine, time.monotonic)
        placement: Placement
        if role == "local":

            async def recover(start: object) -> None:
                return None

            placement = LocalPlacement(engine, sources, recover)
        else:
            ownership = SourceOwnership(
                Leases(engine.store.db), FleetConfig(owner="p1", lease_ttl_s=10.0)
            )
            placement = FleetWork(engine, sources, ownership, None, asyncio.sleep)
        rig = Rig(engine, sources, placement)
        await placement.start(rig.consumers)
        try:
            yield rig
        finally:
            await placement.close()
            await engine.close()


async def test_a_message_accepted_is_queued_and_reaches_its_sources_consumer_here(
    rig: Rig,
) -> None:
    row_id = await rig.placement.accept(SOURCE, "hello", SendOptions(), None, False, rig.consumers)
    assert row_id is not None
    [queued] = await rig.engine.store.queue.pending(SOURCE)
    assert (queued.id, queued.content) == (row_id, "hello")
    [state] = rig.consumers.started
    unit = state.inbox.take()
    assert state.name == SOURCE and unit is not None and unit.text == "hello"
    assert rig.placement.owns(SOURCE)
    assert not await rig.placement.worked_elsewhere(SOURCE)
    assert not await rig.placement.cut(state)


async def test_stop_drops_what_waits_and_stops_the_source_here(rig: Rig) -> None:
    for text in ("one", "two"):
        await rig.placement.accept(SOURCE, text, SendOptions(), None, False, rig.consumers)
    stopped: list[str] = []

    async def stop_here(state: SourceState) -> list[Unit]:
        stopped.append(state.name)
        dropped = state.inbox.clear()
        await rig.engine.store.queue.drop(state.name)
        return list(dropped)

    assert await rig.placement.stop(SOURCE, stop_here) == 2
    assert stopped == [SOURCE]  # the source's state here: its turn stops with it
    assert await rig.engine.store.queue.pending(SOURCE) == []
    assert await rig.placement.stop("telegram:404", stop_here) == 0  # nothing anywhere


async def test_work_from_outside_the_queue_runs_while_the_source_is_held_here(
    rig: Rig,
) -> None:
    ran = []
    async with rig.placement.holding(SOURCE):
        ran.append(rig.placement.owns(SOURCE))
        fence = rig.placement.turn_fence(SOURCE)
        if fence is not None:  # the fleet's: a transaction behind it passes while held
            await rig.engine.store.db.run(fence)
    assert ran == [True]
    await rig.placement.idle(await rig.sources.state(SOURCE))


async def test_what_no_process_runs_is_left_alone(rig: Rig) -> None:
    await rig.placement.stop_session(987654)  # no such session: nothing happens, no error
    await rig.placement.decided(SOURCE, 987654, in_chat=False)
    assert rig.consumers.started == []
