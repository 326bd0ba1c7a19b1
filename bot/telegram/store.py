"""What the Telegram adapter keeps in the database: updates, people, cards, the outbox."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.telegram.tables import (
    telegram_cards,
    telegram_outbox,
    telegram_pairing,
    telegram_updates,
    telegram_users,
)
from engine.store.db import Database, SqliteDatabase, quick_unit
from engine.store.dialects import PerDialect, insert_for
from engine.store.leases import PROCESS_LEASE_PREFIX, db_now_sql
from engine.store.prepared import Prepared
from engine.store.schema import chat_history as h
from engine.store.schema import chat_llm_tools as t
from engine.store.schema import chat_sessions_stack as f
from engine.store.schema import leases, sources, utcnow

__all__ = [
    "CardRow",
    "DeliverySummary",
    "OutboxRow",
    "PairingRow",
    "TelegramStore",
    "WaitingDelivery",
    "delivery_summary",
]

log = logging.getLogger(__name__)

Json = dict[str, Any]

# No 0/O or 1/I/L: a code read aloud or retyped from a phone should not be ambiguous.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
CODE_TTL = timedelta(hours=24)
MAX_PENDING_CODES = 3


@dataclass(frozen=True, slots=True)
class PairingRow:
    code: str
    user_id: int
    chat_id: int
    name: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class CardRow:
    tool_call_id: int
    kind: str
    source: str
    chat_id: int
    message_id: int | None
    text: str
    entities: list[Json] | None
    state: str


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    chat_id: int
    dedupe_key: str
    payload: Json
    status: str
    attempts: int
    message_id: int | None
    error: str | None = None
    #: When a postponed delivery is due again; ``None`` while its recorder is sending it.
    next_attempt_at: datetime | None = None
    #: Not stored: when this process took the row to send it, on its fleet tenure's clock
    #: (``Outbound``); ``None`` outside a fleet.
    taken_at: float | None = field(default=None, metadata={"stored": False})


#: The stored columns of ``OutboxRow``, in its order.
_OUTBOX_FIELDS = tuple(f.name for f in fields(OutboxRow) if f.metadata.get("stored", True))


@dataclass(frozen=True, slots=True)
class WaitingDelivery:
    """A delivery postponed by Telegram or the network, as the web inbox lists it."""

    id: int
    chat_id: int
    attempts: int
    error: str | None
    created_at: datetime
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None


@dataclass(frozen=True, slots=True)
class DeliverySummary:
    """The outbox at a glance (``/metrics``, the web inbox)."""

    waiting: int  # pending after at least one failed attempt
    failed: int  # given up: blocked, chat gone, a request Telegram refuses
    sent: int
    oldest_waiting_at: datetime | None
    rows: tuple[WaitingDelivery, ...]  # the oldest waiting ones, at most ``limit``


class TelegramStore:
    def __init__(self, db: Database, *, process_id: str | None = None) -> None:
        """``process_id``: a fleet's process, recorded with each outbox row it writes."""
        self._db = db
        self.process_id = process_id

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
        await self._db.run(_mark_handled, update_id)

    async def unhandled(self) -> list[Json]:
        """Updates stored but never handled (the process died in between), oldest first."""
        return await self._db.run(_unhandled)

    async def last_update_id(self) -> int | None:
        return await self._db.run(_last_update_id)

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

    # -- cards ---------------------------------------------------------------------------

    async def save_card(self, card: CardRow) -> None:
        await self._db.run(_save_card, card)

    async def card(self, tool_call_id: int) -> CardRow | None:
        return await self._db.run(_card, tool_call_id)

    async def card_at(self, chat_id: int, message_id: int) -> CardRow | None:
        return await self._db.run(_card_at, chat_id, message_id)

    async def close_card(self, tool_call_id: int, state: str) -> bool:
        """Mark an open card closed; False when it was not open (someone else closed it)."""
        return await self._db.run(_close_card, tool_call_id, state)

    async def open_cards(self, source: str | None = None) -> list[CardRow]:
        return await self._db.run(_open_cards, source)

    # -- outbox --------------------------------------------------------------------------

    async def enqueue(self, chat_id: int, dedupe_key: str, payload: Json) -> OutboxRow | None:
        """Record a message to deliver; ``None`` when that key was enqueued before."""
        return await self._db.run(_enqueue, chat_id, dedupe_key, payload, self.process_id)

    async def has_key(self, dedupe_key: str) -> bool:
        return await self._db.run(_has_key, dedupe_key)

    async def pending_outbox(self) -> list[OutboxRow]:
        return await self._db.run(_pending_outbox)

    async def mark_sent(self, outbox_id: int, message_id: int | None) -> None:
        await self.mark_sent_many([(outbox_id, message_id)])

    async def mark_sent_many(self, sent: Sequence[tuple[int, int | None]]) -> None:
        """``(outbox id, Telegram message id)`` pairs, in one transaction."""
        if sent:
            await self._db.run(_mark_sent_many, list(sent))

    async def undelivered_finals(self) -> list[tuple[str, int, str]]:
        """``(source, message_id, content)`` of Telegram answers never put in the outbox.

        The process died between storing an answer and recording its delivery; each
        answer's first chunk has the key ``final:<message id>:0``.
        """
        return await self._db.run(_undelivered_finals)

    async def mark_failed(self, outbox_id: int, error: str) -> None:
        await self._db.run(_mark_outbox, outbox_id, "failed", None, error[:2000])

    async def postpone(
        self, outbox_id: int, error: str, tried_at: datetime, next_attempt_at: datetime
    ) -> None:
        """One more failed attempt: pending, due again at ``next_attempt_at``."""
        await self._db.run(_postpone, outbox_id, error[:2000], tried_at, next_attempt_at)

    async def reschedule(self, outbox_ids: Sequence[int], next_attempt_at: datetime) -> None:
        """Claimed rows not tried after all (an earlier one of their chat failed)."""
        if outbox_ids:
            await self._db.run(_reschedule, list(outbox_ids), next_attempt_at)

    async def recover_outbox(self, now: datetime) -> int:
        """At start: every pending delivery is due now (unsent by a process that died,
        postponed, or claimed by a retry that never finished); returns how many."""
        return await self._db.run(_recover_outbox, now)

    async def recover_orphans(self, now: datetime, stranded: Collection[int] = ()) -> int:
        """A fleet's: rows in flight with a process that is no fleet member now (it died,
        or was paused past its membership lease), and ``stranded`` rows of this process,
        are due at ``now``. Membership is read in the same statement, by the database's
        clock: a process that joined again meanwhile keeps what it took since."""
        if self.process_id is None:
            raise RuntimeError("recovering a fleet's orphans needs the process's id")
        return await self._db.run(_recover_orphans, now, self.process_id, list(stranded))

    async def claim_due(
        self, now: datetime, lease_until: datetime, limit: int = 50
    ) -> list[OutboxRow]:
        """Pending rows due by ``now``, oldest first, each claimed for sending.

        The claim is conditional (still pending, still due), so two claimers never both get
        a row. A single process moves a claimed row to ``lease_until``: a claim never
        settled (a crash mid-send) is due again then, or at the next start. A fleet's
        process takes it in flight as its own (``sending_by``), as if it had recorded it:
        when it dies, ``recover_orphans`` makes the row due again within a lease.
        """
        return await self._db.run(_claim_due, now, lease_until, limit, self.process_id)

    async def release(self, outbox_id: int, now: datetime) -> bool:
        """A fleet's: hand back a row this process took and no longer may send (its
        membership lapsed): due at ``now`` for any process, unless another took it meanwhile."""
        return await self._db.run(_release, outbox_id, self.process_id, now)

    async def next_attempt_at(self) -> datetime | None:
        """When the earliest postponed delivery is due; ``None`` when none waits."""
        return await self._db.run(_next_attempt_at)

    async def delivery_summary(self, limit: int = 10) -> DeliverySummary:
        return await self._db.run(delivery_summary, limit)


