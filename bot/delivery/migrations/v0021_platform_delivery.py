"""The delivery layer: events, cards and the outbox of every platform, keyed by platform
and conversation. Telegram's ``telegram_updates``, ``telegram_cards`` and
``telegram_outbox`` move into them row for row (ids, times and marks kept), and go.
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import Id, UtcDateTime

TELEGRAM = "telegram"


def upgrade(op: Operations) -> None:
    op.create_table(
        "platform_events",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("event_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.BigInteger()),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("received_at", UtcDateTime, nullable=False),
        sa.Column("handled_at", UtcDateTime),
        sa.PrimaryKeyConstraint("platform", "event_id"),
    )
    op.create_index(
        "ix_platform_events_unhandled", "platform_events", ["platform", "handled_at", "seq"]
    )
    op.create_table(
        "platform_cards",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("tool_call_id", Id, nullable=False, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("conversation", sa.String(255), nullable=False),
        sa.Column("message_id", sa.String(255)),
        sa.Column("text", sa.Text, nullable=False, server_default=""),
        sa.Column("extra", sa.JSON),
        sa.Column("state", sa.String(16), nullable=False, server_default="open"),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.PrimaryKeyConstraint("platform", "tool_call_id"),
    )
    op.create_index(
        "ix_platform_cards_message", "platform_cards", ["platform", "conversation", "message_id"]
    )
    op.create_table(
        "platform_outbox",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("conversation", sa.String(255), nullable=False),
        sa.Column("dedupe_key", sa.String(255), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("message_id", sa.String(255)),
        sa.Column("error", sa.Text),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("sent_at", UtcDateTime),
        sa.Column("next_attempt_at", UtcDateTime),
        sa.Column("last_attempt_at", UtcDateTime),
        sa.Column("recorded_by", sa.String(200)),
        sa.Column("sending_by", sa.String(200)),
        sa.UniqueConstraint("platform", "dedupe_key", name="uq_platform_outbox_key"),
    )
    op.create_index("ix_platform_outbox_status", "platform_outbox", ["status", "id"])
    op.create_index("ix_platform_outbox_due", "platform_outbox", ["status", "next_attempt_at"])
    op.create_index(
        "ix_platform_outbox_conversation",
        "platform_outbox",
        ["platform", "conversation", "status", "id"],
    )
    _move_telegram(op)


def _move_telegram(op: Operations) -> None:
    conn = op.get_bind()
    conn.execute(
        sa.text(
            "INSERT INTO platform_events "
            "(platform, event_id, seq, payload, received_at, handled_at) "
            f"SELECT '{TELEGRAM}', CAST(update_id AS VARCHAR(255)), update_id, payload, "
            "received_at, handled_at FROM telegram_updates"
        )
    )
    conn.execute(
        sa.text(
            "INSERT INTO platform_cards (platform, tool_call_id, kind, source, conversation, "
            "message_id, text, extra, state, created_at) "
            f"SELECT '{TELEGRAM}', tool_call_id, kind, source, CAST(chat_id AS VARCHAR(255)), "
            "CAST(message_id AS VARCHAR(255)), text, entities, state, created_at "
            "FROM telegram_cards"
        )
    )
    conn.execute(
        sa.text(
            "INSERT INTO platform_outbox (id, platform, conversation, dedupe_key, payload, "
            "status, attempts, message_id, error, created_at, sent_at, next_attempt_at, "
            "last_attempt_at, recorded_by, sending_by) "
            f"SELECT id, '{TELEGRAM}', CAST(chat_id AS VARCHAR(255)), dedupe_key, payload, "
            "status, attempts, CAST(message_id AS VARCHAR(255)), error, created_at, sent_at, "
            "next_attempt_at, last_attempt_at, recorded_by, sending_by FROM telegram_outbox"
        )
    )
    if conn.dialect.name == "postgresql":  # the ids moved as they were: the sequence follows
        conn.execute(
            sa.text(
                "SELECT setval(pg_get_serial_sequence('platform_outbox', 'id'), "
                "coalesce(max(id), 0) + 1, false) FROM platform_outbox"
            )
        )
    op.drop_table("telegram_updates")
    op.drop_table("telegram_cards")
    op.drop_table("telegram_outbox")
