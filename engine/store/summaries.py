"""Compaction summaries of a stack frame (``chat_summaries``).

Each compaction adds a row; the newest one is the frame's summary. ``covers_up_to_message_id``
is the id of the last history row the summary covers: the context loads only rows after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store.db import Database
from engine.store.schema import chat_summaries as s
from engine.store.schema import utcnow


@dataclass(frozen=True, slots=True)
class SummaryRow:
    id: int
    stack_id: int
    content: str
    covers_up_to_message_id: int
    created_at: datetime


_COLUMNS = (s.c.id, s.c.stack_id, s.c.content, s.c.covers_up_to_message_id, s.c.created_at)


class SummaryStore:
    """Append-only: a new compaction supersedes the previous summary, never edits it."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def latest(self, stack_id: int) -> SummaryRow | None:
        return await self._db.run(latest_summary, stack_id)

    async def add(self, stack_id: int, content: str, covers_up_to_message_id: int) -> SummaryRow:
        return await self._db.run(insert_summary, stack_id, content, covers_up_to_message_id)


def latest_summary(conn: Connection, stack_id: int) -> SummaryRow | None:
    row = conn.execute(
        sa.select(*_COLUMNS).where(s.c.stack_id == stack_id).order_by(s.c.id.desc()).limit(1)
    ).first()
    return SummaryRow(*row) if row else None


def insert_summary(
    conn: Connection, stack_id: int, content: str, covers_up_to_message_id: int
) -> SummaryRow:
    now = utcnow()
    result = conn.execute(
        s.insert().values(
            stack_id=stack_id,
            content=content,
            covers_up_to_message_id=covers_up_to_message_id,
            created_at=now,
        )
    )
    return SummaryRow(
        id=result.inserted_primary_key[0],
        stack_id=stack_id,
        content=content,
        covers_up_to_message_id=covers_up_to_message_id,
        created_at=now,
    )
