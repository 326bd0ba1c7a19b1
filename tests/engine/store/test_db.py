"""SQLite units of work: quick units run inline only when nothing is queued, in order."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from engine.store.db import SqliteDatabase, quick_unit

rows = sa.Table(
    "rows", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True), sa.Column("v", sa.String)
)


@pytest.fixture
async def db(tmp_path: Path):
    database = SqliteDatabase(str(tmp_path / "units.db"))
    await database.run(lambda conn: rows.metadata.create_all(conn))
    yield database
    await database.close()


@quick_unit
def add_here(conn, value: str) -> str:
    conn.execute(rows.insert().values(v=value))
    return threading.current_thread().name


def add_on_thread(conn, value: str) -> str:
    conn.execute(rows.insert().values(v=value))
    return threading.current_thread().name


def values(conn) -> list[str]:
    return list(conn.execute(sa.select(rows.c.v).order_by(rows.c.id)).scalars())


async def test_a_quick_unit_runs_on_the_callers_thread_when_the_database_is_idle(db):
    assert await db.run(add_here, "a") == threading.current_thread().name
    assert await db.run(add_on_thread, "b") == "chathub-sqlite"
    assert await db.run(values) == ["a", "b"]


async def test_a_quick_unit_never_overtakes_a_queued_one(db):
    release = threading.Event()

    def slow(conn, value: str) -> None:
        release.wait(5)
        conn.execute(rows.insert().values(v=value))

    first = asyncio.create_task(db.run(slow, "first"))
    await asyncio.sleep(0)  # queued (and running) on the database thread
    second = asyncio.create_task(db.run(add_here, "second"))
    await asyncio.sleep(0)
    assert not second.done()  # it waits its turn instead of running inline
    release.set()
    assert await second == "chathub-sqlite"
    await first
    assert await db.run(values) == ["first", "second"]


async def test_a_failing_quick_unit_rolls_back_and_raises_to_its_caller(db):
    @quick_unit
    def half(conn) -> None:
        conn.execute(rows.insert().values(v="half"))
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await db.run(half)
    assert await db.run(values) == []
    assert await db.run(add_here, "after") == threading.current_thread().name


# --- riders: work committed with the next unit of work -----------------------------------


def add_rider(conn, value: str) -> None:
    conn.execute(rows.insert().values(v=value))


def count_commits(database: SqliteDatabase) -> list[int]:
    commits = [0]
    sa.event.listen(
        database._engine, "commit", lambda _conn: commits.__setitem__(0, commits[0] + 1)
    )
    return commits


async def test_a_rider_commits_in_the_next_units_transaction(db):
    commits = count_commits(db)
    rider = db.ride_along(add_rider, "rider")
    assert not rider.committed
    await db.run(add_here, "unit")
    assert rider.committed and commits == [1]  # one commit carried both
    await db.settle(rider)  # nothing left to do
    assert commits == [1]
    assert await db.run(values) == ["rider", "unit"]  # the rider first


async def test_settle_commits_a_rider_no_unit_came_for(db):
    rider = db.ride_along(add_rider, "alone")
    await db.settle(rider)
    assert rider.committed
    assert await db.run(values) == ["alone"]


async def test_a_rider_outlives_a_failing_unit_and_rides_with_the_next(db):
    @quick_unit
    def failing(conn) -> None:
        conn.execute(rows.insert().values(v="rolled back"))
        raise ValueError("boom")

    rider = db.ride_along(add_rider, "kept")
    with pytest.raises(ValueError, match="boom"):
        await db.run(failing)
    assert not rider.committed
    await db.run(add_on_thread, "next")  # the database thread carries it too
    assert rider.committed
    assert await db.run(values) == ["kept", "next"]


async def test_a_failing_rider_fails_once_and_raises_to_whoever_settles_it(db):
    def broken(conn) -> None:
        conn.execute(sa.text("INSERT INTO no_such_table VALUES (1)"))

    rider = db.ride_along(broken)
    with pytest.raises(sa.exc.OperationalError):
        await db.run(add_here, "unlucky")  # its unit fails with it...
    assert await db.run(add_here, "fine") == threading.current_thread().name  # ...no other
    with pytest.raises(sa.exc.OperationalError):
        await db.settle(rider)
    assert await db.run(values) == ["fine"]
