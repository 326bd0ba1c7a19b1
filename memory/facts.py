"""Each user's facts: what the deriver learned and what the user or the model saved.

Every change goes through ``FactStore`` (or its ``*_in`` functions inside a caller's
transaction, as the deriver's batch does) and is checked here: a fact is one plain line of
at most ``max_chars`` characters. An update or delete names the user as well as the fact,
so no caller can touch another user's facts, and a fact deleted meanwhile stays deleted
(the update finds no row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import Database, utcnow
from engine.text import clean_text
from memory.tables import memory_facts

__all__ = ["ADDED_BY_OWNER", "Fact", "FactError", "FactLimits", "FactStore", "clean_fact"]

#: Where a fact added through the inbox or the API counts as learned: no chat, so a
#: group's profile never shows it (a person's own conversations do, and their deriver
#: may change it).
ADDED_BY_OWNER = "inbox"


class FactError(ValueError):
    """A fact that cannot be stored; the message is a sentence for people."""


@dataclass(frozen=True, slots=True)
class FactLimits:
    max_chars: int = 500  # one fact; a profile's bound is the profile's own
    max_facts: int = 200  # per user: the oldest beyond it are dropped


@dataclass(frozen=True, slots=True)
class Fact:
    id: int
    user_id: int
    body: str
    origin_source: str
    message_ids: tuple[int, ...]
    created_by: str
    created_at: datetime
    updated_at: datetime


def clean_fact(body: object, limits: FactLimits) -> str:
    """``body`` as one stored line, or ``FactError``."""
    if not isinstance(body, str):
        raise FactError("A fact must be text.")
    if "\x00" in body:  # PostgreSQL's text holds no NUL
        raise FactError("A fact cannot hold a NUL character.")
    # A lone surrogate (JSON's "\ud83d", a token that cut an emoji) is no character: it
    # failed the commit, and a model's fact holding one stopped fact derivation for good
    # (until 2026-12-06; found by review). It becomes U+FFFD, as in every outside text.
    line = " ".join(clean_text(body).split())
    if not line:
        raise FactError("A fact cannot be empty.")
    if len(line) > limits.max_chars:
        raise FactError(
            f"A fact is at most {limits.max_chars} characters; this one is {len(line)}."
        )
    return line


class FactStore:
    """``on_change(user_id)`` is called after every committed change (the profile cache)."""

    def __init__(
        self,
        db: Database,
        *,
        limits: FactLimits | None = None,
        on_change: Callable[[int], None] | None = None,
    ) -> None:
        self._db = db
        self.limits = limits or FactLimits()
        self._on_change = on_change or (lambda _user_id: None)

    def changed(self, user_id: int) -> None:
        self._on_change(user_id)

    async def list(self, user_id: int) -> list[Fact]:
        return await self._db.run(list_in, user_id)

    async def list_many(self, user_ids: Sequence[int]) -> dict[int, list[Fact]]:
        return await self._db.run(_list_many, list(user_ids))

    async def get(self, user_id: int, fact_id: int) -> Fact | None:
        return await self._db.run(_get, user_id, fact_id)

    async def add(
        self,
        user_id: int,
        body: str,
        *,
        origin_source: str,
        created_by: str,
        message_ids: Sequence[int] = (),
    ) -> Fact:
        line = clean_fact(body, self.limits)
        fact = await self._db.run(
            add_in, user_id, line, origin_source, created_by, message_ids, self.limits
        )
        self.changed(user_id)
        return fact

    async def update(
        self, user_id: int, fact_id: int, body: str, *, message_ids: Sequence[int] = ()
    ) -> bool:
        """False when the user has no such fact (deleted meanwhile, or someone else's)."""
        line = clean_fact(body, self.limits)
        done = await self._db.run(update_in, user_id, fact_id, line, message_ids)
        if done:
            self.changed(user_id)
        return done

    async def delete(self, user_id: int, fact_id: int) -> bool:
        done = await self._db.run(delete_in, user_id, fact_id)
        if done:
            self.changed(user_id)
        return done

    async def delete_all(self, user_id: int) -> int:
        count = await self._db.run(_delete_all, user_id)
        self.changed(user_id)
        return count


def _fact(row: sa.Row) -> Fact:
    return Fact(
        id=int(row.id),
        user_id=int(row.user_id),
        body=row.body,
        origin_source=row.origin_source,
        message_ids=tuple(int(i) for i in row.message_ids or ()),
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def list_in(conn: Connection, user_id: int) -> list[Fact]:
    f = memory_facts
    rows = conn.execute(sa.select(f).where(f.c.user_id == user_id).order_by(f.c.id))
    return [_fact(r) for r in rows]


def _list_many(conn: Connection, user_ids: list[int]) -> dict[int, list[Fact]]:
    f = memory_facts
    found: dict[int, list[Fact]] = {u: [] for u in user_ids}
    for start in range(0, len(user_ids), 500):
        chunk = user_ids[start : start + 500]
        for row in conn.execute(sa.select(f).where(f.c.user_id.in_(chunk)).order_by(f.c.id)):
            found[int(row.user_id)].append(_fact(row))
    return found


def _get(conn: Connection, user_id: int, fact_id: int) -> Fact | None:
    f = memory_facts
    row = conn.execute(sa.select(f).where(f.c.id == fact_id, f.c.user_id == user_id)).first()
    return None if row is None else _fact(row)


def add_in(
    conn: Connection,
    user_id: int,
    body: str,
    origin_source: str,
    created_by: str,
    message_ids: Sequence[int],
    limits: FactLimits,
) -> Fact:
    """Insert a cleaned fact (``clean_fact``) and drop the user's oldest beyond the limit."""
    now = utcnow()
    fact_id = conn.execute(
        memory_facts.insert().values(
            user_id=user_id,
            body=body,
            origin_source=origin_source,
            message_ids=[int(i) for i in message_ids],
            created_by=created_by,
            created_at=now,
            updated_at=now,
        )
    ).inserted_primary_key[0]
    _trim(conn, user_id, limits.max_facts)
    fact = _get(conn, user_id, int(fact_id))
    assert fact is not None
    return fact


def update_in(
    conn: Connection, user_id: int, fact_id: int, body: str, message_ids: Sequence[int]
) -> bool:
    f = memory_facts
    current = conn.execute(
        sa.select(f.c.message_ids).where(f.c.id == fact_id, f.c.user_id == user_id)
    ).first()
    if current is None:
        return False
    merged = list(dict.fromkeys([*(current.message_ids or ()), *(int(i) for i in message_ids)]))
    result = conn.execute(
        f.update()
        .where(f.c.id == fact_id, f.c.user_id == user_id)
        .values(body=body, message_ids=merged, updated_at=utcnow())
    )
    return bool(result.rowcount)  # 0: deleted while this update waited for its lock


def delete_in(conn: Connection, user_id: int, fact_id: int) -> bool:
    f = memory_facts
    result = conn.execute(f.delete().where(f.c.id == fact_id, f.c.user_id == user_id))
    return bool(result.rowcount)


def _delete_all(conn: Connection, user_id: int) -> int:
    return int(
        conn.execute(memory_facts.delete().where(memory_facts.c.user_id == user_id)).rowcount
    )


def _trim(conn: Connection, user_id: int, keep: int) -> None:
    f = memory_facts
    newest = (
        sa.select(f.c.id)
        .where(f.c.user_id == user_id)
        .order_by(f.c.updated_at.desc(), f.c.id.desc())
        .limit(keep)
    )
    conn.execute(f.delete().where(f.c.user_id == user_id, f.c.id.not_in(newest)))
