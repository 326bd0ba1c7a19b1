"""PostgreSQL: a unit of work whose connection dies before COMMIT runs again on a new one
(a restarted server, a killed backend), also when the death shows only at the COMMIT that
asyncpg then refuses to send; a COMMIT that reached the server and failed is never run
again; a unit that keeps failing is not retried forever."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.util import await_only

from engine.store.db import DISCONNECT_RETRIES, connect
from tests.pg import fresh_postgres_database


async def test_a_unit_whose_backend_is_killed_runs_again_and_commits_once() -> None:
    async with fresh_postgres_database() as url:
        db = connect(url)
        try:
            await db.run(lambda c: c.execute(sa.text("CREATE TABLE t (n int)")))
            attempts = 0

            def unit(conn: Connection) -> int:
                nonlocal attempts
                attempts += 1
                conn.execute(sa.text("INSERT INTO t VALUES (1)"))
                if attempts == 1:  # the server drops this connection mid-transaction
                    conn.execute(sa.text("SELECT pg_terminate_backend(pg_backend_pid())"))
                return attempts

            assert await db.run(unit) == 2
            count = await db.run(lambda c: c.execute(sa.text("SELECT count(*) FROM t")).scalar())
            assert count == 1  # the first attempt's insert never committed
        finally:
            await db.close()


async def test_a_connection_that_keeps_dying_fails_after_the_retries() -> None:
    async with fresh_postgres_database() as url:
        db = connect(url)
        attempts = 0

        def unit(conn: Connection) -> None:
            nonlocal attempts
            attempts += 1
            conn.execute(sa.text("SELECT pg_terminate_backend(pg_backend_pid())"))

        try:
            with pytest.raises(sa.exc.DBAPIError):
                await db.run(unit)
            assert attempts == DISCONNECT_RETRIES + 1
        finally:
            await db.close()


async def test_a_backend_killed_after_the_units_statements_runs_the_unit_again() -> None:
    """The server's notice arrives while the transaction idles: the COMMIT is refused by
    asyncpg, never sent (CI's fleet lost a message to this)."""
    async with fresh_postgres_database() as url:
        db = connect(url)
        dsn = url.replace("postgresql+asyncpg://", "postgresql://")
        try:
            await db.run(lambda c: c.execute(sa.text("CREATE TABLE t (n int)")))
            attempts = 0

            async def terminate(pid: int) -> None:
                other = await asyncpg.connect(dsn)
                try:
                    await other.execute("SELECT pg_terminate_backend($1)", pid)
                finally:
                    await other.close()
                await asyncio.sleep(0.2)  # the loop reads the server's notice meanwhile

            def unit(conn: Connection) -> int:
                nonlocal attempts
                attempts += 1
                conn.execute(sa.text("INSERT INTO t VALUES (1)"))
                if attempts == 1:
                    await_only(terminate(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()))
                return attempts

            assert await db.run(unit) == 2
            count = await db.run(lambda c: c.execute(sa.text("SELECT count(*) FROM t")).scalar())
            assert count == 1
        finally:
            await db.close()


async def test_a_commit_the_server_refuses_is_not_run_again() -> None:
    async with fresh_postgres_database() as url:
        db = connect(url)
        try:
            await db.run(
                lambda c: c.execute(
                    sa.text("CREATE TABLE t (n int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
                )
            )
            await db.run(lambda c: c.execute(sa.text("INSERT INTO t VALUES (1)")))
            attempts = 0

            def unit(conn: Connection) -> None:
                nonlocal attempts
                attempts += 1
                conn.execute(sa.text("INSERT INTO t VALUES (1)"))  # fails only at COMMIT

            with pytest.raises(sa.exc.IntegrityError):
                await db.run(unit)
            assert attempts == 1
        finally:
            await db.close()


def _cut_after_commit(db: object, times: int = 1) -> list[int]:
    """The first ``times`` COMMITs reach the server and succeed, and then the connection
    dies before the client hears so (the ambiguous case). The list counts the cuts."""
    dialect = db._engine.dialect  # type: ignore[attr-defined]
    commit = dialect.do_commit
    cuts: list[int] = []

    def do_commit(dbapi_connection: object) -> None:
        commit(dbapi_connection)
        if len(cuts) < times:
            cuts.append(1)
            dbapi_connection._connection.terminate()  # type: ignore[attr-defined]
            raise dialect.loaded_dbapi.InterfaceError("connection was closed mid-COMMIT")

    dialect.do_commit = do_commit
    return cuts


async def test_a_commit_that_landed_before_the_connection_died_is_not_run_again() -> None:
    async with fresh_postgres_database() as url:
        db = connect(url)
        try:
            await db.run(lambda c: c.execute(sa.text("CREATE TABLE t (n int)")))
            cuts = _cut_after_commit(db)
            attempts = 0

            def unit(conn: Connection) -> int:
                nonlocal attempts
                attempts += 1
                conn.execute(sa.text("INSERT INTO t VALUES (1)"))
                return attempts

            assert await db.run(unit) == 1
            assert cuts == [1] and attempts == 1
            count = await db.run(lambda c: c.execute(sa.text("SELECT count(*) FROM t")).scalar())
            assert count == 1  # the server had committed it: once, not twice
        finally:
            await db.close()


async def test_a_unit_that_only_read_keeps_its_result_when_the_commit_is_cut() -> None:
    async with fresh_postgres_database() as url:
        db = connect(url)
        try:
            cuts = _cut_after_commit(db)
            attempts = 0

            def unit(conn: Connection) -> int:
                nonlocal attempts
                attempts += 1
                return int(conn.execute(sa.text("SELECT 41 + 1")).scalar())

            assert await db.run(unit) == 42
            assert cuts == [1] and attempts == 1
        finally:
            await db.close()


async def test_a_connection_dropped_while_it_is_being_opened_runs_the_unit_on_a_new_one() -> None:
    """The server goes while the pool opens a connection (SQLAlchemy's first look at the
    dialect, CI's fleet lost a starting process to this): nothing of the unit ran, so it
    runs on the next connection."""
    async with fresh_postgres_database() as url:
        db = connect(url)
        dropped: list[int] = []

        def drop_the_first(dbapi_conn: object, _record: object) -> None:
            if not dropped:
                dropped.append(1)
                cursor = dbapi_conn.cursor()  # type: ignore[attr-defined]
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

        sa.event.listen(db._engine.sync_engine, "connect", drop_the_first, insert=True)  # type: ignore[attr-defined]
        try:
            assert await db.run(lambda c: c.execute(sa.text("SELECT 7")).scalar()) == 7
            assert dropped == [1]
        finally:
            await db.close()
