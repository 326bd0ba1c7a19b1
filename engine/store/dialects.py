"""Dialect-specific statements (``INSERT ... ON CONFLICT``, PostgreSQL's transaction
locks), built for the dialect in use.

Importing ``sqlalchemy.dialects.postgresql`` costs about 2 MB and 20 ms; a SQLite service
never needs it, so the dialect's module loads when a statement is first built for it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

__all__ = ["PerDialect", "insert_for", "serialize"]

T = TypeVar("T")


def insert_for(dialect: str, table: sa.Table) -> Any:
    """The dialect's own ``insert(table)`` (it has ``on_conflict_do_nothing``)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


class PerDialect(dict[str, T]):
    """A statement per dialect name, built on first use for that dialect."""

    def __init__(self, build: Callable[[str], T]) -> None:
        super().__init__()
        self._build = build

    def __missing__(self, dialect: str) -> T:
        value = self[dialect] = self._build(dialect)
        return value


def serialize(conn: Connection, name: str) -> None:
    """Hold a transaction-scoped lock named ``name`` on PostgreSQL (SQLite's writer lock
    already serialises every unit of work).

    A name of up to 8 bytes is its own key (Telegram's ``pairing`` keeps the key it always
    had); a longer one is keyed by its hash, so ``pairing:discord`` and ``pairing:slack``
    are two locks.
    """
    if conn.dialect.name == "postgresql":
        raw = name.encode()
        if len(raw) > 8:
            raw = hashlib.blake2b(raw, digest_size=8).digest()
        key = int.from_bytes(raw.ljust(8, b"\0"), "big") & 0x7FFF_FFFF_FFFF_FFFF
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
