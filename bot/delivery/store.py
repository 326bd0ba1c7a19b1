"""What the delivery layer keeps for one platform: its inbound events (stored once), its
cards (which platform message shows which call) and its outbox.

Every table is keyed by platform (``bot/delivery/tables.py``); each store here is bound
to one platform's name, so a platform's code never sees another's rows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.delivery.tables import platform_cards, platform_events, platform_gone, platform_outbox
from engine.store import (
    Database,
    PerDialect,
    Prepared,
    insert_for,
    live_members,
    quick_unit,
    sources,
    utcnow,
)
from engine.store import chat_history as h
from engine.store import chat_llm_tools as t
from engine.store import chat_sessions_stack as f

__all__ = [
    "CardRow",
    "CardStore",
    "DeliverySummary",
    "EventAlreadyHandled",
    "EventStore",
    "OutboxRow",
    "OutboxStore",
    "WaitingDelivery",
    "delivery_summary",
    "enqueue_in",
]

Json = dict[str, Any]

o = platform_outbox
g = platform_gone
c = platform_cards
e = platform_events


# -- inbound events ------------------------------------------------------------------------


class EventAlreadyHandled(Exception):
    """The event was handled before (by another process's overlapping receiver, in a
    fleet): the unit of work that would handle it again rolls back."""


_INSERT_EVENT = PerDialect(
    lambda dialect: Prepared(insert_for(dialect, platform_events).on_conflict_do_nothing())
)
_THIS_EVENT = sa.and_(e.c.platform == sa.bindparam("p"), e.c.event_id == sa.bindparam("eid"))
#: In the hub's queue push: only an event not handled yet (its row count tells).
_MARK_UNHANDLED = Prepared(
    e.update().where(_THIS_EVENT, e.c.handled_at.is_(None)).values(handled_at=sa.bindparam("at"))
)
_EVENT_STORED = sa.select(e.c.event_id).where(_THIS_EVENT)  # only after a mark found none
_MARK_HANDLED = Prepared(
    e.update()
    .where(e.c.platform == sa.bindparam("p"), e.c.event_id == sa.bindparam("eid"))
    .values(handled_at=sa.bindparam("at"))
)


class EventStore:
    """One platform's inbound events: insert-if-new by event id, handled once."""

    def __init__(self, db: Database, platform: str) -> None:
        self._db = db
        self.platform = platform

    async def record(
        self, events: Sequence[tuple[str, int | None, Json]], *, handled: bool = False
    ) -> list[Json]:
        """Store ``(event id, seq, payload)`` not seen before (one commit); returns the
        payloads that were new, in the order given. ``handled``: stored as handled (a
        record for the platform's catch-up, never handed over)."""
        return await self._db.run(record_events_in, self.platform, list(events), handled)

    async def mark_handled(self, event_id: str) -> None:
        await self._db.run(_mark_handled, self.platform, event_id)

    def mark_handled_in(self, conn: Connection, event_id: str) -> None:
        mark_handled_in(conn, self.platform, event_id)

    async def payload(self, event_id: str) -> Json | None:
        """The event as it was stored, if it was (a deletion finds where its message was)."""
        return await self._db.run(_payload, self.platform, event_id)

    async def unhandled(self) -> list[Json]:
        """Stored and not handled, in the platform's order (``seq``), then arrival."""
        return await self._db.run(_unhandled, self.platform)

    async def last_seq(self) -> int | None:
        return await self._db.run(_last_seq, self.platform)

    async def recent(
        self, since: datetime, limit: int, before: datetime | None = None
    ) -> list[Json]:
        """The payloads received since ``since`` (and before ``before``), newest first, at
        most ``limit`` (a platform that catches up after a reconnect reads where its
        conversations were)."""
        return [payload for payload, _at in await self.received(since, limit, before)]

    async def received(
        self, since: datetime, limit: int, before: datetime | None = None
    ) -> list[tuple[Json, datetime]]:
        """``recent`` with when each came (the next page is ``before`` the last one's)."""
        return await self._db.run(_recent_events, self.platform, since, limit, before)


