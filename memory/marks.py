"""``Marks``: how far a memory consumer got, per key, with the failures of its next batch.

The deriver (per session: messages read for facts) and the embedder (per embedding model:
documents embedded) work the same way. A batch is read past the key's mark; the slow part
(a model call) runs outside any transaction; its result and the moved mark commit together,
the mark moved by a compare-and-set from where the batch was read, so of two processes
only the first stores a batch. A failed attempt is counted on the mark, and after
``max_failures`` the batch is passed over (the mark moves past it), so one bad batch never
blocks the rest. The indexer keeps marks of its own: its work is a copy within the database
that cannot fail like a call, and two processes writing one document keep it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import insert_for, utcnow

__all__ = ["Mark", "Marks"]


@dataclass(frozen=True, slots=True)
class Mark:
    """A key's mark as read: the last id done, and the failed attempts past it."""

    at: int
    failures: int


class Marks:
    """The marks of one table: ``key`` names what is consumed, ``position`` how far."""

    def __init__(self, table: sa.Table, key: str, position: str) -> None:
        self._table = table
        self._key = table.c[key]
        self._position = table.c[position]

    def read(self, conn: Connection, key: Any) -> Mark:
        """``key``'s mark (created at 0 the first time, so moving it is always an update)."""
        conn.execute(
            insert_for(conn.dialect.name, self._table)
            .values(
                {self._key.name: key, self._position.name: 0, "failures": 0, "updated_at": utcnow()}
            )
            .on_conflict_do_nothing(index_elements=[self._key.name])
        )
        row = conn.execute(
            sa.select(self._position, self._table.c.failures).where(self._key == key)
        ).one()
        return Mark(int(row[0]), int(row[1]))

    def move(self, conn: Connection, key: Any, read_at: int, to: int) -> bool:
        """Past a batch read at ``read_at``, if nobody moved the mark since (True)."""
        moved = conn.execute(
            self._table.update()
            .where(self._key == key, self._position == read_at)
            .values({self._position.name: to, "failures": 0, "updated_at": utcnow()})
        )
        return bool(moved.rowcount)

    def fail(self, conn: Connection, key: Any, read_at: int, to: int, max_failures: int) -> bool:
        """One more failed attempt at the batch read at ``read_at`` (ending at ``to``); at
        ``max_failures`` it is passed over: True when that moved the mark."""
        here = sa.and_(self._key == key, self._position == read_at)
        failures = conn.execute(sa.select(self._table.c.failures).where(here)).scalar()
        if failures is None:
            return False  # the mark moved meanwhile
        if int(failures) + 1 >= max_failures:
            return self.move(conn, key, read_at, to)
        conn.execute(
            self._table.update()
            .where(here)
            .values(failures=self._table.c.failures + 1, updated_at=utcnow())
        )
        return False
