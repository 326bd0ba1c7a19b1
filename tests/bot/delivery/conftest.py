"""The delivery layer over a real, migrated SQLite file and a fake platform, in fake time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.delivery import OutboxStore
from bot.schema import LAYERS
from engine.store import Store
from tests.bot.delivery.fakes import FAKE
from tests.pg import database_url


@pytest.fixture
async def db_url(tmp_path: Path) -> AsyncIterator[str]:
    async with database_url("sqlite", tmp_path, migrated=True) as url:
        yield url


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    store = await Store.open(db_url, LAYERS)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def outbox(store: Store) -> OutboxStore:
    return OutboxStore(store.db, FAKE)
