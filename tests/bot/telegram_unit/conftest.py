"""A ``TelegramStore`` over a migrated database of its own, on each back end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.telegram.store import TelegramStore
from engine.store import Database, Store
from tests.pg import BACKENDS, database_url


@pytest.fixture(params=BACKENDS)
async def tg_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TelegramStore]:
    """Both back ends (PostgreSQL skips without ``CHATHUB_TEST_POSTGRES_URL``)."""
    async with database_url(request.param, tmp_path, migrated=True) as url:
        store = await Store.open(url)
        try:
            yield TelegramStore(store.db)
        finally:
            await store.close()


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[Database]:
    """SQLite only: for the tests whose subject is not the database."""
    async with database_url("sqlite", tmp_path, migrated=True) as url:
        store = await Store.open(url)
        try:
            yield store.db
        finally:
            await store.close()


@pytest.fixture
def sqlite_tg_store(sqlite_db: Database) -> TelegramStore:
    """SQLite only: for the outbound and poller tests, whose subject is not the database."""
    return TelegramStore(sqlite_db)
