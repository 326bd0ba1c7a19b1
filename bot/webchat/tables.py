"""The web chat's table, on the one shared ``MetaData`` (``engine.store.schema``).

Created by ``bot/webchat/migrations/v0012_web_conversations.py``; used by
``bot/webchat/store.py``. A conversation is the hub source ``web:<id>``: its messages
are the engine's (``chat_history`` of that source's session); this row holds only what
the sidebar shows.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, String, Table

from engine.store import Id, UtcDateTime, metadata

__all__ = ["web_conversations"]

web_conversations = Table(
    "web_conversations",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("title", String(200), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    #: Set by delete: the sidebar no longer lists it and no socket opens it; the
    #: conversation's messages stay in the engine's tables.
    Column("hidden_at", UtcDateTime),
    Index("ix_web_conversations_listed", "hidden_at", "updated_at"),
)