@quick_unit
def record_events_in(
    conn: Connection,
    platform: str,
    events: list[tuple[str, int | None, Json]],
    handled: bool = False,
) -> list[Json]:
    insert = _INSERT_EVENT[conn.dialect.name]
    now = utcnow()
    fresh = []
    for event_id, seq, payload in events:
        row = {
            "platform": platform,
            "event_id": event_id,
            "seq": seq,
            "payload": payload,
            "received_at": now,
            **({"handled_at": now} if handled else {}),
        }
        if insert.execute(conn, row).rowcount == 1:  # 0: stored before (a redelivery)
            fresh.append(payload)
    return fresh


def mark_handled_in(conn: Connection, platform: str, event_id: str) -> None:
    """Mark an event handled inside another unit of work (the hub's queue push); raises
    ``EventAlreadyHandled`` when it already was, so one event makes one message."""
    key = {"p": platform, "eid": event_id}
    marked = _MARK_UNHANDLED.execute(conn, {**key, "at": utcnow()}).rowcount
    if marked == 0 and conn.execute(_EVENT_STORED, key).first() is not None:
        raise EventAlreadyHandled(event_id)


@quick_unit
def _mark_handled(conn: Connection, platform: str, event_id: str) -> None:
    _MARK_HANDLED.execute(conn, {"p": platform, "eid": event_id, "at": utcnow()})


def _payload(conn: Connection, platform: str, event_id: str) -> Json | None:
    query = sa.select(e.c.payload).where(_THIS_EVENT)
    return conn.execute(query, {"p": platform, "eid": event_id}).scalar()


def _unhandled(conn: Connection, platform: str) -> list[Json]:
    rows = conn.execute(
        sa.select(e.c.payload)
        .where(e.c.platform == platform, e.c.handled_at.is_(None))
        .order_by(e.c.seq, e.c.received_at, e.c.event_id)
    )
    return [row[0] for row in rows]


def _recent_events(
    conn: Connection, platform: str, since: datetime, limit: int, before: datetime | None
) -> list[tuple[Json, datetime]]:
    received = sa.and_(e.c.platform == platform, e.c.received_at >= since)
    if before is not None:
        received = sa.and_(received, e.c.received_at < before)
    newest_first = e.c.received_at.desc()
    query = sa.select(e.c.payload, e.c.received_at).where(received).order_by(newest_first)
    return [(row[0], row[1]) for row in conn.execute(query.limit(limit))]


def _last_seq(conn: Connection, platform: str) -> int | None:
    return conn.execute(sa.select(sa.func.max(e.c.seq)).where(e.c.platform == platform)).scalar()


# -- cards ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CardRow:
    """A card as stored: the call it shows, where, and the platform message it is."""

    tool_call_id: int
    kind: str
    source: str
    conversation: str
    message_id: str | None
    text: str
    extra: Any
    state: str
    #: The ❌ reject window open on it (``CardStore.open_window``), as stored.
    reject_window: Any = None


_CARD_COLUMNS = [c.c[k] for k in CardRow.__slots__]


class CardStore:
    def __init__(self, db: Database, platform: str) -> None:
        self._db = db
        self.platform = platform

    async def save(self, card: CardRow) -> None:
        await self._db.run(_save_card, self.platform, card)

    async def get(self, tool_call_id: int) -> CardRow | None:
        return await self._db.run(_card, self.platform, tool_call_id)

    async def at(self, conversation: str, message_id: str) -> CardRow | None:
        return await self._db.run(_card_at, self.platform, conversation, message_id)

    async def unshown_in(self, conversation: str) -> bool:
        """Whether an open card of ``conversation`` has no message recorded yet (posted,
        its answer not come, or not shown yet)."""
        return await self._db.run(_unshown_in, self.platform, conversation)

    async def shown_as(
        self, tool_call_id: int, conversation: str, message_id: str
    ) -> CardRow | None:
        """The open card ``tool_call_id`` of ``conversation`` with ``message_id`` recorded
        as its message when it had none yet (a platform that learns it before its post's
        answer came); the card then, or ``None`` when no open card of that conversation
        is shown by ``message_id``."""
        return await self._db.run(_shown_as, self.platform, tool_call_id, conversation, message_id)

    async def open_window(self, tool_call_id: int, window: Any) -> None:
        """Keep the ❌ reject window open on the card (a JSON object), for a restart."""
        mine = sa.and_(c.c.platform == self.platform, c.c.tool_call_id == tool_call_id)
        await self._db.run(
            lambda conn: conn.execute(c.update().where(mine).values(reject_window=window))
        )

    async def close(self, tool_call_id: int, state: str) -> bool:
        """Mark an open card closed; False when it was not open (someone else closed it)."""
        return await self._db.run(_close_card, self.platform, tool_call_id, state)

    async def open(self, source: str | None = None) -> list[CardRow]:
        return await self._db.run(_open_cards, self.platform, source)


