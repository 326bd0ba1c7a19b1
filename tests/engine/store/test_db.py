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
