"""A store with the memory layer on each back end, and a way to write chat history fast."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import Connection

from bot.schema import LAYERS
from engine.store import Layer, Store
from engine.store.schema import chat_history, utcnow
from memory.layer import MEMORY
from tests.pg import BACKENDS, database_url

#: The service's layers with memory's (until bot/schema.py lists it itself).
MEMORY_LAYERS: tuple[Layer, ...] = LAYERS if MEMORY in LAYERS else (*LAYERS, MEMORY)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def store_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    async with database_url(backend, tmp_path) as url:
        yield url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await Store.open(store_url, MEMORY_LAYERS)
    yield store
    await store.close()


async def write_history(
    store: Store,
    session_id: int,
    messages: Sequence[tuple[str, str]],
    *,
    start: datetime | None = None,
    synthetic: bool = False,
) -> list[int]:
    """Append ``(role, content)`` rows to the session's root frame in one transaction; the
    ids written, in order. Each message a minute after the last, from ``start``."""
    frame = await store.sessions.root_frame(session_id)
    first = start or utcnow()

    def write(conn: Connection) -> list[int]:
        ids = []
        for n, (role, content) in enumerate(messages):
            result = conn.execute(
                chat_history.insert().values(
                    session_stack_id=frame.id,
                    role=role,
                    content=content,
                    is_synthetic=synthetic,
                    created_at=first + timedelta(minutes=n),
                )
            )
            ids.append(int(result.inserted_primary_key[0]))
        return ids

    return await store.db.run(write)
