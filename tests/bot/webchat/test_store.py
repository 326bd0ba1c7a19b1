"""The web chat's table: created whole on a new database, or by its migration on an old one
(SQLite, and PostgreSQL when ``CHATHUB_TEST_POSTGRES_URL`` names one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.schema import LAYERS
from bot.webchat.store import ConversationStore
from engine.store import Store
from tests.pg import BACKENDS, database_url


def _columns(conn: sa.Connection) -> dict[str, str]:
    inspector = sa.inspect(conn)
    columns = {c["name"]: str(c["type"]) for c in inspector.get_columns("web_conversations")}
    indexes = sorted(i["name"] for i in inspector.get_indexes("web_conversations"))
    return {**columns, "indexes": ",".join(indexes)}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_new_and_a_migrated_database_get_the_same_table(backend: str, tmp_path: Path):
    async with (
        database_url(backend, tmp_path / "a") as fresh_url,
        database_url(backend, tmp_path / "b") as old_url,
    ):
        fresh = await Store.open(fresh_url, LAYERS)
        old = await Store.open(old_url, LAYERS)  # a database from before the web chat
        await old.close()
        upgraded = await Store.open(old_url, LAYERS)
        try:
            assert await fresh.db.run(_columns) == await upgraded.db.run(_columns)
            await _use(ConversationStore(upgraded.db))
        finally:
            await fresh.close()
            await upgraded.close()


async def _use(conversations: ConversationStore) -> None:
    made = await conversations.create("hello")
    assert [c.id for c in await conversations.listed()] == [made.id]
    assert await conversations.is_open(str(made.id))
    assert not await conversations.is_open("nope") and not await conversations.is_open("99")
    # Its id as written everywhere: "01" opened conversation 1 under a second source,
    # web:01, whose messages its history never showed (found by review).
    assert not await conversations.is_open(f"0{made.id}")
    assert await conversations.hide(made.id)
    assert not await conversations.is_open(str(made.id))
    assert await conversations.listed() == []
