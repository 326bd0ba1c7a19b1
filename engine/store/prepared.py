"""Hot-path statements compiled once and, on SQLite, run on the driver's cursor.

SQLAlchemy's execution path (execution context, events, result metadata, parameter
construction) costs 80-110 µs per statement on this 2-core machine against ~15 µs for the
cursor call itself, and a Telegram reply waits on a handful of statements
(bench/telegram_e2e.py). A ``Prepared`` statement keeps SQLAlchemy's own SQL, parameter order
and type conversions (the bind processors of the connection's dialect), so what is stored is
byte for byte what ``Connection.execute`` would store; it only skips the machinery around
them. It runs inside the unit of work's transaction, on the same connection. Other dialects
(PostgreSQL) execute the statement the ordinary way.

Only INSERT/UPDATE/DELETE statements without Python-side defaults or RETURNING qualify
(checked when a statement is first compiled).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

__all__ = ["Prepared", "Written"]

Params = Mapping[str, Any]
_Binder = tuple[str, Any, Callable[[Any], Any] | None]  # key, constant, bind processor


class Written(NamedTuple):
    rowcount: int
    #: The primary key of the row an INSERT added (``None`` when it added none).
    primary_key: int | None


class _Plan(NamedTuple):
    sql: str
    binders: tuple[_Binder, ...]
    is_insert: bool


_REQUIRED = object()


class Prepared:
    """One DML statement; ``execute`` / ``executemany`` inside a unit of work."""

    __slots__ = ("_plans", "statement")

    def __init__(self, statement: sa.Executable) -> None:
        self.statement = statement
        self._plans: dict[tuple[Dialect, tuple[str, ...]], _Plan] = {}

    def execute(self, conn: Connection, params: Params) -> Written:
        if conn.dialect.name != "sqlite":
            result = conn.execute(self.statement, dict(params))
            key = None
            if result.rowcount == 1 and getattr(result.context, "isinsert", False):
                key = result.inserted_primary_key[0]
            return Written(result.rowcount, key)
        plan = self._plan(conn.dialect, tuple(params))
        values = _bind(plan.binders, params)
        cursor = _run(conn, plan.sql, values, lambda c: c.execute(plan.sql, values))
        added = plan.is_insert and cursor.rowcount == 1
        return Written(cursor.rowcount, cursor.lastrowid if added else None)

    def insert(self, conn: Connection, params: Params) -> int:
        """Run an INSERT that must add its row; the new row's primary key."""
        written = self.execute(conn, params)
        if written.primary_key is None:
            raise RuntimeError(f"no row inserted by {self.statement}")
        return written.primary_key

    def executemany(self, conn: Connection, rows: Sequence[Params]) -> None:
        if not rows:
            return
        if conn.dialect.name != "sqlite":
            conn.execute(self.statement, [dict(row) for row in rows])
            return
        plan = self._plan(conn.dialect, tuple(rows[0]))
        values = [_bind(plan.binders, row) for row in rows]
        _run(conn, plan.sql, values, lambda c: c.executemany(plan.sql, values))

    def _plan(self, dialect: Dialect, keys: tuple[str, ...]) -> _Plan:
        plan = self._plans.get((dialect, keys))
        if plan is None:
            plan = self._plans[(dialect, keys)] = _compile(self.statement, dialect, keys)
        return plan


def _compile(statement: sa.Executable, dialect: Dialect, keys: tuple[str, ...]) -> _Plan:
    compiled: Any = statement.compile(dialect=dialect, column_keys=list(keys))
    if not (compiled.isinsert or compiled.isupdate or compiled.isdelete):
        raise TypeError("Prepared takes INSERT, UPDATE or DELETE statements")
    if compiled.insert_prefetch or compiled.update_prefetch or compiled.effective_returning:
        raise TypeError("Prepared statements cannot have Python-side defaults or RETURNING")
    binders = []
    for name in compiled.positiontup:
        bind = compiled.binds[name]
        if bind.callable is not None:
            raise TypeError("Prepared statements cannot have bind parameters with callables")
        constant = _REQUIRED if bind.required or name in keys else bind.value
        # What the compiled statement binds with: the dialect's form of the type.
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        binders.append((name, constant, process))
    return _Plan(compiled.string, tuple(binders), bool(compiled.isinsert))


def _bind(binders: tuple[_Binder, ...], params: Params) -> list[Any]:
    values = []
    for key, constant, process in binders:
        value = params[key] if constant is _REQUIRED else constant
        values.append(value if process is None else process(value))
    return values


def _run(
    conn: Connection, sql: str, values: Any, call: Callable[[sqlite3.Cursor], Any]
) -> sqlite3.Cursor:
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        call(cursor)
    except sqlite3.Error as exc:  # the same exception classes callers get from SQLAlchemy
        error = sa.exc.DBAPIError.instance(sql, values, exc, sqlite3.Error, dialect=conn.dialect)
        raise error from exc
    return cursor
