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
The copies themselves (``CREATE DATABASE``, ~75 ms) are made ahead of use and dropped after
it by a thread of their own (``_Spares``), so a test neither waits for its database to be
made nor for it to be dropped; whatever is left is dropped when the run ends.

SQLite likewise: ``migrated_sqlite(path)`` puts a copy of a file migrated once per run (per
xdist worker) at ``path`` (~5 ms; a new file takes ~80 ms to migrate when the store opens),
for the fixtures that open an engine or a store over a new file. The migrations themselves
run from an empty database in ``tests/engine/store/test_migrations.py`` (and for the template).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import queue
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Coroutine
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
    spares = _spares_of(server, template)
    name = await spares.take()
    try:
        yield _url_for(server, name)
    finally:
        spares.drop(name)


class _Spares:
    """Databases made from one template (``None``: empty ones) ahead of use, and dropped
    after it, by a thread with its own event loop and admin connection: a test takes one
    that is ready and hands it back to be dropped, waiting for neither."""

    #: Databases kept ready. Two: tests take them about as fast as they are made.
    AHEAD = 2

    def __init__(self, server: URL, template: str | None) -> None:
        self._server = server
        self._template = template
        self._jobs: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        self._ready: queue.SimpleQueue[str | BaseException] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="pg-spares", daemon=True)
        self._thread.start()
        for _ in range(self.AHEAD):
            self._jobs.put(("create", ""))

    async def take(self) -> str:
        """The name of a database of its own (made now if none is ready)."""
        self._jobs.put(("create", ""))  # the next test's
        made = await asyncio.to_thread(self._ready.get)
        if isinstance(made, BaseException):
            raise made
        return made

    def drop(self, name: str) -> None:
        self._jobs.put(("drop", name))

    def close(self) -> None:
        """Drop what is ready and unused, then stop (at the end of the run)."""
        self._jobs.put(None)
        self._thread.join(timeout=60)

    def _work(self) -> None:
        # Blocking waits for jobs in this thread itself (an executor thread blocked in a
        # get would hold up the interpreter's exit before ``close`` is ever called).
        loop = asyncio.new_event_loop()
        try:
            admin = loop.run_until_complete(_admin(self._server))
        except Exception as exc:  # every take raises it
            while (job := self._jobs.get()) is not None:
                if job[0] == "create":
                    self._ready.put(exc)
            loop.close()
            return
        try:
            while (job := self._jobs.get()) is not None:
                kind, name = job
                if kind == "create":
                    name = _new_name()
                    try:
                        loop.run_until_complete(_create(admin, name, self._template))
                    except Exception as exc:  # raised by the take that gets it
                        self._ready.put(exc)
                    else:
                        self._ready.put(name)
                else:
                    loop.run_until_complete(self._drop(admin, name))
            while True:  # made ahead and never taken
                try:
                    made = self._ready.get_nowait()
                except queue.Empty:
                    break
                if isinstance(made, str):
                    loop.run_until_complete(self._drop(admin, made))
        finally:
            loop.run_until_complete(admin.close())
            loop.close()

    @staticmethod
    async def _drop(admin: Any, name: str) -> None:
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except Exception as exc:  # a test's teardown no longer sees it: say so
            print(f"tests/pg.py: could not drop database {name}: {exc!r}", file=sys.stderr)


# (server URL, template or None) -> its spares, started on first use in this run
_spares: dict[tuple[str, str | None], _Spares] = {}


def _spares_of(server: URL, template: str | None) -> _Spares:
    key = (server.render_as_string(hide_password=False), template)
    if key not in _spares:
        _spares[key] = _Spares(server, template)
    return _spares[key]


# server URL -> name of its migrated template database, made on first use in this run
_templates: dict[str, str] = {}


async def _migrated_template(server: URL) -> str:
    key = server.render_as_string(hide_password=False)
    if key not in _templates:
        from bot.schema import LAYERS
        from engine.store import Store

        name = _new_name()
        admin = await _admin(server)
        try:
            await _create(admin, name)
            try:
                store = await Store.open(_url_for(server, name), LAYERS)
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

    for spares in _spares.values():  # first: they copy the templates
        spares.close()
    _spares.clear()
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


# The SQLite file migrated once in this process, copied by ``migrated_sqlite``.
_sqlite_template: Path | None = None
_sqlite_template_lock = threading.Lock()


def migrated_sqlite(path: Path) -> str:
    """Put a SQLite database at the current schema version at ``path``: a copy of a file
    migrated once per run (nothing when ``path`` exists: the test's other fixture made it).
    Returns its ``sqlite+aiosqlite`` URL.

    Callable from sync and async fixtures alike (the one migration runs in a thread of its
    own, with its own event loop).
    """
    global _sqlite_template
    with _sqlite_template_lock:
        if _sqlite_template is None:
            folder = Path(tempfile.mkdtemp(prefix="chathub-sqlite-template-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            template = folder / "migrated.db"
            _run_apart(_migrate_sqlite(template))
            # Closed: everything is in the one file (no -wal or -shm to copy along).
            assert [p.name for p in folder.iterdir()] == [template.name]
            _sqlite_template = template
    if not path.exists():  # else another fixture of the test made it: they share it, as before
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


async def _migrate_sqlite(path: Path) -> None:
    from bot.schema import LAYERS
    from engine.store import Store

    store = await Store.open(f"sqlite+aiosqlite:///{path}", LAYERS)
    await store.close()


def _run_apart(coroutine: Coroutine[Any, Any, None]) -> None:
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(coroutine)
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="sqlite-template")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


@asynccontextmanager
async def database_url(
    backend: str, tmp_path: Path, *, migrated: bool = False
) -> AsyncIterator[str]:
    """A store URL for a database of its own: a file under ``tmp_path``, or a fresh PG database.

    ``migrated``: a copy of the migrated template (``migrated_sqlite`` for SQLite); without
    it, an empty database (a SQLite file that does not exist yet).
    """
    if backend == "sqlite":
        path = tmp_path / "chathub.db"
        yield migrated_sqlite(path) if migrated else f"sqlite+aiosqlite:///{path}"
    elif backend == "postgresql":
        async with fresh_postgres_database(migrated=migrated) as url:
            yield url
    else:
        raise ValueError(f"unknown backend {backend!r}")