def _save_card(conn: Connection, platform: str, card: CardRow) -> None:
    values = {k: getattr(card, k) for k in card.__slots__}
    mine = sa.and_(c.c.platform == platform, c.c.tool_call_id == card.tool_call_id)
    if conn.execute(sa.select(c.c.tool_call_id).where(mine)).first():
        # A card decided, answered or cancelled is never opened again (a card posted
        # again by one process of a fleet after another closed it was); one that expired
        # unseen is shown again when its call still waits. Its reject window stays.
        del values["reject_window"]
        conn.execute(c.update().where(mine, c.c.state.in_(("open", "expired"))).values(**values))
    else:
        conn.execute(c.insert().values(platform=platform, created_at=utcnow(), **values))


def _card(conn: Connection, platform: str, tool_call_id: int) -> CardRow | None:
    row = conn.execute(
        sa.select(*_CARD_COLUMNS).where(c.c.platform == platform, c.c.tool_call_id == tool_call_id)
    ).first()
    return CardRow(*row) if row else None


def _card_at(conn: Connection, platform: str, conversation: str, message_id: str) -> CardRow | None:
    row = conn.execute(
        sa.select(*_CARD_COLUMNS).where(
            c.c.platform == platform,
            c.c.conversation == conversation,
            c.c.message_id == message_id,
        )
    ).first()
    return CardRow(*row) if row else None


def _unshown_in(conn: Connection, platform: str, conversation: str) -> bool:
    found = conn.execute(
        sa.select(c.c.tool_call_id)
        .where(
            c.c.platform == platform,
            c.c.conversation == conversation,
            c.c.message_id.is_(None),
            c.c.state == "open",
        )
        .limit(1)
    ).first()
    return found is not None


def _shown_as(
    conn: Connection, platform: str, tool_call_id: int, conversation: str, message_id: str
) -> CardRow | None:
    mine = sa.and_(
        c.c.platform == platform,
        c.c.tool_call_id == tool_call_id,
        c.c.conversation == conversation,
        c.c.state == "open",
    )
    conn.execute(c.update().where(mine, c.c.message_id.is_(None)).values(message_id=message_id))
    row = conn.execute(sa.select(*_CARD_COLUMNS).where(mine, c.c.message_id == message_id)).first()
    return CardRow(*row) if row else None


def _close_card(conn: Connection, platform: str, tool_call_id: int, state: str) -> bool:
    mine = sa.and_(c.c.platform == platform, c.c.tool_call_id == tool_call_id)
    done = conn.execute(
        c.update().where(mine, c.c.state == "open").values(state=state, reject_window=None)
    )
    return done.rowcount > 0


def _open_cards(conn: Connection, platform: str, source: str | None) -> list[CardRow]:
    query = sa.select(*_CARD_COLUMNS).where(c.c.platform == platform, c.c.state == "open")
    if source is not None:
        query = query.where(c.c.source == source)
    return [CardRow(*row) for row in conn.execute(query.order_by(c.c.tool_call_id))]


# -- the outbox ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    conversation: str
    dedupe_key: str
    payload: Json
    status: str
    attempts: int
    message_id: str | None
    error: str | None = None
    #: When a postponed delivery is due again; ``None`` while its recorder is sending it.
    next_attempt_at: datetime | None = None
    #: Not stored: when this process took the row to send it, on its fleet tenure's clock
    #: (``Outbound``); ``None`` outside a fleet.
    taken_at: float | None = field(default=None, metadata={"stored": False})


