"""PostgreSQL: a unit of work whose connection dies before COMMIT runs again on a new one
(a restarted server, a killed backend); a unit that keeps failing is not retried forever."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

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
