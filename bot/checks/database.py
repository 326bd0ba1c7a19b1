"""The database: reachable, writable, schema current; PostgreSQL's version when used.

Nothing is changed: the write probe creates a table inside a transaction that is then
rolled back, and migrations are counted, never applied (``chathub serve`` applies them
at start). A SQLite file that does not exist yet is fine when its directory can be made:
the first start creates it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, make_url

from bot.checks.result import Check
from bot.schema import LAYERS
from engine.store import connect, discover

__all__ = ["MIN_POSTGRES", "check_database", "missing_sqlite_file"]

log = logging.getLogger(__name__)

#: The oldest PostgreSQL accepted: older majors are past their community support.
MIN_POSTGRES = 13


@dataclass(frozen=True, slots=True)
class _Found:
    version: int
    postgres: int | None  # server_version_num, e.g. 160002


class _RolledBack(Exception):
    """Raised after the write probe so the unit's transaction is rolled back."""

    def __init__(self, found: _Found) -> None:
        self.found = found


def _probe(conn: Connection) -> None:
    tables = sa.inspect(conn).get_table_names()
    version = 0
    if "schema_version" in tables:
        version = conn.execute(sa.text("SELECT MAX(version) FROM schema_version")).scalar() or 0
    postgres = None
    if conn.dialect.name == "postgresql":
        postgres = int(conn.execute(sa.text("SHOW server_version_num")).scalar() or 0)
    conn.execute(sa.text("CREATE TABLE chathub_doctor_probe (x INTEGER)"))
    raise _RolledBack(_Found(int(version), postgres))


async def check_database(url: str, *, timeout_s: float = 10.0) -> list[Check]:
    shown = make_url(url).render_as_string(hide_password=True)
    missing = missing_sqlite_file(url)
    if missing is not None:
        return [_not_created(missing)]
    db = None
    try:
        db = connect(url)
        await asyncio.wait_for(db.run(_probe), timeout_s)
    except _RolledBack as done:
        return _report(shown, done.found)
    except TimeoutError:
        return [_fail(f"the database at {shown} did not answer within {timeout_s:g} s")]
    except Exception as exc:  # any driver's failure: one sentence here, details in the log
        log.info("database check failed: %s: %s", type(exc).__name__, exc)
        text = str(exc).lower()
        if "readonly" in text or "read-only" in text or "permission denied" in text:
            return [
                Check(
                    "database",
                    False,
                    f"the database at {shown} can be read but not written",
                    "give the user running chathub write access to the database "
                    "(and, for SQLite, to its directory)",
                )
            ]
        return [_fail(f"the database at {shown} cannot be reached or opened")]
    finally:
        if db is not None:
            await db.close()
    raise AssertionError("the probe always ends by rolling back")


def missing_sqlite_file(url: str) -> Path | None:
    """The SQLite file ``url`` names when it does not exist (``connect`` would create it)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = Path(parsed.database or "")
    return None if path.exists() else path


def _fail(summary: str) -> Check:
    return Check("database", False, summary, "check DATABASE_URL and that the database is up")


def _not_created(path: Path) -> Check:
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if os.access(parent, os.W_OK):
        return Check("database", True, f"database {path} will be created at the first start")
    return Check(
        "database",
        False,
        f"database {path} does not exist and {parent} is not writable",
        "point DATABASE_URL at a writable place, or make that directory writable",
    )


def _report(shown: str, found: _Found) -> list[Check]:
    known = max(m.version for m in discover(LAYERS))
    checks = []
    if found.version > known:
        checks.append(
            Check(
                "database",
                False,
                f"the database at {shown} has schema {found.version}, newer than this "
                f"chathub (which knows {known})",
                "upgrade chathub to the version that wrote this database",
            )
        )
    elif 0 < found.version < known:
        checks.append(
            Check(
                "database",
                False,
                f"the database at {shown} has schema {found.version} of {known}",
                "restart `chathub serve`: it applies the missing migrations at start",
            )
        )
    else:
        state = "schema current" if found.version else "empty; created at the first start"
        checks.append(Check("database", True, f"database {shown} is writable, {state}"))
    if found.postgres is not None:
        major = found.postgres // 10_000
        ok = major >= MIN_POSTGRES
        checks.append(
            Check(
                "database.postgres",
                ok,
                f"PostgreSQL {major}" + ("" if ok else f" is older than {MIN_POSTGRES}"),
                "" if ok else f"upgrade PostgreSQL to {MIN_POSTGRES} or newer",
            )
        )
    return checks
