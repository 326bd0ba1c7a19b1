"""Incoming events for the tic (the HTTP API, MCP server notifications) and notify dedupe."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.hub import NoticeWithdrawn
from engine.store import Database, utcnow
from scheduler.tables import events as e
from scheduler.tables import notification_log

__all__ = ["Event", "EventStore", "NoticeTold", "fingerprint", "record_notice"]


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    source: str
    type: str
    payload: Any
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "type": self.type,
            "payload": self.payload,
            "received_at": self.created_at.isoformat(),
        }


class EventStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, source: str, type_: str, payload: Any) -> int:
        return await self._db.run(_add, source, type_, payload)

    async def take(self, limit: int = 50) -> list[Event]:
        """The oldest unprocessed events, leased to the taker in the same transaction for
        ``TAKE_LEASE`` (``processed_at`` while ``processed`` is false): ``done`` once read,
        ``give_back`` when the reading failed; a taker that died leaves them to the next
        take after the lease."""
        return await self._db.run(_take, limit)

    async def renew(self, ids: list[int]) -> None:
        """The lease of taken events renewed while it holds (a turn that outlasts it)."""
        await self._db.run(_renew, ids)

    async def done(self, ids: list[int]) -> None:
        """Events read: never taken again."""
        await self._db.run(_done, ids)

    async def give_back(self, ids: list[int]) -> None:
        """Events whose reading failed: the next take has them again."""
        await self._db.run(_give_back, ids)

    async def unprocessed_count(self) -> int:
        return await self._db.run(_unprocessed_count)

    async def first_notice(self, event_type: str, summary: str, window: timedelta) -> bool:
        """Record a notification; False when the same one was recorded within ``window``."""
        return await self._db.run(_first_notice, fingerprint(event_type, summary), window)

    async def told_within(self, digest: str, window: timedelta) -> bool:
        """Whether the notification ``digest`` was recorded within ``window`` (not recorded)."""
        return await self._db.run(_told_within, digest, window)


def fingerprint(event_type: str, summary: str) -> str:
    """The dedupe key of a notification: its event type and summary."""
    return hashlib.sha256(f"{event_type}\0{summary.strip()}".encode()).hexdigest()


class NoticeTold(NoticeWithdrawn):
    """The same notification was stored in a chat within the window (another process's
    tic told it first): the notice that would tell it again rolls back."""


def record_notice(conn: Connection, digest: str, window: timedelta) -> None:
    """A notification's dedupe record, in the transaction that stores it in the chat (a
    notice lost before it was stored leaves no record refusing it for a day)."""
    if not _first_notice(conn, digest, window):
        raise NoticeTold(f"notification {digest[:12]} was told within {window}")


def _add(conn: Connection, source: str, type_: str, payload: Any) -> int:
    inserted = conn.execute(
        e.insert().values(source=source, type=type_, payload=payload, created_at=utcnow())
    )
    return inserted.inserted_primary_key[0]


#: How long taken events are the taker's: a tic that died with them (kill -9) leaves them
#: to a later tic after this.
TAKE_LEASE = timedelta(minutes=10)


def _take(conn: Connection, limit: int, lease: timedelta = TAKE_LEASE) -> list[Event]:
    """The oldest unprocessed events not leased to another taker, leased to this one: only
    those this statement moved (two tics taking at once, a fleet's, each get their own)."""
    now = utcnow()
    free = sa.and_(
        e.c.processed.is_(False),
        sa.or_(e.c.processed_at.is_(None), e.c.processed_at <= now - lease),
    )
    ids = [
        row.id for row in conn.execute(sa.select(e.c.id).where(free).order_by(e.c.id).limit(limit))
    ]
    if not ids:
        return []
    taken = conn.execute(
        e.update()
        .where(e.c.id.in_(ids), free)
        .values(processed_at=now)
        .returning(e.c.id, e.c.source, e.c.type, e.c.payload, e.c.created_at)
    ).all()
    return sorted((Event(*row) for row in taken), key=lambda event: event.id)


def _renew(conn: Connection, ids: list[int], lease: timedelta = TAKE_LEASE) -> None:
    now = utcnow()
    conn.execute(
        e.update()
        .where(e.c.id.in_(ids), e.c.processed.is_(False), e.c.processed_at > now - lease)
        .values(processed_at=now)
    )


def _done(conn: Connection, ids: list[int]) -> None:
    conn.execute(e.update().where(e.c.id.in_(ids)).values(processed=True, processed_at=utcnow()))


def _give_back(conn: Connection, ids: list[int]) -> None:
    conn.execute(
        e.update().where(e.c.id.in_(ids), e.c.processed.is_(False)).values(processed_at=None)
    )


def _unprocessed_count(conn: Connection) -> int:
    return conn.execute(
        sa.select(sa.func.count()).select_from(e).where(e.c.processed.is_(False))
    ).scalar_one()


_NOTICE_LOCK = sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:digest, 0))")


def _told_within(conn: Connection, digest: str, window: timedelta) -> bool:
    n = notification_log
    seen = sa.select(n.c.id).where(n.c.fingerprint == digest, n.c.created_at > utcnow() - window)
    return conn.execute(seen).first() is not None


def _first_notice(conn: Connection, digest: str, window: timedelta) -> bool:
    if conn.dialect.name == "postgresql":
        # Two processes' tics telling the same thing at once both read nothing and both
        # sent (found by review on 2026-12-06): the second waits for the first's commit.
        # SQLite's transactions (BEGIN IMMEDIATE) are one at a time already.
        conn.execute(_NOTICE_LOCK, {"digest": digest})
    if _told_within(conn, digest, window):
        return False
    conn.execute(notification_log.insert().values(fingerprint=digest, created_at=utcnow()))
    return True