#: The stored columns of ``OutboxRow``, in its order.
_OUTBOX_FIELDS = tuple(f.name for f in fields(OutboxRow) if f.metadata.get("stored", True))
_OUTBOX_COLUMNS = [o.c[k] for k in _OUTBOX_FIELDS]


@dataclass(frozen=True, slots=True)
class WaitingDelivery:
    """A delivery postponed by its platform or the network, as the web inbox lists it."""

    id: int
    platform: str
    conversation: str
    attempts: int
    error: str | None
    created_at: datetime
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None


@dataclass(frozen=True, slots=True)
class DeliverySummary:
    """The outbox at a glance (``/metrics``, the web inbox), every platform's."""

    waiting: int  # pending after at least one failed attempt
    failed: int  # given up: blocked, conversation gone, a request the platform refuses
    sent: int
    oldest_waiting_at: datetime | None
    rows: tuple[WaitingDelivery, ...]  # the oldest waiting ones, at most ``limit``


class OutboxStore:
    """One platform's outbox rows."""

    def __init__(self, db: Database, platform: str, *, process_id: str | None = None) -> None:
        """``process_id``: a fleet's process, recorded with each row it writes."""
        self._db = db
        self.platform = platform
        self.process_id = process_id

    def enqueue_in(
        self, conn: Connection, conversation: str, dedupe_key: str, payload: Json
    ) -> OutboxRow | None:
        """Record a message to deliver inside another unit of work (the answer's own)."""
        return enqueue_in(conn, self.platform, conversation, dedupe_key, payload, self.process_id)

    async def enqueue(self, conversation: str, dedupe_key: str, payload: Json) -> OutboxRow | None:
        """Record a message to deliver; ``None`` when that key was enqueued before."""
        return await self._db.run(
            enqueue_in, self.platform, conversation, dedupe_key, payload, self.process_id
        )

    async def has_key(self, dedupe_key: str) -> bool:
        return await self._db.run(_has_key, self.platform, dedupe_key)

    async def pending(self) -> list[OutboxRow]:
        return await self._db.run(_pending_outbox, self.platform)

    async def mark_sent(self, outbox_id: int, message_id: str | None) -> None:
        await self.mark_sent_many([(outbox_id, message_id)])

    async def mark_sent_many(self, sent: Sequence[tuple[int, str | None]]) -> None:
        """``(outbox id, platform message id)`` pairs, in one transaction."""
        if sent:
            await self._db.run(_mark_sent_many, list(sent))

    async def mark_failed(self, outbox_id: int, error: str, *, gone: bool = False) -> bool:
        """A refused delivery: failed, unless it is no longer pending with this process
        (a fleet's: another took it since, and its outcome counts); whether it was.
        ``gone``: the platform refused it for good (``Gone``), and its conversation is
        noted so (``gone_reason``) until a delivery there goes through."""
        return await self._db.run(_mark_failed, outbox_id, error[:2000], self.process_id, gone)

    async def forget_gone(self, conversation: str) -> None:
        """A person says ``conversation`` takes messages again (a job resumed there)."""
        await self._db.run(_forget_gone, self.platform, conversation)

    async def gone_reason(self, conversation: str) -> str | None:
        """Why ``conversation`` takes nothing more from the bot (its last refusal for good,
        nothing delivered there since), or ``None``."""
        return await self._db.run(_gone_reason, self.platform, conversation)

    async def postpone(
        self, outbox_id: int, error: str, tried_at: datetime, next_attempt_at: datetime
    ) -> bool:
        """One more failed attempt: pending, due again at ``next_attempt_at``; unless it is
        no longer pending with this process (a fleet's: another took it since: due again,
        it would be sent twice). Whether it was postponed."""
        return await self._db.run(
            _postpone, outbox_id, error[:2000], tried_at, next_attempt_at, self.process_id
        )

    async def reschedule(self, outbox_ids: Sequence[int], next_attempt_at: datetime) -> set[int]:
        """Rows this process holds, due at ``next_attempt_at`` (claimed and not tried after
        all, or queued behind an earlier one); the ids it moved. A row that is sent, failed
        or with another process now (a fleet's: claimed by it) is left alone."""
        if not outbox_ids:
            return set()
        return await self._db.run(_reschedule, list(outbox_ids), next_attempt_at, self.process_id)

    async def recover(self, now: datetime) -> int:
        """At start: every pending delivery is due now (unsent by a process that died,
        postponed, or claimed by a retry that never finished); returns how many."""
        return await self._db.run(_recover_outbox, self.platform, now)

    async def recover_orphans(self, now: datetime, stranded: Collection[int] = ()) -> int:
        """A fleet's: rows in flight with a process that is no fleet member now (it died,
        or was paused past its membership lease), and ``stranded`` rows of this process,
        are due at ``now``. Membership is read in the same statement, by the database's
        clock: a process that joined again meanwhile keeps what it took since."""
        if self.process_id is None:
            raise RuntimeError("recovering a fleet's orphans needs the process's id")
        return await self._db.run(
            _recover_orphans, self.platform, now, self.process_id, list(stranded)
        )

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
        return await self._db.run(
            _claim_due, self.platform, now, lease_until, limit, self.process_id
        )

    async def release(self, outbox_id: int, now: datetime) -> bool:
        """A fleet's: hand back a row this process took and no longer may send (its
        membership lapsed): due at ``now`` for any process, unless another took it meanwhile."""
        return await self._db.run(_release, outbox_id, self.process_id, now)

    async def next_attempt_at(self) -> datetime | None:
        """When the earliest postponed delivery is due; ``None`` when none waits."""
        return await self._db.run(_next_attempt_at, self.platform)

    async def earlier_pending(self, row: OutboxRow, ahead: Collection[int] = ()) -> bool:
        """A fleet's: whether an earlier row of ``row``'s conversation is still unsent
        anywhere (with another process, left by a dead one, or this process's own and
        waiting), but for ``ahead``: rows this process already sends before it."""
        before = sorted(i for i in ahead if i < row.id)
        return await self._db.run(_earlier_pending, self.platform, row, before)

    async def undelivered_finals(self) -> list[tuple[str, int, str]]:
        """``(source, message_id, content)`` of the platform's answers never put in the
        outbox: the process died between storing an answer and recording its delivery
        (each answer's first part has the key ``final:<message id>:0``)."""
        return await self._db.run(_undelivered_finals, self.platform)


