"""Throw-away databases for tests that run on both storage back ends.

PostgreSQL runs only when ``CHATHUB_TEST_POSTGRES_URL`` names a server, e.g.
``postgresql+asyncpg://postgres@127.0.0.1:5432/test``. Each test gets a database of its own,
created empty (``chathub_t_<hex>``) and dropped afterwards, so tests never see each other's
rows and nothing is left behind in the database the URL names.

    from tests.pg import BACKENDS, database_url

    @pytest.fixture(params=BACKENDS)
    async def store(request, tmp_path):
        async with database_url(request.param, tmp_path, migrated=True) as url:
            store = await Store.open(url)
            yield store
            await store.close()

or, for PostgreSQL alone: ``async with fresh_postgres_database() as url: ...``.

``migrated=True`` gives a database that already has the current schema: a copy of a template
database migrated once per test run (``CREATE DATABASE ... TEMPLATE``), which saves the
~0.2 s a migration costs on every test. The template is dropped when the run ends.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

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
async def fresh_postgres_database(
    server_url: str | None = None, *, migrated: bool = False
) -> AsyncIterator[str]:
    """Create a database of its own; yield a ``postgresql+asyncpg://`` URL for it; drop it after.

    Empty, or with ``migrated=True`` already at the current schema version. ``server_url``
    defaults to ``CHATHUB_TEST_POSTGRES_URL``; without either the test skips. The drop uses
    ``WITH (FORCE)``, so connections the test left open do not keep the database alive.
    """
    server_url = server_url or postgres_url()
    if server_url is None:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set")
    server = make_url(server_url)
    template = await _migrated_template(server) if migrated else None
    name = _new_name()
    admin = await _admin(server)
    try:
        await _create(admin, name, template)
        try:
            yield _url_for(server, name)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


# server URL -> name of its migrated template database, made on first use in this run
_templates: dict[str, str] = {}


async def _migrated_template(server: URL) -> str:
    key = server.render_as_string(hide_password=False)
    if key not in _templates:
        from engine.store import Store

        name = _new_name()
        admin = await _admin(server)
        try:
            await _create(admin, name)
            try:
                store = await Store.open(_url_for(server, name))
            except BaseException:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                raise
        finally:
            await admin.close()
        await store.close()  # a template must have no connections when it is copied
        _templates[key] = name
    return _templates[key]


@atexit.register
def _drop_templates() -> None:
    async def drop() -> None:
        for key, name in _templates.items():
            admin = await _admin(make_url(key))
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()

    if _templates:
        asyncio.run(drop())
        _templates.clear()


async def _admin(server: URL) -> Any:
    import asyncpg  # a dev dependency; imported here so SQLite-only runs never need it

    return await asyncpg.connect(
        server.set(drivername="postgresql").render_as_string(hide_password=False)
    )


async def _create(admin: Any, name: str, template: str | None = None) -> None:
    # CREATE DATABASE cannot run inside a transaction; asyncpg's execute is outside one.
    suffix = f' TEMPLATE "{template}"' if template else ""
    await admin.execute(f'CREATE DATABASE "{name}"{suffix}')


def _new_name() -> str:
    return f"{DATABASE_PREFIX}{uuid.uuid4().hex}"


def _url_for(server: URL, name: str) -> str:
    return server.set(drivername="postgresql+asyncpg", database=name).render_as_string(
        hide_password=False
    )


@asynccontextmanager
async def database_url(
    backend: str, tmp_path: Path, *, migrated: bool = False
) -> AsyncIterator[str]:
    """A store URL for a database of its own: a file under ``tmp_path``, or a fresh PG database.

    ``migrated`` matters to PostgreSQL only (a copy of the migrated template); a new SQLite
    file migrates in a few milliseconds when the store opens.
    """
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}"
    elif backend == "postgresql":
        async with fresh_postgres_database(migrated=migrated) as url:
            yield url
    else:
        raise ValueError(f"unknown backend {backend!r}")
