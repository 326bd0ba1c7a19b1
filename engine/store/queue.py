"""The hub's durable per-source queue, and small application settings.

A message is written here before its platform is acknowledged. It leaves the queue in the
same transaction that stores it as a ``chat_history`` row (``History.append_message(...,
consumes=id)``), so a crash never loses it and never stores it twice. The row's words are
what is stored: a person's correction of a message still waiting (``amend``) is what the
turn reads, whichever process runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store.db import Database
from engine.store.dialects import insert_for
from engine.store.schema import app_settings, queued_messages, utcnow

q = queued_messages
#: The user message metadata naming who sent it: ``{"id": "<platform user id>", "name": ...}``.
SENDER_KEY = "sender"


@dataclass(frozen=True, slots=True)
class QueuedRow:
    id: int
    source: str
    session_id: int
    content: str
    is_synthetic: bool
    metadata: dict[str, Any] | None
    options: dict[str, Any] | None
    created_at: datetime


class QueueStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def push(
        self,
        source: str,
        session_id: int,
        content: str,
        *,
        is_synthetic: bool = False,
        metadata: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> QueuedRow:
        """Queue a message; ``also`` runs in the same transaction (an adapter's bookkeeping,
        such as marking the platform update handled: both happen or neither)."""
        row = QueuedRow(0, source, session_id, content, is_synthetic, metadata, options, utcnow())
        return await self._db.run(_push, row, also)

    async def pending(self, source: str | None = None) -> list[QueuedRow]:
        """Queued messages, oldest first (of one source, or of all)."""
        return await self._db.run(_pending, source)

    async def amend(
        self,
        source: str,
        key: str,
        value: Any,
        content: str,
        *,
        by: str | None = None,
        threads: bool = False,
    ) -> bool:
        """The waiting message of ``source`` whose metadata has ``key`` = ``value`` (the
        platform's id of it) says ``content`` now; whether one still waited. ``by``: only
        if that person sent it (a platform whose edits anyone may forge names them);
        ``threads``: in the threads of ``source`` too (an edit that does not say where)."""
        return await self._db.run(_amend, source, key, value, content, by, threads)

    async def withdraw(
        self, source: str, key: str, value: Any, *, by: str | None = None, threads: bool = False
    ) -> int:
        """The waiting messages of ``source`` whose metadata has ``key`` = ``value`` (their
        sender took them back) forgotten; how many were. ``by`` and ``threads`` as in
        ``amend``."""
        return await self._db.run(_withdraw, source, key, value, by, threads)

    async def remove(self, queued_id: int) -> None:
        """Forget one queued message (its turn failed before storing it; the user was told)."""
        await self._db.run(consume, queued_id)

    async def drop(self, source: str) -> int:
        """Forget everything queued for ``source`` (a /stop or /clear); how many went."""
        return await self._db.run(_drop, source)


class AppSettings:
    """String settings that outlive the process (the home source, ...)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, key: str) -> str | None:
        return await self._db.run(_get_setting, key)

    async def set(self, key: str, value: str) -> None:
        await self._db.run(_set_setting, key, value)

    async def change(self, key: str, change: Callable[[str | None], str]) -> str:
        """Read ``key``, ``change`` it and write it in one transaction (the row locked on
        PostgreSQL): two changes at once, in two chats or two processes, both hold. The
        value written."""
        return await self._db.run(_change_setting, key, change)


def _push(conn: Connection, row: QueuedRow, also: Callable[[Connection], None] | None) -> QueuedRow:
    values = {k: getattr(row, k) for k in row.__slots__ if k != "id"}
    new_id = conn.execute(q.insert().values(**values)).inserted_primary_key[0]
    if also is not None:
        also(conn)
    return QueuedRow(new_id, *(values[k] for k in row.__slots__ if k != "id"))


def _pending(conn: Connection, source: str | None) -> list[QueuedRow]:
    query = sa.select(*(q.c[k] for k in QueuedRow.__slots__)).order_by(q.c.id)
    if source is not None:
        query = query.where(q.c.source == source)
    return [QueuedRow(*row) for row in conn.execute(query)]


def _drop(conn: Connection, source: str) -> int:
    return conn.execute(q.delete().where(q.c.source == source)).rowcount


def _amend(
    conn: Connection,
    source: str,
    key: str,
    value: Any,
    content: str,
    by: str | None,
    threads: bool,
) -> bool:
    ids = _waiting(conn, source, key, value, by, threads)
    if not ids:
        return False
    conn.execute(q.update().where(q.c.id == ids[-1]).values(content=content))
    return True


def _withdraw(
    conn: Connection, source: str, key: str, value: Any, by: str | None, threads: bool
) -> int:
    ids = _waiting(conn, source, key, value, by, threads)
    if ids:
        conn.execute(q.delete().where(q.c.id.in_(ids)))
    return len(ids)


def _waiting(
    conn: Connection, source: str, key: str, value: Any, by: str | None, threads: bool
) -> list[int]:
    """The ids of the waiting messages of ``source`` (and its threads) that ``matches``."""
    where = q.c.source == source
    if threads:
        where = where | q.c.source.startswith(f"{source}:", autoescape=True)
    waiting = conn.execute(sa.select(q.c.id, q.c.metadata).where(where, ~q.c.is_synthetic))
    return [row.id for row in waiting if matches(row.metadata or {}, key, value, by)]


def matches(metadata: dict[str, Any], key: str, value: Any, by: str | None) -> bool:
    """Whether a message's ``metadata`` names it ``key`` = ``value``, sent by ``by`` (any
    sender when ``None``)."""
    if metadata.get(key) != value:
        return False
    sender = metadata.get(SENDER_KEY)
    return by is None or (isinstance(sender, dict) and sender.get("id") == by)


_CONSUME = q.delete().where(q.c.id == sa.bindparam("qid")).returning(q.c.content)


def consume(conn: Connection, queued_id: int) -> str | None:
    """Part of the unit of work that stores the queued message as a history row: its
    words as they stand now (amended meanwhile, maybe); ``None``: it was gone."""
    return conn.execute(_CONSUME, {"qid": queued_id}).scalar()


def _get_setting(conn: Connection, key: str) -> str | None:
    return conn.execute(
        sa.select(app_settings.c.value).where(app_settings.c.key == key)
    ).scalar_one_or_none()


def _change_setting(conn: Connection, key: str, change: Callable[[str | None], str]) -> str:
    locked = sa.select(app_settings.c.value).where(app_settings.c.key == key).with_for_update()
    current = conn.execute(locked).scalar_one_or_none()
    if current is None:
        value = change(None)
        insert = insert_for(conn.dialect.name, app_settings).on_conflict_do_nothing()
        added = conn.execute(insert.values(key=key, value=value, updated_at=utcnow()))
        if added.rowcount == 1:
            return value
        current = conn.execute(locked).scalar_one()  # another's first write came between
    value = change(current)
    _set_setting(conn, key, value)
    return value


def _set_setting(conn: Connection, key: str, value: str) -> None:
    now = utcnow()
    updated = conn.execute(
        app_settings.update().where(app_settings.c.key == key).values(value=value, updated_at=now)
    )
    if updated.rowcount == 0:
        conn.execute(app_settings.insert().values(key=key, value=value, updated_at=now))
