"""Throw-away databases for tests that run on both storage back ends.

PostgreSQL runs only when ``CHATHUB_TEST_POSTGRES_URL`` names a server, e.g.
``postgresql+asyncpg://postgres@127.0.0.1:5432/test``. Each test gets a database of its own,
created empty (``chathub_t_<hex>``) and dropped afterwards, so tests never see each other's
rows and nothing is left behind in the database the URL names.

    from tests.pg import BACKENDS, database_url

    @pytest.fixture(params=BACKENDS)
    async def store(request, tmp_path):
        async with database_url(request.param, tmp_path) as url:
            store = await Store.open(url)
            yield store
            await store.close()

or, for PostgreSQL alone: ``async with fresh_postgres_database() as url: ...``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import URL, make_url

POSTGRES_URL_ENV = "CHATHUB_TEST_POSTGRES_URL"
DATABASE_PREFIX = "chathub_t_"


def postgres_url() -> str | None:
    """The server URL from ``CHATHUB_TEST_POSTGRES_URL``, or None when PostgreSQL is off."""
    return os.environ.get(POSTGRES_URL_ENV) or None


requires_postgres = pytest.mark.skipif(
    postgres_url() is None, reason=f"{POSTGRES_URL_ENV} is not set"
)

# Parameters for a fixture that runs on both back ends; the PostgreSQL one skips without a server.
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=requires_postgres),
]


@asynccontextmanager
async def fresh_postgres_database(server_url: str | None = None) -> AsyncIterator[str]:
    """Create an empty database; yield a ``postgresql+asyncpg://`` URL for it; drop it after.

    ``server_url`` defaults to ``CHATHUB_TEST_POSTGRES_URL``; without either the test skips.
    The drop uses ``WITH (FORCE)``, so connections the test left open do not keep it alive.
    """
    import asyncpg  # a dev dependency; imported here so SQLite-only runs never need it

    server_url = server_url or postgres_url()
    if server_url is None:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    server = make_url(server_url)
    name = f"{DATABASE_PREFIX}{uuid.uuid4().hex}"
    admin = await asyncpg.connect(_asyncpg_dsn(server))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield server.set(drivername="postgresql+asyncpg", database=name).render_as_string(
                hide_password=False
            )
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@asynccontextmanager
async def database_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """A store URL for an empty database: a file under ``tmp_path``, or a fresh PG database."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}"
    elif backend == "postgresql":
        async with fresh_postgres_database() as url:
            yield url
    else:
        raise ValueError(f"unknown backend {backend!r}")


def _asyncpg_dsn(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)