_ENQUEUE = PerDialect(
    lambda dialect: Prepared(
        insert_for(dialect, platform_outbox).on_conflict_do_nothing(
            **({"index_elements": ["platform", "dedupe_key"]} if dialect == "postgresql" else {})
        )
    )
)


@quick_unit
def enqueue_in(
    conn: Connection,
    platform: str,
    conversation: str,
    dedupe_key: str,
    payload: Json,
    recorded_by: str | None = None,
) -> OutboxRow | None:
    """A row to deliver, recorded in ``conn``'s unit of work; ``None`` when that key was
    recorded before (perhaps at this very moment by another worker)."""
    values = {
        "platform": platform,
        "conversation": conversation,
        "dedupe_key": dedupe_key,
        "payload": payload,
        "created_at": utcnow(),
        "recorded_by": recorded_by,
    }
    new_id = _ENQUEUE[conn.dialect.name].execute(conn, values).primary_key
    if new_id is None:
        return None
    return OutboxRow(new_id, conversation, dedupe_key, payload, "pending", 0, None)


def _has_key(conn: Connection, platform: str, dedupe_key: str) -> bool:
    query = sa.select(o.c.id).where(o.c.platform == platform, o.c.dedupe_key == dedupe_key)
    return conn.execute(query).first() is not None


def _pending_with(own: str | None) -> sa.ColumnElement[bool]:
    """Pending and in flight with ``own``: another process's claim is its own to send, and
    moving it (due again, postponed, failed) would have a second process send it too."""
    return sa.and_(o.c.status == "pending", _sender().is_not_distinct_from(own))


def _postpone(
    conn: Connection,
    outbox_id: int,
    error: str,
    tried_at: datetime,
    next_attempt_at: datetime,
    own: str | None,
) -> bool:
    moved = conn.execute(
        o.update()
        .where(o.c.id == outbox_id, _pending_with(own))
        .values(
            attempts=o.c.attempts + 1,
            error=error,
            last_attempt_at=tried_at,
            next_attempt_at=next_attempt_at,
        )
    )
    return moved.rowcount == 1


