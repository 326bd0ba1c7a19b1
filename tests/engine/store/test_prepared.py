"""Prepared statements store exactly what ``Connection.execute`` stores, on both back ends."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from engine.store.db import connect
from engine.store.prepared import Prepared
from engine.store.schema import UtcDateTime
from tests.pg import BACKENDS, database_url

metadata = sa.MetaData()
items = sa.Table(
    "prepared_items",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("key", sa.String(32), nullable=False, unique=True),
    sa.Column("payload", sa.JSON),
    sa.Column("flag", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("hits", sa.Integer, nullable=False, server_default="0"),
    sa.Column("at", UtcDateTime()),
)

INSERT = Prepared(items.insert())
INSERT_IF_NEW = {
    "sqlite": Prepared(sqlite.insert(items).on_conflict_do_nothing()),
    "postgresql": Prepared(postgresql.insert(items).on_conflict_do_nothing()),
}
TOUCH = Prepared(
    items.update()
    .where(items.c.key == sa.bindparam("k"))
    .values(hits=items.c.hits + 1, at=sa.bindparam("at"), payload=sa.bindparam("payload"))
)
WHEN = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
async def db(request, tmp_path: Path):
    async with database_url(request.param, tmp_path) as url:
        database = connect(url)
        await database.run(metadata.create_all)
        yield database
        await database.close()


def raw_rows(conn) -> list[tuple]:
    """The stored values as the database holds them (no SQLAlchemy result processing)."""
    sql = "SELECT key, CAST(payload AS TEXT), flag, hits, CAST(at AS TEXT) FROM prepared_items"
    return [tuple(row) for row in conn.exec_driver_sql(f"{sql} ORDER BY key")]


async def test_a_prepared_insert_stores_what_connection_execute_stores(db):
    def both(conn):
        for key, payload in (("a", {"x": [1, "é"]}), ("b", None)):
            values = {"key": key, "payload": payload, "flag": True, "at": WHEN}
            conn.execute(items.insert(), values)
            new_id = INSERT.insert(conn, {**values, "key": key + "-prepared"})
            assert conn.execute(sa.select(items.c.key).where(items.c.id == new_id)).scalar() == (
                key + "-prepared"
            )
        return raw_rows(conn)

    stored = await db.run(both)
    by_key = {row[0]: row[1:] for row in stored}
    assert by_key["a"] == by_key["a-prepared"]
    assert by_key["b"] == by_key["b-prepared"]  # JSON None is stored the way SQLAlchemy does


async def test_an_update_keeps_its_constant_and_expression_parts(db):
    def run(conn):
        INSERT.insert(conn, {"key": "k", "payload": {}, "at": None})
        first = TOUCH.execute(conn, {"k": "k", "at": WHEN, "payload": {"n": 1}})
        missing = TOUCH.execute(conn, {"k": "nobody", "at": WHEN, "payload": None})
        TOUCH.executemany(conn, [{"k": "k", "at": WHEN, "payload": {"n": n}} for n in (2, 3)])
        row = conn.execute(sa.select(items.c.hits, items.c.payload, items.c.at)).one()
        return first, missing, tuple(row)

    first, missing, row = await db.run(run)
    assert (first.rowcount, first.primary_key) == (1, None)
    assert missing.rowcount == 0
    assert row == (3, {"n": 3}, WHEN)


async def test_insert_if_new_reports_a_duplicate_without_a_key(db):
    def run(conn):
        statement = INSERT_IF_NEW[conn.dialect.name]
        fresh = statement.execute(conn, {"key": "once", "payload": None, "at": WHEN})
        again = statement.execute(conn, {"key": "once", "payload": None, "at": WHEN})
        return fresh, again

    fresh, again = await db.run(run)
    assert fresh.rowcount == 1 and isinstance(fresh.primary_key, int)
    assert again == (0, None)


async def test_a_constraint_violation_raises_sqlalchemys_integrity_error(db):
    def run(conn):
        INSERT.insert(conn, {"key": "dup", "payload": None, "at": None})
        INSERT.insert(conn, {"key": "dup", "payload": None, "at": None})

    with pytest.raises(sa.exc.IntegrityError):
        await db.run(run)
    # the failed unit rolled back as a whole
    assert (
        await db.run(
            lambda conn: conn.execute(sa.select(sa.func.count()).select_from(items)).scalar()
        )
        == 0
    )


async def test_an_insert_that_adds_nothing_is_an_error_where_a_row_is_required(db):
    def run(conn):
        INSERT.insert(conn, {"key": "x", "payload": None, "at": None})
        INSERT_IF_NEW[conn.dialect.name].insert(conn, {"key": "x", "payload": None, "at": None})

    with pytest.raises(RuntimeError, match="no row inserted"):
        await db.run(run)


@pytest.mark.parametrize(
    "statement",
    [
        sa.select(items.c.id),
        items.insert().returning(items.c.id),
        sa.Table(
            "d",
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("v", sa.Integer, default=lambda: 1),
        ).insert(),
    ],
    ids=["select", "returning", "python-default"],
)
async def test_statements_it_cannot_run_faithfully_are_refused(tmp_path: Path, statement):
    database = connect(f"sqlite:///{tmp_path / 'refuse.db'}")
    try:
        await database.run(metadata.create_all)
        with pytest.raises(TypeError):
            await database.run(lambda conn: Prepared(statement).execute(conn, {"id": 1}))
    finally:
        await database.close()
