"""The Telegram adapter's own tables (paired people, pairing codes, groups that became
supergroups), on the one shared
``MetaData`` (``engine.store.schema``).

Created by the migrations in ``bot/telegram/migrations/`` (0005, 0029); queried by
``bot/telegram/store.py``. Its updates, cards and outbox rows are the delivery layer's
(``bot/delivery/tables.py``, since 0021).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, String, Table, Text

from engine.store import UtcDateTime, metadata

__all__ = ["telegram_chat_moves", "telegram_pairing", "telegram_users"]

_Big = BigInteger()

telegram_users = Table(
    "telegram_users",
    metadata,
    Column("user_id", _Big, primary_key=True, autoincrement=False),
    Column("name", Text, nullable=False, server_default=""),
    Column("paired_by", _Big),
    Column("paired_at", UtcDateTime, nullable=False),
)

telegram_pairing = Table(
    "telegram_pairing",
    metadata,
    Column("code", String(16), primary_key=True),
    Column("user_id", _Big, nullable=False),
    Column("chat_id", _Big, nullable=False),
    Column("name", Text, nullable=False, server_default=""),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("used_at", UtcDateTime),
    Index("ix_tg_pairing_user", "user_id", "created_at"),
)

telegram_chat_moves = Table(
    "telegram_chat_moves",
    metadata,
    Column("old_chat_id", _Big, primary_key=True, autoincrement=False),
    Column("new_chat_id", _Big, nullable=False, unique=True),
    Column("moved_at", UtcDateTime, nullable=False),
)
"""A group that Telegram made a supergroup (a new chat id): its conversation keeps the
old id's source, and whatever is sent to it goes to the new id (``chat_moves.py``)."""
