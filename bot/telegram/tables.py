"""The Telegram adapter's tables, on the one shared ``MetaData`` (``engine.store.schema``).

Created by the migrations in ``bot/telegram/migrations/`` (0005, 0008); queried by
``bot/telegram/store.py``.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, String, Table, Text

from engine.store.schema import Id, UtcDateTime, metadata

__all__ = [
    "telegram_cards",
    "telegram_outbox",
    "telegram_pairing",
    "telegram_updates",
    "telegram_users",
]

_Big = BigInteger()

telegram_updates = Table(
    "telegram_updates",
    metadata,
    Column("update_id", _Big, primary_key=True, autoincrement=False),
    Column("payload", JSON, nullable=False),
    Column("received_at", UtcDateTime, nullable=False),
    Column("handled_at", UtcDateTime),
    Index("ix_tg_updates_unhandled", "handled_at", "update_id"),
)

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

telegram_cards = Table(
    "telegram_cards",
    metadata,
    Column("tool_call_id", _Big, primary_key=True, autoincrement=False),
    Column("kind", String(16), nullable=False),
    Column("source", String(255), nullable=False),
    Column("chat_id", _Big, nullable=False),
    Column("message_id", _Big),
    Column("text", Text, nullable=False, server_default=""),
    Column("entities", JSON),
    Column("state", String(16), nullable=False, server_default="open"),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_tg_cards_message", "chat_id", "message_id"),
)

telegram_outbox = Table(
    "telegram_outbox",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("chat_id", _Big, nullable=False),
    Column("dedupe_key", String(255), nullable=False, unique=True),
    Column("payload", JSON, nullable=False),
    Column("status", String(16), nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("message_id", _Big),
    Column("error", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("sent_at", UtcDateTime),
    # v0008: a postponed delivery's schedule (bot/telegram/redelivery.py). NULL while the
    # process that recorded the row is sending it.
    Column("next_attempt_at", UtcDateTime),
    Column("last_attempt_at", UtcDateTime),
    # v0017: the fleet process that recorded it (NULL: one process, or before 0017).
    Column("recorded_by", String(200)),
    # v0018: the fleet process that claimed it to send it again (NULL: the recorder sends).
    Column("sending_by", String(200)),
    Index("ix_tg_outbox_status", "status", "id"),
    Index("ix_tg_outbox_due", "status", "next_attempt_at"),
)
