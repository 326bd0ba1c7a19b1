"""A conversation's messages, a page at a time, from the engine's tables.

What the thread shows: the user's messages and the agent's answers of the top frame (a
sub-agent's work shows as the call that ran it), each answer with its tool calls. Pages go
back in time by message id (``before``): a reload or a ``lagged`` socket asks for the
newest page, then scrolls back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.webchat.markdown import render_markdown
from bot.webchat.translate import RESULT_PREVIEW_CHARS, attachments_of, preview
from engine.store import Database
from engine.store import chat_history as h
from engine.store import chat_llm_tools as t
from engine.store import chat_sessions_stack as f

__all__ = ["DEFAULT_PAGE", "MAX_PAGE", "HistoryPage", "read_page"]

DEFAULT_PAGE = 50
MAX_PAGE = 200
_SHOWN_ROLES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class HistoryPage:
    session_id: int | None
    messages: list[dict[str, Any]]
    #: Ask for ``before=<this>`` to get the page before; ``None``: this is the first.
    next_before: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "messages": self.messages,
            "next_before": self.next_before,
        }


async def read_page(
    db: Database, session_id: int | None, *, before: int | None, limit: int
) -> HistoryPage:
    if session_id is None:
        return HistoryPage(None, [], None)
    return await db.run(_page, session_id, before, limit)


def _page(conn: Connection, session_id: int, before: int | None, limit: int) -> HistoryPage:
    query = (
        sa.select(
            h.c.id,
            h.c.role,
            h.c.content,
            h.c.status,
            h.c.is_synthetic,
            h.c.created_at,
            h.c["metadata"].label("meta"),
        )
        .join(f, f.c.id == h.c.session_stack_id)
        .where(f.c.session_id == session_id, f.c.depth == 0, h.c.role.in_(_SHOWN_ROLES))
        .order_by(h.c.id.desc())
        .limit(limit + 1)
    )
    if before is not None:
        query = query.where(h.c.id < before)
    rows = conn.execute(query).all()
    more = len(rows) > limit
    rows = list(reversed(rows[:limit]))
    # Where the next page starts: the oldest row read, before any is left out (a page of
    # notifications only ended the history there; found by review).
    oldest = rows[0].id if rows else None
    calls: dict[int, list[dict[str, Any]]] = {}
    # A synthetic assistant row is how background work reached the agent (a notification,
    # an async task's result: ``engine.session.turn.injection``): not something it said or did.
    rows = [row for row in rows if not (row.role == "assistant" and row.is_synthetic)]
    answers = [row.id for row in rows if row.role == "assistant"]
    if answers:
        for call in conn.execute(
            sa.select(t.c.id, t.c.message_id, t.c.name, t.c.arguments, t.c.result, t.c.status)
            .where(t.c.message_id.in_(answers))
            .order_by(t.c.id)
        ):
            calls.setdefault(call.message_id, []).append(
                {
                    "tool_call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments or "",
                    "status": call.status,
                    "preview": preview(call.result or "", RESULT_PREVIEW_CHARS),
                }
            )
    messages = [
        {
            "id": row.id,
            "role": row.role,
            "text": row.content,
            "html": render_markdown(row.content) if row.role == "assistant" else None,
            "status": row.status,
            "synthetic": bool(row.is_synthetic),
            "created_at": row.created_at.isoformat(),
            "tools": calls.get(row.id, []),
            "attachments": [item.model_dump() for item in _attachments(row)],
        }
        for row in rows
        if row.role == "user" or row.content or calls.get(row.id)
    ]
    next_before = oldest if more else None
    return HistoryPage(session_id, messages, next_before)


def _attachments(row: sa.Row) -> list[Any]:
    meta = row.meta if isinstance(row.meta, dict) else {}
    return attachments_of(meta.get("attachments")) if row.role == "user" else []
