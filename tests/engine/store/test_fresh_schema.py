"""A new database is created whole (every layer's tables in one create_all, the rows the
migrations insert, every migration recorded) and ends up exactly as the migrations, one
by one, leave a database: the same tables, columns, types, defaults, keys, indexes, rows
and recorded versions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bot.schema import LAYERS
from engine.store import Store
from engine.store.db import _version_table, connect
from tests.engine.store.conftest import backend, store_url  # noqa: F401 (fixtures)
from tests.pg import database_url


def describe(conn: sa.Connection) -> dict[str, Any]:
    inspector = sa.inspect(conn)
    found: dict[str, Any] = {}
    for table in sorted(inspector.get_table_names()):
        found[table] = {
            # By name: PostgreSQL appends a column a later migration adds after one that
            # ``seed_rows`` adds to a database created whole; every query names its columns.
            "columns": sorted(
                (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                for c in inspector.get_columns(table)
            ),
            "primary key": inspector.get_pk_constraint(table)["constrained_columns"],
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                for i in inspector.get_indexes(table)
            ),
            "unique": sorted(
                (u["name"], tuple(u["column_names"]))
                for u in inspector.get_unique_constraints(table)
            ),
            "foreign keys": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
                for f in inspector.get_foreign_keys(table)
            ),
        }
    for table in sorted(inspector.get_table_names()):  # the rows migrations insert, too
        if table == "schema_version":
            continue
        reflected = sa.Table(table, sa.MetaData(), autoload_with=conn)
        data = [c.name for c in reflected.columns if not c.name.endswith("_at")]
        found[f"rows of {table}"] = (
            sorted(
                tuple(str(v) for v in row) for row in conn.execute(sa.select(*reflected.c[*data]))
            )
            if data
            else []
        )
    found["recorded"] = sorted(
        (row.version, row.name, row.layer) for row in conn.execute(sa.select(_version_table))
    )
    return found


async def schema_of(url: str, *, one_by_one: bool) -> dict[str, Any]:
    if one_by_one:  # a database that has a table already is migrated step by step
        db = connect(url)
        await db.run(lambda conn: _version_table.create(conn))
        await db.close()
    store = await Store.open(url, LAYERS)
    try:
        return await store.db.run(describe)
    finally:
        await store.close()


async def test_a_new_database_is_created_as_the_migrations_leave_it(
    backend: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    (tmp_path / "whole").mkdir()
    (tmp_path / "steps").mkdir()
    async with database_url(backend, tmp_path / "whole") as whole_url:
        whole = await schema_of(whole_url, one_by_one=False)
    async with database_url(backend, tmp_path / "steps") as steps_url:
        steps = await schema_of(steps_url, one_by_one=True)
    assert len(whole["recorded"]) >= 11
    assert set(whole) == set(steps)
    for name in whole:
        assert whole[name] == steps[name], name


def test_a_new_database_loads_neither_alembic_nor_a_migration(tmp_path: Path) -> None:
    import subprocess

    code = (
        "import asyncio, sys\n"
        "from bot.schema import LAYERS\n"
        "from engine.store import Store\n"
        "async def main():\n"
        f"    store = await Store.open('sqlite+aiosqlite:///{tmp_path}/new.db', LAYERS)\n"
        "    await store.close()\n"
        "asyncio.run(main())\n"
        "loaded = [m for m in sys.modules if m.startswith('alembic') or '.migrations.v' in m]\n"
        "print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
