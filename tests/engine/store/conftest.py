"""A migrated ``Store`` on each back end: a SQLite file, and PostgreSQL when configured."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.store import Store
from engine.store.rows import FrameRow
from tests.pg import BACKENDS, database_url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def store_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of an empty database of its own (nothing migrated yet)."""
    async with database_url(backend, tmp_path) as url:
        yield url


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A store over a migrated database of its own."""
    async with database_url(backend, tmp_path, migrated=True) as url:
        store = await Store.open(url)
        try:
            yield store
        finally:
            await store.close()


@pytest.fixture
async def root(store: Store) -> FrameRow:
    """The root frame of a fresh interactive session."""
    session = await store.sessions.create("telegram:42")
    return await store.sessions.root_frame(session.id)