@quick_unit
def _mark_failed(
    conn: Connection, outbox_id: int, error: str, own: str | None, gone: bool = False
) -> bool:
    moved = conn.execute(
        o.update()
        .where(o.c.id == outbox_id, _pending_with(own))
        .values(status="failed", error=error, attempts=o.c.attempts + 1, message_id=None)
    )
    if gone and moved.rowcount == 1:
        row = conn.execute(sa.select(o.c.platform, o.c.conversation).where(o.c.id == outbox_id))
        platform, conversation = row.one()
        noted = {"reason": error, "since": utcnow(), "outbox_id": outbox_id}
        conn.execute(
            insert_for(conn.dialect.name, g)
            .values(platform=platform, conversation=conversation, **noted)
            .on_conflict_do_update(index_elements=[g.c.platform, g.c.conversation], set_=noted)
        )
    return moved.rowcount == 1


def _forget_gone(conn: Connection, platform: str, conversation: str) -> None:
    conn.execute(g.delete().where(g.c.platform == platform, g.c.conversation == conversation))


@quick_unit
def _gone_reason(conn: Connection, platform: str, conversation: str) -> str | None:
    where = (g.c.platform == platform, g.c.conversation == conversation)
    return conn.execute(sa.select(g.c.reason).where(*where)).scalar_one_or_none()


def _reschedule(
    conn: Connection, outbox_ids: list[int], next_attempt_at: datetime, own: str | None
) -> set[int]:
    moved = conn.execute(
        o.update()
        .where(o.c.id.in_(outbox_ids), _pending_with(own))
        .values(next_attempt_at=next_attempt_at)
        .returning(o.c.id)
    )
    return {row[0] for row in moved}


def _recover_outbox(conn: Connection, platform: str, now: datetime) -> int:
    due = sa.or_(o.c.next_attempt_at.is_(None), o.c.next_attempt_at > now)
    mine = sa.and_(o.c.platform == platform, o.c.status == "pending", due)
    return conn.execute(o.update().where(mine).values(next_attempt_at=now)).rowcount


def _sender() -> sa.ColumnElement[str | None]:
    """The process a row is in flight with: its claimer, else its recorder."""
    return sa.func.coalesce(o.c.sending_by, o.c.recorded_by)


def _recover_orphans(
    conn: Connection, platform: str, now: datetime, own: str, stranded: list[int]
) -> int:
    members = live_members(conn.dialect.name)
    sender = _sender()
    orphaned = sa.or_(
        # This process's own rows are never orphans (it may have lapsed for a moment):
        # it hands back what it can no longer send itself (``release``, ``stranded``).
        sa.and_(
            sender.is_distinct_from(own),
            sa.or_(sender.is_(None), sender.not_in(members)),
        ),
        # This process's own rows it could not hand back: only while still in flight with
        # it (another process that took one for an orphan since keeps it).
        sa.and_(o.c.id.in_(stranded), sender.is_not_distinct_from(own)),
    )
    in_flight = sa.and_(
        o.c.platform == platform, o.c.status == "pending", o.c.next_attempt_at.is_(None)
    )
    return conn.execute(o.update().where(in_flight, orphaned).values(next_attempt_at=now)).rowcount


def _release(conn: Connection, outbox_id: int, own: str | None, now: datetime) -> bool:
    ours = sa.and_(
        o.c.id == outbox_id,
        o.c.status == "pending",
        o.c.next_attempt_at.is_(None),
        _sender() == own,
    )
    return conn.execute(o.update().where(ours).values(next_attempt_at=now)).rowcount == 1


def _claim_due(
    conn: Connection,
    platform: str,
    now: datetime,
    lease_until: datetime,
    limit: int,
    own: str | None,
) -> list[OutboxRow]:
    due = sa.and_(o.c.platform == platform, o.c.status == "pending", o.c.next_attempt_at <= now)
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


@quick_unit
def _earlier_pending(conn: Connection, platform: str, row: OutboxRow, ahead: list[int]) -> bool:
    earlier = sa.select(o.c.id).where(
        o.c.platform == platform,
        o.c.conversation == row.conversation,
        o.c.status == "pending",
        o.c.id < row.id,
    )
    if ahead:
        earlier = earlier.where(o.c.id.not_in(ahead))
    return conn.execute(earlier.limit(1)).first() is not None


