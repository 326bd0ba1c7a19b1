"""What the Telegram adapter keeps in the database: updates, people, cards, the outbox.

People and pairing codes are Telegram's own tables; its updates, cards and outbox rows
are the delivery layer's (``bot.delivery``), under the platform name ``telegram``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.delivery import CardStore, EventStore, OutboxStore
from bot.delivery.store import mark_handled_in as mark_event_handled_in
from bot.delivery.store import record_events_in
from bot.platform.pairing import (  # noqa: F401 (tests read them here)
    CODE_ALPHABET,
    CODE_LENGTH,
    CODE_TTL,
    MAX_PENDING_CODES,
    draw_code,
)
from bot.telegram.chat_moves import ChatMoves
from bot.telegram.tables import telegram_pairing, telegram_users
from engine.store import Database, SqliteDatabase, quick_unit, serialize, utcnow

__all__ = ["TELEGRAM", "PairingRow", "TelegramStore", "mark_handled_in"]

#: Telegram's name in the delivery layer's tables.
TELEGRAM = "telegram"

log = logging.getLogger(__name__)

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PairingRow:
    code: str
    user_id: int
    chat_id: int
    name: str
    created_at: datetime
    expires_at: datetime


class TelegramStore:
    def __init__(self, db: Database, *, process_id: str | None = None) -> None:
        """``process_id``: a fleet's process, recorded with each outbox row it writes."""
        self._db = db
        self.process_id = process_id
        self.events = EventStore(db, TELEGRAM)
        self.cards = CardStore(db, TELEGRAM)
        self.outbox = OutboxStore(db, TELEGRAM, process_id=process_id)
        self.moves = ChatMoves(db)

    # -- updates -------------------------------------------------------------------------

    async def record_updates(self, updates: Sequence[Json]) -> list[Json]:
        """Store updates not seen before (one commit); returns those, in update_id order."""
        return await self._db.run(_record_updates, list(updates))

    async def accept_polled(self, updates: Sequence[Json]) -> Callable[[], Awaitable[None]]:
        """Record polled updates; the returned ``durable()`` waits until they are committed.

        On SQLite the rows ride along with the next unit of work — for a message that is
        usually its turn's first commit, which stores the user row and marks the update
        handled in the same transaction: one commit fewer before the reply. One connection
        serialises all units, so nothing a handler writes can commit before them. Other
        back ends run units concurrently: there the rows commit before this returns.
        """
        if isinstance(self._db, SqliteDatabase):
            db, rider = self._db, self._db.ride_along(_record_updates, list(updates))
            return lambda: db.settle(rider)
        await self._db.run(_record_updates, list(updates))
        return _committed

    async def mark_handled(self, update_id: int) -> None:
        await self.events.mark_handled(str(update_id))

    async def unhandled(self) -> list[Json]:
        """Updates stored but never handled (the process died in between), oldest first."""
        return await self.events.unhandled()

    async def last_update_id(self) -> int | None:
        return await self.events.last_seq()

    # -- people --------------------------------------------------------------------------

    async def paired_users(self) -> set[int]:
        return await self._db.run(_paired_users)

    async def pair(self, user_id: int, name: str, paired_by: int | None) -> None:
        await self._db.run(_pair, user_id, name, paired_by)

    async def unpair(self, user_id: int) -> bool:
        return await self._db.run(_unpair, user_id)

    async def issue_code(
        self, user_id: int, chat_id: int, name: str, now: datetime | None = None
    ) -> tuple[PairingRow | None, bool]:
        """``(code, new)``: the user's pending code (reused), a new one, or ``None`` when
        ``MAX_PENDING_CODES`` other people are already waiting."""
        return await self._db.run(_issue_code, user_id, chat_id, name, now or utcnow())

    async def redeem(self, code: str, now: datetime | None = None) -> PairingRow | None:
        """Use a pending, unexpired code once; ``None`` when there is no such code."""
        return await self._db.run(_redeem, code.strip().upper(), now or utcnow())


_MAX_UPDATE_ID = 2**63 - 1


def distinct_updates(updates: Sequence[Json], from_id: int | None = None) -> list[Json]:
    """Updates with an integer id (``from_id`` or above), once each, in update_id order.

    An id that is not a plain integer (``true``), or does not fit the 64-bit column, is
    no update Telegram sends: it is dropped (logged) rather than failing the whole batch.
    """
    by_id: dict[int, Json] = {}
    for update in updates:
        update_id = update.get("update_id") if isinstance(update, dict) else None
        if type(update_id) is not int or not 0 <= update_id <= _MAX_UPDATE_ID:
            log.warning("dropped an update with an unusable update_id: %.80r", update_id)
            continue
        if from_id is None or update_id >= from_id:
            by_id.setdefault(update_id, update)
    return [by_id[k] for k in sorted(by_id)]


@quick_unit
def _record_updates(conn: Connection, updates: list[Json]) -> list[Json]:
    events = [(str(u["update_id"]), u["update_id"], u) for u in distinct_updates(updates)]
    return record_events_in(conn, TELEGRAM, events)


async def _committed() -> None:
    return None


def mark_handled_in(conn: Connection, update_id: int) -> None:
    """Mark an update handled inside another unit of work (the hub's queue push); raises
    ``EventAlreadyHandled`` when it already was, so one update makes one message."""
    mark_event_handled_in(conn, TELEGRAM, str(update_id))


def _paired_users(conn: Connection) -> set[int]:
    return set(conn.execute(sa.select(telegram_users.c.user_id)).scalars())


def _pair(conn: Connection, user_id: int, name: str, paired_by: int | None) -> None:
    if conn.execute(
        sa.select(telegram_users.c.user_id).where(telegram_users.c.user_id == user_id)
    ).first():
        return
    conn.execute(
        telegram_users.insert().values(
            user_id=user_id, name=name, paired_by=paired_by, paired_at=utcnow()
        )
    )


def _unpair(conn: Connection, user_id: int) -> bool:
    return (
        conn.execute(telegram_users.delete().where(telegram_users.c.user_id == user_id)).rowcount
        > 0
    )


def _pairing_row(row: sa.Row) -> PairingRow:
    return PairingRow(row.code, row.user_id, row.chat_id, row.name, row.created_at, row.expires_at)


def _issue_code(
    conn: Connection, user_id: int, chat_id: int, name: str, now: datetime
) -> tuple[PairingRow | None, bool]:
    p = telegram_pairing
    serialize(conn, "pairing")  # count-then-insert must not interleave across workers
    live = sa.and_(p.c.used_at.is_(None), p.c.expires_at > now)
    mine = conn.execute(sa.select(p).where(live, p.c.user_id == user_id)).first()
    if mine is not None:
        return _pairing_row(mine), False
    waiting = conn.execute(sa.select(sa.func.count()).select_from(p).where(live)).scalar_one()
    if waiting >= MAX_PENDING_CODES:
        return None, False
    code = draw_code(conn, p.c.code)
    row = PairingRow(code, user_id, chat_id, name, now, now + CODE_TTL)
    conn.execute(p.insert().values(**{k: getattr(row, k) for k in row.__slots__}))
    return row, True


def _redeem(conn: Connection, code: str, now: datetime) -> PairingRow | None:
    p = telegram_pairing
    row = conn.execute(
        sa.select(p).where(p.c.code == code, p.c.used_at.is_(None), p.c.expires_at > now)
    ).first()
    if row is None:
        return None
    conn.execute(p.update().where(p.c.code == code).values(used_at=now))
    return _pairing_row(row)
