"""Conversations memory leaves alone (``/memory off``): nothing indexed or derived while
off, no profile shown. Kept in ``memory_optouts``; read once at start, then cached.

An opt-out of a conversation covers the conversations inside it: a Discord channel's
threads, a Telegram group's topics, a Matrix room's threads (sources
``<kind>:<place>:<sub>`` under ``<kind>:<place>``). Until 2026-12-07 ``/memory off`` in
a channel said memory was off and every thread's words were still learned (found by
review)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import Database, insert_for, utcnow
from memory.tables import memory_optouts

__all__ = ["OptOuts", "covering", "opted_out_in"]


def covering(source: str) -> tuple[str, ...]:
    """``source`` and the conversation it is part of, if any: an opt-out of either covers
    it."""
    kind, _, rest = source.partition(":")
    place, inside, _sub = rest.partition(":")
    return (source, f"{kind}:{place}") if inside and place else (source,)


class OptOuts:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._sources: set[str] = set()

    async def load(self) -> None:
        self._sources = await self._db.run(_all)

    def __contains__(self, source: object) -> bool:
        return isinstance(source, str) and any(s in self._sources for s in covering(source))

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
        sa.select(memory_optouts.c.source).where(memory_optouts.c.source.in_(covering(source)))
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
