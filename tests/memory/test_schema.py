"""With the memory layer, a new database created whole still equals one migrated step by
step (the full-text index included: FTS5's shadow tables, PostgreSQL's GIN index)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from engine.store import Store
from engine.store.db import _version_table, connect
from memory.facts import FactStore
from memory.indexer import Indexer
from memory.tables import memory_documents, memory_facts, memory_identities
from memory.users import Identity, Users
from tests.engine.store.test_fresh_schema import describe
from tests.memory.conftest import MEMORY_LAYERS, write_history
from tests.pg import database_url


async def schema_of(url: str, *, one_by_one: bool) -> dict[str, Any]:
    if one_by_one:
        db = connect(url)
        await db.run(lambda conn: _version_table.create(conn))
        await db.close()
    store = await Store.open(url, MEMORY_LAYERS)
    try:
        return await store.db.run(describe)
    finally:
        await store.close()


async def test_whole_and_step_by_step_agree_with_memory(backend: str, tmp_path: Path) -> None:
    (tmp_path / "whole").mkdir()
    (tmp_path / "steps").mkdir()
    async with database_url(backend, tmp_path / "whole") as whole_url:
        whole = await schema_of(whole_url, one_by_one=False)
    async with database_url(backend, tmp_path / "steps") as steps_url:
        steps = await schema_of(steps_url, one_by_one=True)
    assert "memory_documents" in whole
    assert (13, "memory", "memory") in whole["recorded"]
    assert set(whole) == set(steps)
    for name in whole:
        assert whole[name] == steps[name], name


async def test_what_background_runs_left_in_memory_goes_at_the_upgrade(
    backend: str, tmp_path: Path
) -> None:
    """Until 2026-12-07 a job's run was indexed under ``cron`` (searched by every job) and
    taught facts to a person of the platform ``cron``; 0030 removes both, nothing else."""
    async with database_url(backend, tmp_path) as url:
        store = await Store.open(url, MEMORY_LAYERS)
        try:
            chat = (await store.sessions.create("telegram:111")).id
            run = (await store.sessions.create("cron", is_ephemeral=True)).id
            await write_history(store, chat, [("user", "the lisbon hotel")])
            await write_history(store, run, [("user", "my door code is 4921")])
            await Indexer(store.db).catch_up()
            users = Users(store.db)
            phantom = await users.resolve(Identity("cron", "111"))
            ann = await users.resolve(Identity("telegram", "111"))
            facts = FactStore(store.db)
            await facts.add(phantom, "Door code 4921.", origin_source="cron", created_by="deriver")
            await facts.add(ann, "Likes Lisbon.", origin_source="telegram:111", created_by="tool")

            def again(conn: sa.Connection) -> None:  # 0030 pending, as on an older database
                conn.execute(_version_table.delete().where(_version_table.c.version == 30))

            await store.db.run(again)
        finally:
            await store.close()
        store = await Store.open(url, MEMORY_LAYERS)
        try:

            def left(conn: sa.Connection) -> tuple[set[str], list[str], list[str]]:
                d, f, i = memory_documents.c, memory_facts.c, memory_identities.c
                return (
                    set(conn.execute(sa.select(d.source)).scalars()),
                    list(conn.execute(sa.select(f.body)).scalars()),
                    list(conn.execute(sa.select(i.platform)).scalars()),
                )

            sources, bodies, platforms = await store.db.run(left)
        finally:
            await store.close()
    assert sources == {"telegram:111"}
    assert bodies == ["Likes Lisbon."]
    assert platforms == ["telegram"]