# The statements on every message's path, built once: building an expression costs
# several times executing it (bench/telegram_e2e.py's breakdown).
# Insert-if-new: the statement's row count tells a fresh update from a redelivered one.
_INSERT_UPDATE = PerDialect(
    lambda dialect: Prepared(insert_for(dialect, telegram_updates).on_conflict_do_nothing())
)
_MARK_HANDLED = Prepared(
    telegram_updates.update()
    .where(telegram_updates.c.update_id == sa.bindparam("uid"))
    .values(handled_at=sa.bindparam("at"))
)


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
    insert = _INSERT_UPDATE[conn.dialect.name]
    now = utcnow()
    fresh = []
    for update in distinct_updates(updates):
        row = {"update_id": update["update_id"], "payload": update, "received_at": now}
        if insert.execute(conn, row).rowcount == 1:  # 0: stored before (a redelivery)
            fresh.append(update)
    return fresh


async def _committed() -> None:
    return None


def enqueue_in(
    conn: Connection,
    chat_id: int,
    dedupe_key: str,
    payload: Json,
    recorded_by: str | None = None,
) -> OutboxRow | None:
    """Record a message to deliver inside another unit of work (the answer's own)."""
    return _enqueue(conn, chat_id, dedupe_key, payload, recorded_by)


class UpdateAlreadyHandled(Exception):
    """The update was handled before (by another process's overlapping poller, in a
    fleet): the unit of work that would handle it again rolls back."""


