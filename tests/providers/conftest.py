"""What the registry's tests share: two processes over one database."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.schema import LAYERS
from engine.bus import SystemEventBus
from engine.store import open_database
from providers import ProviderRegistry, ProviderStore
from tests.pg import BACKENDS, database_url


@pytest.fixture(params=BACKENDS)
async def two_processes(request, tmp_path: Path):
    """Two registries over one database (a SQLite file, or PostgreSQL as a fleet's), each
    with its own connection and its own bus, as two processes would have."""
    async with database_url(request.param, tmp_path, migrated=True) as url:
        first, second = await open_database(url, LAYERS), await open_database(url, LAYERS)
        buses = SystemEventBus(), SystemEventBus()
        registries = (
            ProviderRegistry(ProviderStore(first), buses[0]),
            ProviderRegistry(ProviderStore(second), buses[1]),
        )
        for registry in registries:
            await registry.load()
        yield registries, buses
        await first.close()
        await second.close()
