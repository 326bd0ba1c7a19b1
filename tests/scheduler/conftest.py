"""Fixtures for the scheduler: job stores on both back ends, and a real engine + hub.

Time is a ``FakeClock`` the test moves; nothing waits for a real schedule. A dispatch is
``await scheduler.dispatcher.step()`` then ``await scheduler.dispatcher.drain()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from bot.schema import LAYERS
from engine.core import Engine
from engine.hub import ChatHub, Notification
from engine.store import Store
from scheduler.cron import CronSchedule
from scheduler.service import Scheduler, SchedulerLimits
from scheduler.store import Job, JobStore
from tests.clock import FakeClock
from tests.pg import BACKENDS, database_url

ORIGIN = "telegram:1"


def cron_next_fire(job: Job, after: datetime) -> datetime | None:
    """What ``Scheduler.next_fire`` computes, for tests of the store alone."""
    if job.spec is None:
        return None
    return CronSchedule.parse(job.spec, job.timezone).next_fire(after)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()  # 2026-01-01 00:00 UTC


# -- the job store on both back ends ----------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def store_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    async with database_url(backend, tmp_path, migrated=True) as url:
        yield url


@pytest.fixture
async def open_store(store_url: str) -> AsyncIterator[Callable[[], Awaitable[Store]]]:
    """Opens stores over one database: each one a dispatcher process of its own."""
    opened: list[Store] = []

    async def open_() -> Store:
        store = await Store.open(store_url, LAYERS)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store: Callable[[], Awaitable[Store]]) -> Store:
    return await open_store()


@pytest.fixture
def jobs(store: Store) -> JobStore:
    return JobStore(store.db)


# -- a real engine and hub over SQLite ------------------------------------------------------


# The engine and hub fixtures of the hub tests: a real engine over SQLite, an EchoModel,
# a ManualSleep for the notification window.
from tests.engine.hub.conftest import (  # noqa: E402, F401
    app_config,
    engine,
    hub,
    hub_config,
    manual_sleep,
    model,
)


@pytest.fixture
def notified(hub: ChatHub) -> list[Notification]:
    """Every notification handed to the hub (recorded, then delivered as usual)."""
    seen: list[Notification] = []
    original = hub.notify

    def record(notification: Notification) -> None:
        seen.append(notification)
        original(notification)

    hub.notify = record  # type: ignore[method-assign]
    return seen


@pytest.fixture
async def origin(engine: Engine) -> int:
    """The chat that creates the jobs already has a session (so it is a known target)."""
    return (await engine.store.sessions.for_source(ORIGIN)).id


@pytest.fixture
async def make_scheduler(
    engine: Engine, hub: ChatHub, clock: FakeClock
) -> AsyncIterator[Callable[..., Scheduler]]:
    """Schedulers over the one engine; a second one is a restarted process."""
    made: list[Scheduler] = []

    def make(
        *,
        owner: str | None = None,
        lease: timedelta = timedelta(seconds=60),
        limits: SchedulerLimits | None = None,
        clock_: Callable[[], datetime] = clock,
        max_concurrent: int = 32,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> Scheduler:
        scheduler = Scheduler(
            engine,
            hub,
            timezone="UTC",
            limits=limits,
            clock=clock_,
            owner=owner,
            lease=lease,
            max_concurrent=max_concurrent,
            **({"sleep": sleep} if sleep is not None else {}),
        )
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        await scheduler.close()


@pytest.fixture
def scheduler(make_scheduler: Callable[..., Scheduler]) -> Scheduler:
    return make_scheduler(owner="worker-a")
