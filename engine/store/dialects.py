"""Dialect-specific statements (``INSERT ... ON CONFLICT``), built for the dialect in use.

Importing ``sqlalchemy.dialects.postgresql`` costs about 2 MB and 20 ms; a SQLite service
never needs it, so the dialect's module loads when a statement is first built for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa

__all__ = ["PerDialect", "insert_for"]

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
