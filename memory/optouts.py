"""Conversations memory leaves alone (``/memory off``): nothing indexed or derived while
off, no profile shown. Kept in ``memory_optouts``; read once at start, then cached."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import Database, insert_for, utcnow
from memory.tables import memory_optouts

__all__ = ["OptOuts", "opted_out_in"]


class OptOuts:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._sources: set[str] = set()

    async def load(self) -> None:
        self._sources = await self._db.run(_all)

    def __contains__(self, source: object) -> bool:
        return source in self._sources

    async def set(self, source: str, *, opted_out: bool) -> None:
        await self._db.run(_set, source, opted_out)
        if opted_out:
            self._sources.add(source)
        else:
            self._sources.discard(source)


def opted_out_in(conn: Connection, source: str) -> bool:
    """Whether ``source`` is opted out, read inside a caller's transaction (the indexer's,
    the deriver's: another process may have switched it)."""
    found = conn.execute(
        sa.select(memory_optouts.c.source).where(memory_optouts.c.source == source)
    ).first()
    return found is not None


def _all(conn: Connection) -> set[str]:
    return set(conn.execute(sa.select(memory_optouts.c.source)).scalars())


def _set(conn: Connection, source: str, opted_out: bool) -> None:
    if opted_out:
        conn.execute(
            insert_for(conn.dialect.name, memory_optouts)
            .values(source=source, created_at=utcnow())
            .on_conflict_do_nothing()
        )
    else:
        conn.execute(memory_optouts.delete().where(memory_optouts.c.source == source))
