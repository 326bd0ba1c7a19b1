"""Which chathub conversation a request continues, and which of its messages are new.

A conversation is the hub source ``api:<id>``. Its row keeps ``held``: the digests of the
messages the client has seen in it (the user's, and each answer exactly as it was sent),
and ``head``, the digest of that list. A request's dialog (its messages but the system
ones) is compared with ``held``: the longest common beginning is what the conversation
has already taken; the rest is new. So a client that sends the whole history every time
adds nothing twice, and one that sends only its last message adds just that.

Finding the conversation:

- a request that names one (``X-Chathub-Conversation``, else ``user``) continues the
  conversation of that name and agent, made on first use;
- a request that names none continues the unnamed conversation whose ``head`` is its
  history without the last message (Open WebUI, LibreChat and most scripts send the
  whole history every time); a history no conversation ends with (the first message, an
  edited or regenerated one) starts a conversation of its own, built from what it carries.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.completions.layer import SOURCE_PREFIX
from bot.completions.tables import api_conversations as c
from engine.store import Database, insert_for, utcnow

__all__ = ["Conversation", "ConversationMap", "digest", "head_of", "taken_count"]


def digest(role: str, text: str) -> str:
    """One message as the conversation remembers it: its role and its text, with line
    ends and surrounding spaces as clients tend to change them."""
    normal = text.replace("\r\n", "\n").strip()
    return hashlib.sha256(f"{role}\0{normal}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def head_of(held: Sequence[str]) -> str:
    return hashlib.sha256("|".join(held).encode()).hexdigest()


def taken_count(held: Sequence[str], dialog: Sequence[str]) -> int:
    """How many of the dialog's first messages the conversation holds already."""
    count = 0
    for mine, theirs in zip(held, dialog, strict=False):
        if mine != theirs:
            break
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class Conversation:
    id: int
    agent: str
    name: str | None
    held: tuple[str, ...]

    @property
    def source(self) -> str:
        return f"{SOURCE_PREFIX}{self.id}"


class ConversationMap:
    """The conversations in ``api_conversations``."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utcnow) -> None:
        self._db = db
        self._clock = clock

    async def find(self, agent: str, name: str | None, history: Sequence[str]) -> Conversation:
        """The conversation a request continues (made when there is none): by ``name``,
        else the unnamed one whose held messages are ``history`` (the dialog before its
        last message)."""
        return await self._db.run(_find, agent, name, tuple(history), self._clock())

    async def get(self, conversation: Conversation) -> Conversation:
        """``conversation`` as stored now."""
        return await self._db.run(_get, conversation.id)

    async def hold(self, conversation: Conversation, digests: Sequence[str]) -> Conversation:
        """The client has seen ``digests`` too (appended to what it held)."""
        held = (*conversation.held, *digests)
        await self._db.run(_hold, conversation.id, held, self._clock())
        return Conversation(conversation.id, conversation.agent, conversation.name, held)


def _conversation(row: sa.Row) -> Conversation:
    return Conversation(row.id, row.agent, row.name, tuple(row.held or ()))


def _find(
    conn: Connection, agent: str, name: str | None, history: tuple[str, ...], now: datetime
) -> Conversation:
    if name is not None:
        named = sa.select(c).where(c.c.agent == agent, c.c.name == name)
        row = conn.execute(named).first()
        if row is None:  # two first requests of one name (two processes): one row
            conn.execute(
                insert_for(conn.dialect.name, c)
                .values(
                    agent=agent,
                    name=name,
                    held=[],
                    head=head_of(()),
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict_do_nothing()
            )
            row = conn.execute(named).one()
        return _conversation(row)
    if history:
        row = conn.execute(
            sa.select(c)
            .where(c.c.agent == agent, c.c.name.is_(None), c.c.head == head_of(history))
            .order_by(c.c.updated_at.desc(), c.c.id.desc())
            .limit(1)
        ).first()
        if row is not None and tuple(row.held) == history:
            return _conversation(row)
    return _create(conn, agent, None, (), now)


def _get(conn: Connection, conversation_id: int) -> Conversation:
    return _conversation(conn.execute(sa.select(c).where(c.c.id == conversation_id)).one())


def _create(
    conn: Connection, agent: str, name: str | None, held: tuple[str, ...], now: datetime
) -> Conversation:
    new_id = conn.execute(
        sa.insert(c)
        .values(
            agent=agent,
            name=name,
            held=list(held),
            head=head_of(held),
            created_at=now,
            updated_at=now,
        )
        .returning(c.c.id)
    ).scalar_one()
    return Conversation(new_id, agent, name, held)


def _hold(conn: Connection, conversation_id: int, held: tuple[str, ...], now: datetime) -> None:
    conn.execute(
        sa.update(c)
        .where(c.c.id == conversation_id)
        .values(held=list(held), head=head_of(held), updated_at=now)
    )