def mark_handled_in(conn: Connection, update_id: int) -> None:
    """Mark an update handled inside another unit of work (the hub's queue push); raises
    ``UpdateAlreadyHandled`` when it already was, so one update makes one message."""
    t = telegram_updates
    marked = conn.execute(
        t.update()
        .where(t.c.update_id == update_id, t.c.handled_at.is_(None))
        .values(handled_at=utcnow())
    ).rowcount
    if (
        marked == 0
        and conn.execute(sa.select(t.c.update_id).where(t.c.update_id == update_id)).first()
        is not None
    ):
        raise UpdateAlreadyHandled(update_id)


@quick_unit
def _mark_handled(conn: Connection, update_id: int) -> None:
    _MARK_HANDLED.execute(conn, {"uid": update_id, "at": utcnow()})


def _unhandled(conn: Connection) -> list[Json]:
    rows = conn.execute(
        sa.select(telegram_updates.c.payload)
        .where(telegram_updates.c.handled_at.is_(None))
        .order_by(telegram_updates.c.update_id)
    )
    return [row[0] for row in rows]


def _last_update_id(conn: Connection) -> int | None:
    return conn.execute(sa.select(sa.func.max(telegram_updates.c.update_id))).scalar()


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
    _serialize(conn, "pairing")  # count-then-insert must not interleave across workers
    live = sa.and_(p.c.used_at.is_(None), p.c.expires_at > now)
    mine = conn.execute(sa.select(p).where(live, p.c.user_id == user_id)).first()
    if mine is not None:
        return _pairing_row(mine), False
    waiting = conn.execute(sa.select(sa.func.count()).select_from(p).where(live)).scalar_one()
    if waiting >= MAX_PENDING_CODES:
        return None, False
    while True:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        if conn.execute(sa.select(p.c.code).where(p.c.code == code)).first() is None:
            break
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


_CARD_COLUMNS = [telegram_cards.c[k] for k in CardRow.__slots__]


def _save_card(conn: Connection, card: CardRow) -> None:
    values = {k: getattr(card, k) for k in card.__slots__}
    c = telegram_cards
    if conn.execute(
        sa.select(c.c.tool_call_id).where(c.c.tool_call_id == card.tool_call_id)
    ).first():
        conn.execute(c.update().where(c.c.tool_call_id == card.tool_call_id).values(**values))
    else:
        conn.execute(c.insert().values(created_at=utcnow(), **values))


def _card(conn: Connection, tool_call_id: int) -> CardRow | None:
    row = conn.execute(
        sa.select(*_CARD_COLUMNS).where(telegram_cards.c.tool_call_id == tool_call_id)
    ).first()
    return CardRow(*row) if row else None


def _card_at(conn: Connection, chat_id: int, message_id: int) -> CardRow | None:
    row = conn.execute(
        sa.select(*_CARD_COLUMNS).where(
            telegram_cards.c.chat_id == chat_id, telegram_cards.c.message_id == message_id
        )
    ).first()
    return CardRow(*row) if row else None


def _close_card(conn: Connection, tool_call_id: int, state: str) -> bool:
    c = telegram_cards
    done = conn.execute(
        c.update().where(c.c.tool_call_id == tool_call_id, c.c.state == "open").values(state=state)
    )
    return done.rowcount > 0


def _open_cards(conn: Connection, source: str | None) -> list[CardRow]:
    query = sa.select(*_CARD_COLUMNS).where(telegram_cards.c.state == "open")
    if source is not None:
        query = query.where(telegram_cards.c.source == source)
    return [CardRow(*row) for row in conn.execute(query.order_by(telegram_cards.c.tool_call_id))]


_OUTBOX_COLUMNS = [telegram_outbox.c[k] for k in _OUTBOX_FIELDS]


_ENQUEUE = PerDialect(
    lambda dialect: Prepared(
        insert_for(dialect, telegram_outbox).on_conflict_do_nothing(
            **({"index_elements": ["dedupe_key"]} if dialect == "postgresql" else {})
        )
    )
)


