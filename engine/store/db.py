"""Opening the database and running units of work on it.

A unit of work is a plain function over a SQLAlchemy Core ``Connection``; it runs inside
one transaction and commits when it returns. The same function runs on both back ends:

* SQLite: a dedicated thread owns one connection (WAL, busy timeout), so a whole
  transaction costs one thread hop. (Driving SQLite through SQLAlchemy's aiosqlite
  adapter costs a hop per DBAPI call: 0.6-0.8 ms per INSERT+COMMIT here against
  0.25 ms; see docs/storage.md.)
* PostgreSQL: SQLAlchemy's asyncio engine over asyncpg, via ``AsyncConnection.run_sync``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url

from engine.config import ConfigError
from engine.store.fencing import Fence, current_fence
from engine.store.migrations import ENGINE, Layer, Migration, discover

if TYPE_CHECKING:  # imported for PostgreSQL only: SQLite runs on a thread of its own
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
UnitOfWork = Callable[Concatenate[Connection, P], T]
F = TypeVar("F", bound=Callable[..., Any])

SQLITE_BUSY_TIMEOUT_MS = 5_000
#: PostgreSQL: a unit whose connection dies before COMMIT runs again, this many times.
DISCONNECT_RETRIES = 3
DISCONNECT_BACKOFF_S = 0.2
#: How often to ask the server what became of a transaction whose COMMIT was cut off.
OUTCOME_TRIES = 10
# Serialises concurrent migrators (several workers starting at once on PostgreSQL).
_PG_MIGRATION_LOCK = 0x6368_6174_6875_62

# One row per applied migration. ``layer`` names the layer it belongs to; rows written
# before the layers were split (0001..0011, all in one sequence) have none.
_version_table = sa.Table(
    "schema_version",
    sa.MetaData(),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("layer", sa.String(64)),
)
#: The last version numbered before the layers were split: a row up to it without a layer
#: belongs to whichever layer owns that number now.
LAST_BEFORE_LAYERS = 11


class Database(Protocol):
    """Runs units of work, each in its own committed transaction."""

    @property
    def dialect(self) -> str: ...

    async def run(self, fn: UnitOfWork[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    async def close(self) -> None: ...


def quick_unit(fn: F) -> F:
    """Mark a unit of work that touches a handful of rows by key.

    On SQLite such a unit runs on the caller's thread when the database thread has nothing
    queued or running: a commit in WAL mode costs less than the two thread hops (measured
    in bench/telegram_e2e.py). Order is kept: it never overtakes a queued unit.
    """
    fn.chathub_quick_unit = True  # type: ignore[attr-defined]
    return fn


class Rider:
    """Work that commits with the next unit of work on SQLite (see ``ride_along``)."""

    __slots__ = ("args", "committed", "error", "fn")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.committed = False
        self.error: BaseException | None = None


@quick_unit
def _nothing(_conn: Connection) -> None:
    """A unit with no work of its own: its transaction carries the riders."""


class SqliteDatabase:
    """One SQLite connection owned by one thread; a transaction per submitted function.

    A ``quick_unit`` runs inline instead when that thread is idle (the connection is then
    used under the same lock the thread holds while it works).
    """

    dialect = "sqlite"

    def __init__(self, path: str, *, dbapi: ModuleType | None = None) -> None:
        """``dbapi``: a DB-API module in place of ``sqlite3`` (``pysqlite3.dbapi2``)."""
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._engine = sa.create_engine(
            f"sqlite:///{path}",
            poolclass=sa.pool.StaticPool,
            connect_args={"check_same_thread": False},  # guarded by ``_busy``
            **({"module": dbapi} if dbapi is not None else {}),
        )
        event.listen(self._engine, "connect", _sqlite_pragmas)
        event.listen(self._engine, "begin", _sqlite_begin)
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="chathub-sqlite", daemon=True)
        self._closed = False
        self._conn: Connection | None = None
        self._busy = threading.Lock()  # held while a unit uses the connection
        self._count = threading.Lock()
        self._submitted = self._finished = 0  # queued units; equal: none queued or running
        self._riders: list[Rider] = []  # guarded by ``_count``
        self._thread.start()

    def ride_along(self, fn: Callable[..., None], *args: Any) -> Rider:
        """Run ``fn(conn, *args)`` first in the next unit of work's transaction.

        One connection serialises every unit, so whatever any later unit writes commits
        with or after it. ``settle`` makes it durable when no unit came along meanwhile.
        """
        rider = Rider(fn, args)
        with self._count:
            self._riders.append(rider)
        return rider

    async def settle(self, rider: Rider) -> None:
        """Return once ``rider`` is committed (in a unit of its own if need be)."""
        while not rider.committed:
            if rider.error is not None:
                raise rider.error
            await self.run(_nothing)

    def _in_transaction(self, conn: Connection, fn: Callable[..., T], args: Any, kwargs: Any) -> T:
        riders: list[Rider] = []
        if self._riders:
            with self._count:
                riders, self._riders = self._riders, []
        try:
            with conn.begin():
                _carry(riders, conn)
                result = fn(conn, *args, **kwargs)
        except BaseException:
            with self._count:  # the unit failed, not them (see _carry): the next one carries them
                self._riders[:0] = [r for r in riders if r.error is None]
            raise
        for rider in riders:
            rider.committed = True
        return result

    def _serve(self) -> None:
        try:
            conn = self._engine.connect()
        except Exception as exc:  # e.g. the path is a directory: fail every job, never hang
            self._engine.dispose()
            while (job := self._jobs.get()) is not None:
                _hand_back(job[3], job[4], None, exc)
            return
        self._conn = conn
        try:
            while (job := self._jobs.get()) is not None:
                fn, args, kwargs, loop, future = job
                with self._busy:
                    try:
                        result = self._in_transaction(conn, fn, args, kwargs)
                    except BaseException as exc:  # handed to the awaiting coroutine
                        outcome: tuple[Any, BaseException | None] = (None, exc)
                    else:
                        outcome = (result, None)
                    with self._count:
                        self._finished += 1
                _hand_back(loop, future, *outcome)
                # Not kept alive while waiting for the next job (a big result would be).
                del job, fn, args, kwargs, future, outcome
                result = None
        finally:
            with self._busy:
                self._conn = None
                conn.close()
            self._engine.dispose()

    async def run(self, fn: UnitOfWork[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._closed:
            raise RuntimeError("database is closed")
        fence = current_fence()  # read here: the database thread has no task context
        if fence is not None:
            return await self._submit(_behind_fence, (fence, fn, args, kwargs), {})
        if getattr(fn, "chathub_quick_unit", False) and self._busy.acquire(blocking=False):
            try:
                conn = self._conn
                with self._count:
                    idle = self._submitted == self._finished
                if idle and conn is not None:
                    return self._in_transaction(conn, fn, args, kwargs)
            finally:
                self._busy.release()
        return await self._submit(fn, args, kwargs)

    async def _submit(self, fn: Callable[..., T], args: Any, kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._count:
            self._submitted += 1
        self._jobs.put((fn, args, kwargs, loop, future))
        return await future

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        await asyncio.to_thread(self._thread.join)


def _carry(riders: list[Rider], conn: Connection) -> None:
    for rider in riders:
        try:
            rider.fn(conn, *rider.args)
        except BaseException as exc:
            # Failing riders are not retried by every later unit (that would fail them all):
            # ``settle`` raises their error to whoever waits for them.
            for failed in riders:
                failed.error = exc
            raise


def _hand_back(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    # A closed loop (the caller is gone) raises RuntimeError; the thread must live on.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle, future, result, exc)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.cancelled():
        return  # the work is committed (or failed) regardless; nobody is waiting
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class AsyncEngineDatabase:
    """PostgreSQL (asyncpg) through SQLAlchemy's asyncio extension."""

    def __init__(self, url: str) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        # No pre-ping (a round trip per unit): a connection found dead runs the unit again.
        self._engine: AsyncEngine = create_async_engine(url)
        event.listen(self._engine.sync_engine, "before_cursor_execute", _note_writes)

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    async def run(self, fn: UnitOfWork[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` in one transaction, exactly once even when the connection dies.

        Before COMMIT, a lost connection means nothing committed: the unit runs again on a
        new one. At COMMIT it is ambiguous (the server may have committed before the
        connection went): the transaction's id, read before COMMIT, is then looked up on a
        new connection, and the unit runs again only if the server says it aborted."""
        fence = current_fence()
        for attempt in range(DISCONNECT_RETRIES + 1):
            opened = committing = False
            try:
                async with self._engine.begin() as conn:
                    opened = True
                    try:
                        result, xid = await conn.run_sync(_unit_and_xid, fence, fn, args, kwargs)
                    except sa.exc.DBAPIError as exc:
                        if _lost_connection(exc) and attempt < DISCONNECT_RETRIES:
                            await conn.invalidate()
                            raise _Reconnect from exc
                        raise
                    committing = True
                return result
            except _Reconnect:
                pass
            except sa.exc.DBAPIError as exc:
                if not opened and _lost_connection(exc) and attempt < DISCONNECT_RETRIES:
                    pass  # dropped while the pool opened it: nothing of the unit ran
                elif not (committing and _lost_connection(exc)):
                    raise
                else:
                    with contextlib.suppress(Exception):
                        await conn.invalidate()
                    if xid is None:
                        return result  # it wrote nothing: what it read stands
                    status = await self._outcome(xid)
                    if status == "committed":
                        return result
                    if status != "aborted" or attempt == DISCONNECT_RETRIES:
                        raise  # unknown: running it again could act twice
            log.warning("the database connection was lost; running the unit again")
            await asyncio.sleep(DISCONNECT_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")

    async def _outcome(self, xid: int) -> str | None:
        """What became of transaction ``xid``: committed, aborted, or None when it cannot be
        told (the server stays away, or it no longer knows the id)."""
        for attempt in range(OUTCOME_TRIES):
            try:
                async with self._engine.connect() as conn:
                    status = (
                        await conn.execute(sa.text("SELECT txid_status(:xid)"), {"xid": xid})
                    ).scalar()
            except (sa.exc.DBAPIError, OSError):
                status = "unreachable"
            if status in ("committed", "aborted") or status is None:
                return status
            # in progress: the server is still ending the dropped backend's transaction
            await asyncio.sleep(DISCONNECT_BACKOFF_S * (attempt + 1))
        return None

    async def close(self) -> None:
        await self._engine.dispose()


def _unit_and_xid(
    conn: Connection, fence: Fence | None, fn: Callable[..., T], args: Any, kwargs: Any
) -> tuple[T, int | None]:
    """The unit's result and its transaction's id (None if it wrote nothing)."""
    conn.info[_WROTE] = False
    if fence is not None:  # a fleet's turn: nothing commits once its lease is gone
        result = _behind_fence(conn, fence, fn, args, kwargs)
    else:
        result = fn(conn, *args, **kwargs)
    if not conn.info.get(_WROTE):
        return result, None  # a read: nothing to look up, and no round trip spent on it
    xid = conn.execute(sa.text("SELECT txid_current_if_assigned()")).scalar()
    return result, None if xid is None else int(xid)


_WROTE = "chathub_unit_wrote"
_READ_ONLY = re.compile(r"\s*(SELECT|WITH|SHOW)\b", re.IGNORECASE)
_WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)


def _note_writes(
    conn: Connection, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
) -> None:
    """Mark a unit that may write (a false alarm costs one round trip at its end)."""
    if not _READ_ONLY.match(statement) or _WRITES.search(statement):
        conn.info[_WROTE] = True


def _lost_connection(exc: sa.exc.DBAPIError) -> bool:
    """The unit's connection is gone: invalidated by SQLAlchemy, closed under asyncpg, or
    left by asyncpg in a state it cannot continue from after the server dropped it."""
    if exc.connection_invalidated:
        return True
    text = str(exc.orig)
    return (
        "underlying connection is closed" in text
        or "connection was closed in the middle of operation" in text
        or ("another operation" in text and "in progress" in text)
    )


class _Reconnect(Exception):
    """A unit of work lost its connection before committing: run it again."""


def _behind_fence(
    conn: Connection, fence: Fence, fn: Callable[..., T], args: Any, kwargs: Any
) -> T:
    fence(conn)
    return fn(conn, *args, **kwargs)


def _enable_wal(cursor: Any) -> None:
    # Switching to WAL needs an exclusive lock and SQLite may refuse it at once, without the
    # busy handler, while another process (starting at the same time) holds the file.
    # WAL is persistent, so once anyone has switched the file there is nothing left to do.
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except cursor.connection.OperationalError:  # (sqlite3's or another driver's)
            mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() == "wal":
                return
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # The sqlite3 module's own transaction handling begins a transaction only before
    # INSERT/UPDATE/DELETE, so DDL (a migration) and reads ran outside any transaction and a
    # failed migration stayed half-applied. Turn it off; ``_sqlite_begin`` starts each one.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    _enable_wal(cursor)
    # NORMAL in WAL mode survives a process crash (kill -9); only power loss can drop
    # the last commits.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
    _load_sqlite_vec(dbapi_conn)


def _load_sqlite_vec(dbapi_conn: Any) -> None:
    """Load the sqlite-vec extension (vector search for memory) where the driver can.

    CPython's ``sqlite3`` can load extensions only when built with them (``pyenv``'s
    default build cannot); without it memory ranks vectors in Python instead.
    """
    if not hasattr(dbapi_conn, "enable_load_extension"):
        return
    try:
        import sqlite_vec
    except ImportError:
        return
    try:
        dbapi_conn.enable_load_extension(True)
        sqlite_vec.load(dbapi_conn)
    except Exception as exc:  # a missing or foreign-architecture build: Python ranks instead
        log.warning("sqlite-vec did not load (%s); vectors are ranked in Python", exc)
    finally:
        dbapi_conn.enable_load_extension(False)


def _sqlite_begin(conn: Connection) -> None:
    # IMMEDIATE takes the write lock up front, so a unit that reads then writes waits out
    # another process's writer (busy timeout) instead of failing with SQLITE_BUSY at the
    # write. One connection per process, so nothing in-process ever waits on it.
    conn.connection.driver_connection.execute("BEGIN IMMEDIATE")


def connect(url: str) -> Database:
    """A ``Database`` for ``sqlite[+aiosqlite]:///path`` or ``postgresql+asyncpg://...``."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return SqliteDatabase(parsed.database or ":memory:")
    if backend == "postgresql":
        if parsed.get_driver_name() != "asyncpg":
            url = parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
        return AsyncEngineDatabase(url)
    raise ValueError(f"unsupported database URL scheme {parsed.drivername!r}")


async def migrate(db: Database, layers: Sequence[Layer] = (ENGINE,)) -> int:
    """Apply the pending migrations of ``layers`` in version order; return the highest
    version now applied.

    Without ``layers``: the engine's own (the service passes ``bot.schema.LAYERS``). Only
    what is pending imports Alembic and the migration modules; an up-to-date database
    costs a look at ``schema_version`` (does it exist, then its rows).
    """
    return await db.run(_migrate, discover(layers), tuple(layers))


def _migrate(conn: Connection, migrations: Sequence[Migration], layers: Sequence[Layer]) -> int:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
    existing = set(sa.inspect(conn).get_table_names())  # one look, for both questions
    if not existing and _created_whole(conn, migrations, layers):
        return max((m.version for m in migrations), default=0)
    applied = _applied(conn, "schema_version" in existing)
    pending = _pending(migrations, frozenset(layer.name for layer in layers), applied)
    if pending:
        from alembic.operations import Operations
        from alembic.runtime.migration import MigrationContext

        ops = Operations(MigrationContext.configure(conn))
        for migration in pending:
            log.info(
                "applying migration %04d %s (%s)",
                migration.version,
                migration.name,
                migration.layer,
            )
            migration.upgrade(ops)
            conn.execute(
                _version_table.insert().values(
                    version=migration.version, name=migration.name, layer=migration.layer
                )
            )
    return max([*applied, *(m.version for m in pending)], default=0)


def _created_whole(
    conn: Connection, migrations: Sequence[Migration], layers: Sequence[Layer]
) -> bool:
    """A database without a single table (the caller looked) gets every layer's tables as
    their migrations leave them, in one ``create_all``, and every migration recorded: the
    first start costs neither Alembic nor the migration modules (about 12 MB and 0.1 s).
    tests/engine/store/test_fresh_schema.py holds the two ways to the same schema."""
    if not layers or any(not layer.tables for layer in layers):
        return False
    tables, seeds = [], []
    for layer in layers:
        module = importlib.import_module(str(layer.tables))
        tables += [t for t in vars(module).values() if isinstance(t, sa.Table)]
        if callable(getattr(module, "seed_rows", None)):
            seeds.append(module.seed_rows)
    log.info("a new database: creating %d tables", len(tables))
    tables[0].metadata.create_all(conn, tables=tables, checkfirst=False)  # it has none
    for seed in seeds:
        seed(conn)
    _version_table.create(conn)
    if migrations:
        conn.execute(
            _version_table.insert(),
            [{"version": m.version, "name": m.name, "layer": m.layer} for m in migrations],
        )
    return True


def _applied(conn: Connection, recorded: bool) -> dict[int, str | None]:
    """The recorded migrations, version → layer (None: recorded before the layers);
    ``recorded``: the database has a ``schema_version`` table."""
    if not recorded:
        _version_table.create(conn)
        return {}
    result = conn.execute(sa.text("SELECT * FROM schema_version"))
    columns = result.keys()
    if "layer" not in columns:  # written by a chathub from before the layers
        result.close()
        conn.execute(sa.text("ALTER TABLE schema_version ADD COLUMN layer VARCHAR(64)"))
        return {int(v): None for v in conn.execute(sa.select(_version_table.c.version)).scalars()}
    return {int(row.version): row.layer for row in result}


def _pending(
    migrations: Sequence[Migration], layers: Collection[str], applied: Mapping[int, str | None]
) -> list[Migration]:
    """What is left to apply, in version order, after refusing a database from a newer
    chathub.

    Recorded versions are a set, never a high-water mark: a database migrated by fewer
    layers (the engine's alone, say) gets a later layer's lower numbers when that layer
    first runs. A recorded version of a layer that is not in ``layers`` is that layer's
    business and is left alone.
    """
    known = {m.version for m in migrations}
    newest = max(known, default=0)
    for version, layer in sorted(applied.items()):
        if version in known:
            continue
        ours = version > LAST_BEFORE_LAYERS if layer is None else layer in layers
        if ours:
            raise RuntimeError(
                f"database schema version {version} is newer than this chathub "
                f"(which knows up to {newest}): upgrade chathub"
            )
    return [m for m in migrations if m.version not in applied]


async def open_database(url: str, layers: Sequence[Layer] = (ENGINE,)) -> Database:
    """``connect`` and ``migrate`` (see there for ``layers``). A database that cannot be
    reached or made (PostgreSQL down, an SQLite path under a file) is a ``ConfigError``
    naming ``DATABASE_URL`` (until 2026-12-07 a traceback; found by review)."""
    try:
        db = connect(url)
    except OSError as exc:  # its folder cannot be made
        raise ConfigError(f"DATABASE_URL: cannot open the database ({_reason(exc)})") from exc
    try:
        await migrate(db, layers)
    except (OSError, sa.exc.DBAPIError) as exc:
        await db.close()
        raise ConfigError(f"DATABASE_URL: cannot open the database ({_reason(exc)})") from exc
    except BaseException:
        await db.close()
        raise
    return db


def _reason(exc: BaseException) -> str:
    """A database failure in a few words, without the statement or the password."""
    cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    lines = str(cause).splitlines()
    words = getattr(cause, "strerror", None) or (lines[0] if lines else "")
    return str(words or type(cause).__name__)[:200]
