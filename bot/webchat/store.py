"""The web chat's conversations in the database (``web_conversations``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.webchat.history import HistoryPage, read_page
from bot.webchat.tables import web_conversations as c
from engine.store import Database, utcnow

__all__ = ["DEFAULT_TITLE", "MAX_TITLE_CHARS", "Conversation", "ConversationStore", "clean_title"]

DEFAULT_TITLE = "New conversation"
MAX_TITLE_CHARS = 200
#: The sidebar lists at most this many (the most recently used).
MAX_LISTED = 200


@dataclass(frozen=True, slots=True)
class Conversation:
    id: int
    title: str
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, object]:
        return {
            "id": str(self.id),
            "title": self.title,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


def clean_title(text: str) -> str:
    """One line of printable text, cut to ``MAX_TITLE_CHARS`` (may be empty)."""
    kept = "".join(ch if ch.isprintable() else " " for ch in text)
    return " ".join(kept.split())[:MAX_TITLE_CHARS]


class ConversationStore:
    """Create, list, rename and hide conversations; a hidden one opens no socket."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utcnow) -> None:
        self._db = db
        self._clock = clock

    async def create(self, title: str = DEFAULT_TITLE) -> Conversation:
        return await self._db.run(_create, clean_title(title) or DEFAULT_TITLE, self._clock())

    async def listed(self, limit: int = MAX_LISTED) -> list[Conversation]:
        """The visible conversations, most recently used first."""
        return await self._db.run(_listed, limit)

    async def get(self, conversation_id: int) -> Conversation | None:
        return await self._db.run(_get, conversation_id)

    async def rename(self, conversation_id: int, title: str) -> Conversation | None:
        return await self._db.run(_rename, conversation_id, title, self._clock())

    async def hide(self, conversation_id: int) -> bool:
        return await self._db.run(_hide, conversation_id, self._clock())

    async def touch(self, conversation_id: int) -> None:
        """Used now: first in the sidebar."""
        await self._db.run(_touch, conversation_id, self._clock())

    async def page(self, session_id: int | None, *, before: int | None, limit: int) -> HistoryPage:
        """A page of a conversation's session's transcript, as the page shows it."""
        return await read_page(self._db, session_id, before=before, limit=limit)

    # -- ConversationDirectory (the socket's view) ---------------------------------------------

    async def is_open(self, conversation_id: str) -> bool:
        number = _number(conversation_id)
        return number is not None and await self.get(number) is not None

    async def used(self, conversation_id: str) -> None:
        number = _number(conversation_id)
        if number is not None:
            await self.touch(number)


def _number(conversation_id: str) -> int | None:
    """A conversation's id as written everywhere (``web:<id>``, its uploads' folder): "01"
    is none (it opened conversation 1 under a second source, ``web:01``; found by review)."""
    if not conversation_id.isascii() or not conversation_id.isdigit() or len(conversation_id) > 18:
        return None
    number = int(conversation_id)
    return number if str(number) == conversation_id else None


def _conversation(row: sa.Row) -> Conversation:
    return Conversation(row.id, row.title, row.created_at, row.updated_at)


_VISIBLE = c.c.hidden_at.is_(None)


def _create(conn: Connection, title: str, now: datetime) -> Conversation:
    new_id = conn.execute(
        sa.insert(c).values(title=title, created_at=now, updated_at=now).returning(c.c.id)
    ).scalar_one()
    return Conversation(new_id, title, now, now)


def _listed(conn: Connection, limit: int) -> list[Conversation]:
    rows = conn.execute(
        sa.select(c).where(_VISIBLE).order_by(c.c.updated_at.desc(), c.c.id.desc()).limit(limit)
    )
    return [_conversation(row) for row in rows]


def _get(conn: Connection, conversation_id: int) -> Conversation | None:
    row = conn.execute(sa.select(c).where(c.c.id == conversation_id, _VISIBLE)).one_or_none()
    return _conversation(row) if row is not None else None


def _rename(
    conn: Connection, conversation_id: int, title: str, now: datetime
) -> Conversation | None:
    done = conn.execute(
        sa.update(c).where(c.c.id == conversation_id, _VISIBLE).values(title=title, updated_at=now)
    )
    return _get(conn, conversation_id) if done.rowcount else None


def _hide(conn: Connection, conversation_id: int, now: datetime) -> bool:
    done = conn.execute(
        sa.update(c).where(c.c.id == conversation_id, _VISIBLE).values(hidden_at=now)
    )
    return done.rowcount > 0


def _touch(conn: Connection, conversation_id: int, now: datetime) -> None:
    conn.execute(sa.update(c).where(c.c.id == conversation_id, _VISIBLE).values(updated_at=now))
