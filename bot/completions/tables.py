"""The OpenAI-compatible API's table, on the one shared ``MetaData`` (``engine.store.schema``).

Created by ``bot/completions/migrations/v0024_api_conversations.py``; used by
``bot/completions/conversations.py``. A conversation is the hub source ``api:<id>``: its
messages are the engine's; this row maps a client's name for it to that id and remembers
what the client has seen, as digests, so a client that sends the whole history every
time adds nothing twice.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, Index, String, Table

from engine.store import Id, UtcDateTime, metadata

__all__ = ["api_conversations"]

api_conversations = Table(
    "api_conversations",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    #: The agent it talks to (the request's ``model``).
    Column("agent", String(64), nullable=False),
    #: The client's name for it (``X-Chathub-Conversation`` or ``user``); ``None``: it was
    #: recognised by its history (``head``) only.
    Column("name", String(200)),
    #: The digests of the messages it holds, as the client sends them back, oldest first.
    Column("held", JSON, nullable=False),
    #: The digest of ``held`` as a whole: how a request that names no conversation finds
    #: the one its history continues.
    Column("head", String(64), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Index("ix_api_conversations_name", "agent", "name", unique=True),
    Index("ix_api_conversations_head", "agent", "head"),
)