@quick_unit
def _enqueue(
    conn: Connection,
    chat_id: int,
    dedupe_key: str,
    payload: Json,
    recorded_by: str | None = None,
) -> OutboxRow | None:
    values = {
        "chat_id": chat_id,
        "dedupe_key": dedupe_key,
        "payload": payload,
        "created_at": utcnow(),
        "recorded_by": recorded_by,
    }
    new_id = _ENQUEUE[conn.dialect.name].execute(conn, values).primary_key
    if new_id is None:
        return None  # enqueued before (perhaps at this very moment by another worker)
    return OutboxRow(new_id, chat_id, dedupe_key, payload, "pending", 0, None)


def _serialize(conn: Connection, name: str) -> None:
    """Hold a transaction-scoped lock on PostgreSQL (SQLite's writer lock already does)."""
    if conn.dialect.name == "postgresql":
        key = int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "big") & 0x7FFF_FFFF_FFFF_FFFF
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def _has_key(conn: Connection, dedupe_key: str) -> bool:
    o = telegram_outbox
    return conn.execute(sa.select(o.c.id).where(o.c.dedupe_key == dedupe_key)).first() is not None


def _postpone(
    conn: Connection, outbox_id: int, error: str, tried_at: datetime, next_attempt_at: datetime
) -> None:
    o = telegram_outbox
    conn.execute(
        o.update()
        .where(o.c.id == outbox_id, o.c.status == "pending")
        .values(
            attempts=o.c.attempts + 1,
            error=error,
            last_attempt_at=tried_at,
            next_attempt_at=next_attempt_at,
        )
    )


def _reschedule(conn: Connection, outbox_ids: list[int], next_attempt_at: datetime) -> None:
    o = telegram_outbox
    conn.execute(
        o.update()
        .where(o.c.id.in_(outbox_ids), o.c.status == "pending")
        .values(next_attempt_at=next_attempt_at)
    )


def _recover_outbox(conn: Connection, now: datetime) -> int:
    o = telegram_outbox
    due = sa.or_(o.c.next_attempt_at.is_(None), o.c.next_attempt_at > now)
    result = conn.execute(
        o.update().where(o.c.status == "pending", due).values(next_attempt_at=now)
    )
    return result.rowcount


def _sender() -> sa.ColumnElement[str | None]:
    """The process a row is in flight with: its claimer, else its recorder."""
    o = telegram_outbox
    return sa.func.coalesce(o.c.sending_by, o.c.recorded_by)


def _recover_orphans(conn: Connection, now: datetime, own: str, stranded: list[int]) -> int:
    o = telegram_outbox
    members = sa.select(leases.c.owner).where(
        leases.c.name.startswith(PROCESS_LEASE_PREFIX, autoescape=True),
        leases.c.expires_at > sa.text(db_now_sql(conn.dialect.name)),
    )
    sender = _sender()
    orphaned = sa.or_(
        # This process's own rows are never orphans (it may have lapsed for a moment):
        # it hands back what it can no longer send itself (``release``, ``stranded``).
        sa.and_(
            sender.is_distinct_from(own),
            sa.or_(sender.is_(None), sender.not_in(members)),
        ),
        o.c.id.in_(stranded),
    )
    in_flight = sa.and_(o.c.status == "pending", o.c.next_attempt_at.is_(None))
    return conn.execute(o.update().where(in_flight, orphaned).values(next_attempt_at=now)).rowcount


def _release(conn: Connection, outbox_id: int, own: str | None, now: datetime) -> bool:
    o = telegram_outbox
    ours = sa.and_(
        o.c.id == outbox_id,
        o.c.status == "pending",
        o.c.next_attempt_at.is_(None),
        _sender() == own,
    )
    return conn.execute(o.update().where(ours).values(next_attempt_at=now)).rowcount == 1


def _claim_due(
    conn: Connection, now: datetime, lease_until: datetime, limit: int, own: str | None
) -> list[OutboxRow]:
    o = telegram_outbox
    due = sa.and_(o.c.status == "pending", o.c.next_attempt_at <= now)
    candidates = conn.execute(
        sa.select(*_OUTBOX_COLUMNS).where(due).order_by(o.c.id).limit(limit)
    ).all()
    # A fleet's process takes the row in flight (no schedule, its own id); one process
    # alone leases it until ``lease_until``.
    claim = (
        {"next_attempt_at": lease_until}
        if own is None
        else {"next_attempt_at": None, "sending_by": own}
    )
    claimed = []
    for row in candidates:
        # Conditional: another worker may have claimed (or sent) it since the SELECT.
        moved = conn.execute(o.update().where(o.c.id == row.id, due).values(**claim))
        if moved.rowcount == 1:
            claimed.append(OutboxRow(*row))
    return claimed


