"""The delivery layer's tables, keyed by platform and conversation, on the one shared
``MetaData`` (``engine.store.schema``).

Created by ``bot/delivery/migrations/`` (0021, which moved Telegram's own tables into
them); queried by ``bot/delivery/store.py``. A conversation and a platform message id are
strings: a Telegram chat id, a Discord channel snowflake, a Slack channel, a Matrix room.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from engine.store import Id, UtcDateTime, metadata

__all__ = ["platform_cards", "platform_events", "platform_gone", "platform_outbox"]

#: What a platform is called in every table (``telegram``, ``discord``, ...).
_Platform = String(32)
_Conversation = String(255)

#: Inbound events stored once each (insert-if-new by the platform's event id), marked
#: handled in the commit that accepts the message they carry.
platform_events = Table(
    "platform_events",
    metadata,
    Column("platform", _Platform, nullable=False),
    Column("event_id", String(255), nullable=False),
    #: The platform's own order where it has one (Telegram's update_id); else NULL.
    Column("seq", BigInteger()),
    Column("payload", JSON, nullable=False),
    Column("received_at", UtcDateTime, nullable=False),
    Column("handled_at", UtcDateTime),
    PrimaryKeyConstraint("platform", "event_id"),
    Index("ix_platform_events_unhandled", "platform", "handled_at", "seq"),
)

#: A card (approval, question) shown in a conversation, and the platform message it is.
platform_cards = Table(
    "platform_cards",
    metadata,
    Column("platform", _Platform, nullable=False),
    Column("tool_call_id", Id, nullable=False, autoincrement=False),
    Column("kind", String(16), nullable=False),
    Column("source", String(255), nullable=False),
    Column("conversation", _Conversation, nullable=False),
    Column("message_id", String(255)),
    Column("text", Text, nullable=False, server_default=""),
    #: What the platform renders beside the text (Telegram: its entities).
    Column("extra", JSON),
    Column("state", String(16), nullable=False, server_default="open"),
    Column("created_at", UtcDateTime, nullable=False),
    #: The ❌ reject window open on it: ``{"until": <ISO time>, "by": <name>, "user": <id>}``
    #: (migration 0031).
    Column("reject_window", JSON),
    PrimaryKeyConstraint("platform", "tool_call_id"),
    Index("ix_platform_cards_message", "platform", "conversation", "message_id"),
)

#: What a conversation is sent exactly once: recorded in the answer's own transaction,
#: claimed, sent, marked; postponed with backoff; failed with a reason; in a fleet, held
#: by the process that recorded or claimed it (docs/scale-out.md).
platform_outbox = Table(
    "platform_outbox",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("platform", _Platform, nullable=False),
    Column("conversation", _Conversation, nullable=False),
    Column("dedupe_key", String(255), nullable=False),
    Column("payload", JSON, nullable=False),
    Column("status", String(16), nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("message_id", String(255)),
    Column("error", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("sent_at", UtcDateTime),
    #: A postponed delivery's schedule; NULL while the process that took it is sending it.
    Column("next_attempt_at", UtcDateTime),
    Column("last_attempt_at", UtcDateTime),
    #: The fleet process that recorded it (NULL: one process).
    Column("recorded_by", String(200)),
    #: The fleet process that claimed it to send it again (NULL: the recorder sends).
    Column("sending_by", String(200)),
    UniqueConstraint("platform", "dedupe_key", name="uq_platform_outbox_key"),
    Index("ix_platform_outbox_status", "status", "id"),
    Index("ix_platform_outbox_due", "status", "next_attempt_at"),
    Index("ix_platform_outbox_conversation", "platform", "conversation", "status", "id"),
)

#: Conversations that take nothing more from the bot, as a delivery there was last refused
#: for good (``bot.delivery.Gone``: blocked, removed, deleted): their scheduled jobs pause.
#: Cleared when a later delivery there goes through, or a job there is resumed (migration
#: 0032).
platform_gone = Table(
    "platform_gone",
    metadata,
    Column("platform", _Platform, nullable=False),
    Column("conversation", _Conversation, nullable=False),
    Column("reason", Text, nullable=False),
    Column("since", UtcDateTime, nullable=False),
    #: The refused row: only a row recorded after it clears the note (an earlier one's
    #: sent mark, written late, says nothing of the refusal).
    Column("outbox_id", BigInteger, nullable=False),
    PrimaryKeyConstraint("platform", "conversation"),
)
