"""The OpenAI-compatible API's tables, on the one shared ``MetaData`` (``engine.store.schema``).

Created by ``bot/completions/migrations/v0024_api_conversations.py``; used by
``bot/completions/conversations.py``. A conversation is the hub source ``api:<id>``: its
messages are the engine's; these rows map a client's name for it to that id and remember
what the client has seen of it as a chain of digests, so a client that sends the whole
history every time adds nothing twice.
"""

from __future__ import annotations

from sqlalchemy import Column, ForeignKey, Index, Integer, String, Table

from engine.store import Id, UtcDateTime, metadata

__all__ = ["api_conversation_heads", "api_conversations"]

api_conversations = Table(
    "api_conversations",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    #: The agent it talks to (the request's ``model``).
    Column("agent", String(64), nullable=False),
    #: The client's name for it (``X-Chathub-Conversation`` or ``user``); ``None``: it is
    #: found by its history (``head``) only.
    Column("name", String(200)),
    #: The chain digest of every message the client has seen in it, and how many.
    Column("head", String(64), nullable=False),
    Column("length", Integer, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    #: The digest of the instructions (system, developer messages) its first request
    #: carried: a first message sent again must carry the same (migration 0026).
    Column("opening", String(64)),
    Index("ix_api_conversations_name", "agent", "name", unique=True),
    Index("ix_api_conversations_head", "agent", "head"),
)

#: The chain digest after each message the client has seen (``position`` from 1): a
#: request's history is matched against it in one indexed query, whatever its length.
api_conversation_heads = Table(
    "api_conversation_heads",
    metadata,
    Column("conversation_id", Id, ForeignKey("api_conversations.id"), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("head", String(64), nullable=False),
    Index("ix_api_conversation_heads_head", "head"),
)