def _next_attempt_at(conn: Connection, platform: str) -> datetime | None:
    return conn.execute(
        sa.select(sa.func.min(o.c.next_attempt_at)).where(
            o.c.platform == platform, o.c.status == "pending"
        )
    ).scalar()


def delivery_summary(conn: Connection, limit: int = 10) -> DeliverySummary:
    """The outbox's counts and oldest waiting rows, every platform's, in one connection
    (``/metrics`` reads it inside its own snapshot)."""
    waiting = sa.and_(o.c.status == "pending", o.c.attempts > 0)
    counts = conn.execute(
        sa.select(
            sa.func.coalesce(sa.func.sum(sa.case((waiting, 1), else_=0)), 0),
            sa.func.coalesce(sa.func.sum(sa.case((o.c.status == "failed", 1), else_=0)), 0),
            sa.func.coalesce(sa.func.sum(sa.case((o.c.status == "sent", 1), else_=0)), 0),
            sa.func.min(sa.case((waiting, o.c.created_at))),
        )
    ).one()
    shown: tuple[WaitingDelivery, ...] = ()
    if limit > 0:
        rows = conn.execute(
            sa.select(
                o.c.id,
                o.c.platform,
                o.c.conversation,
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


def _pending_outbox(conn: Connection, platform: str) -> list[OutboxRow]:
    query = sa.select(*_OUTBOX_COLUMNS).where(o.c.platform == platform, o.c.status == "pending")
    return [OutboxRow(*row) for row in conn.execute(query.order_by(o.c.id))]


_TAKES_AGAIN = Prepared(
    g.delete().where(
        sa.exists()
        .where(
            o.c.id == sa.bindparam("oid"),
            o.c.platform == g.c.platform,
            o.c.conversation == g.c.conversation,
            o.c.id > g.c.outbox_id,  # recorded after the refusal: a late mark of an earlier
            # row (batched, or another process's) says nothing of it (found by review)
        )
        .correlate(g)
    )
)

_MARK_OUTBOX = Prepared(
    o.update()
    .where(o.c.id == sa.bindparam("oid"))
    .values(
        status=sa.bindparam("status"),
        message_id=sa.bindparam("message_id"),
        error=sa.bindparam("error"),
        attempts=o.c.attempts + 1,
        sent_at=sa.bindparam("sent_at"),
    )
)


@quick_unit
def _mark_sent_many(conn: Connection, sent: list[tuple[int, str | None]]) -> None:
    now = utcnow()
    _MARK_OUTBOX.executemany(
        conn,
        [
            {"oid": oid, "status": "sent", "message_id": mid, "error": None, "sent_at": now}
            for oid, mid in sent
        ],
    )
    # A delivery went through: its conversation takes messages again (the bot unblocked,
    # added back). Nearly always nothing to delete: the table holds refusals only.
    _TAKES_AGAIN.executemany(conn, [{"oid": oid} for oid, _ in sent])


def _undelivered_finals(conn: Connection, platform: str) -> list[tuple[str, int, str]]:
    last = (
        sa.select(h.c.session_stack_id, sa.func.max(h.c.id).label("last_id"))
        .where(h.c.status == "ok")
        .group_by(h.c.session_stack_id)
        .subquery()
    )
    key = sa.literal("final:") + sa.cast(h.c.id, sa.String) + sa.literal(":0")
    recorded = sa.select(o.c.id).where(o.c.platform == platform, o.c.dedupe_key == key)
    query = (
        sa.select(sources.c.source, h.c.id, h.c.content)
        .select_from(sources)
        .join(f, sa.and_(f.c.session_id == sources.c.session_id, f.c.depth == 0))
        .join(last, last.c.session_stack_id == f.c.id)
        .join(h, h.c.id == last.c.last_id)
        .where(
            sources.c.source.like(f"{platform}:%"),
            h.c.role == "assistant",
            h.c.content != "",
            ~sa.select(t.c.id).where(t.c.message_id == h.c.id).exists(),
            ~recorded.exists(),
        )
    )
    return [(row[0], row[1], row[2]) for row in conn.execute(query)]