def _next_attempt_at(conn: Connection) -> datetime | None:
    o = telegram_outbox
    return conn.execute(
        sa.select(sa.func.min(o.c.next_attempt_at)).where(o.c.status == "pending")
    ).scalar()


def delivery_summary(conn: Connection, limit: int = 10) -> DeliverySummary:
    """The outbox's counts and oldest waiting rows, in one connection (``/metrics`` reads it
    inside its own snapshot)."""
    o = telegram_outbox
    waiting = sa.and_(o.c.status == "pending", o.c.attempts > 0)
    counts = conn.execute(
        sa.select(
            sa.func.coalesce(sa.func.sum(sa.case((waiting, 1), else_=0)), 0),
            sa.func.coalesce(sa.func.sum(sa.case((o.c.status == "failed", 1), else_=0)), 0),
            sa.func.coalesce(sa.func.sum(sa.case((o.c.status == "sent", 1), else_=0)), 0),
            sa.func.min(sa.case((waiting, o.c.created_at))),
        )
    ).one()
    if limit <= 0:
        return DeliverySummary(int(counts[0]), int(counts[1]), int(counts[2]), counts[3], ())
    rows = conn.execute(
        sa.select(
            o.c.id,
            o.c.chat_id,
            o.c.attempts,
            o.c.error,
            o.c.created_at,
            o.c.last_attempt_at,
            o.c.next_attempt_at,
        )
        .where(waiting)
        .order_by(o.c.id)
        .limit(limit)
    ).all()
    shown = tuple(WaitingDelivery(*row) for row in rows)
    return DeliverySummary(
        waiting=int(counts[0]),
        failed=int(counts[1]),
        sent=int(counts[2]),
        oldest_waiting_at=counts[3],
        rows=shown,
    )


def _pending_outbox(conn: Connection) -> list[OutboxRow]:
    o = telegram_outbox
    rows = conn.execute(sa.select(*_OUTBOX_COLUMNS).where(o.c.status == "pending").order_by(o.c.id))
    return [OutboxRow(*row) for row in rows]


_MARK_OUTBOX = Prepared(
    telegram_outbox.update()
    .where(telegram_outbox.c.id == sa.bindparam("oid"))
    .values(
        status=sa.bindparam("status"),
        message_id=sa.bindparam("message_id"),
        error=sa.bindparam("error"),
        attempts=telegram_outbox.c.attempts + 1,
        sent_at=sa.bindparam("sent_at"),
    )
)


@quick_unit
def _mark_sent_many(conn: Connection, sent: list[tuple[int, int | None]]) -> None:
    now = utcnow()
    _MARK_OUTBOX.executemany(
        conn,
        [
            {"oid": oid, "status": "sent", "message_id": mid, "error": None, "sent_at": now}
            for oid, mid in sent
        ],
    )


@quick_unit
def _mark_outbox(
    conn: Connection, outbox_id: int, status: str, message_id: int | None, error: str | None
) -> None:
    _MARK_OUTBOX.execute(
        conn,
        {
            "oid": outbox_id,
            "status": status,
            "message_id": message_id,
            "error": error,
            "sent_at": utcnow() if status == "sent" else None,
        },
    )


def _undelivered_finals(conn: Connection) -> list[tuple[str, int, str]]:
    last = (
        sa.select(h.c.session_stack_id, sa.func.max(h.c.id).label("last_id"))
        .where(h.c.status == "ok")
        .group_by(h.c.session_stack_id)
        .subquery()
    )
    key = sa.literal("final:") + sa.cast(h.c.id, sa.String) + sa.literal(":0")
    query = (
        sa.select(sources.c.source, h.c.id, h.c.content)
        .select_from(sources)
        .join(f, sa.and_(f.c.session_id == sources.c.session_id, f.c.depth == 0))
        .join(last, last.c.session_stack_id == f.c.id)
        .join(h, h.c.id == last.c.last_id)
        .where(
            sources.c.source.like("telegram:%"),
            h.c.role == "assistant",
            h.c.content != "",
            ~sa.select(t.c.id).where(t.c.message_id == h.c.id).exists(),
            ~sa.select(telegram_outbox.c.id).where(telegram_outbox.c.dedupe_key == key).exists(),
        )
    )
    return [(row[0], row[1], row[2]) for row in conn.execute(query)]
