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


async def test_an_index_made_before_0033_finds_chinese_words_after_the_upgrade(
    backend: str, tmp_path: Path
) -> None:
    """Until 2026-12-07 a run of CJK characters was one word in the index, so a Chinese
    word inside a sentence was never found (found by review on 2026-12-07); 0033 makes
    the index again over the documents already there."""
    from memory.migrations.v0013_memory import _SEARCH_INDEX as OLD_INDEX
    from memory.search import Search

    async with database_url(backend, tmp_path) as url:
        store = await Store.open(url, MEMORY_LAYERS)
        try:
            chat = (await store.sessions.create("telegram:1")).id
            said = [("user", "我们下周去东京旅游"), ("user", "the hotel near Alfama")]
            await write_history(store, chat, said)
            await Indexer(store.db).catch_up()

            def as_before_0033(conn: sa.Connection) -> None:
                if conn.dialect.name == "sqlite":
                    for name in ("memory_documents_ai", "memory_documents_ad"):
                        conn.execute(sa.text(f"DROP TRIGGER {name}"))
                    conn.execute(sa.text("DROP TABLE memory_fts"))
                    conn.execute(sa.text("DROP VIEW memory_fts_content"))
                else:
                    conn.execute(sa.text("ALTER TABLE memory_documents DROP COLUMN body_tsv"))
                conn.execute(sa.text("ALTER TABLE memory_documents DROP COLUMN search_body"))
                for statement in OLD_INDEX[conn.dialect.name]:
                    conn.execute(sa.text(statement))
                if conn.dialect.name == "sqlite":
                    conn.execute(sa.text("INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')"))
                conn.execute(_version_table.delete().where(_version_table.c.version == 33))

            await store.db.run(as_before_0033)
        finally:
            await store.close()
        store = await Store.open(url, MEMORY_LAYERS)
        try:
            search = Search(store.db)
            chinese = await search.sessions("telegram:1", "东京")
            english = await search.sessions("telegram:1", "Alfama")

            def forget(conn: sa.Connection) -> None:
                conn.execute(memory_documents.delete())
                if conn.dialect.name == "sqlite":  # the index agrees with its content
                    conn.execute(
                        sa.text(
                            "INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 1)"
                        )
                    )

            await store.db.run(forget)
            gone = await search.sessions("telegram:1", "东京")
        finally:
            await store.close()
    assert [h.snippet for h in chinese] == ["我们下周去[东京]旅游"]
    assert [h.snippet for h in english] == ["the hotel near [Alfama]"]
    assert gone == []
