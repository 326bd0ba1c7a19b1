"""Telegram adapter: stored updates, paired users, pairing codes, cards, the outbox."""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import Id, UtcDateTime

Big = sa.BigInteger()


def upgrade(op: Operations) -> None:
    op.create_table(
        "telegram_updates",
        sa.Column("update_id", Big, primary_key=True, autoincrement=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("received_at", UtcDateTime, nullable=False),
        sa.Column("handled_at", UtcDateTime),
    )
    op.create_index("ix_tg_updates_unhandled", "telegram_updates", ["handled_at", "update_id"])
    op.create_table(
        "telegram_users",
        sa.Column("user_id", Big, primary_key=True, autoincrement=False),
        sa.Column("name", sa.Text, nullable=False, server_default=""),
        sa.Column("paired_by", Big),
        sa.Column("paired_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "telegram_pairing",
        sa.Column("code", sa.String(16), primary_key=True),
        sa.Column("user_id", Big, nullable=False),
        sa.Column("chat_id", Big, nullable=False),
        sa.Column("name", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.Column("used_at", UtcDateTime),
    )
    op.create_index("ix_tg_pairing_user", "telegram_pairing", ["user_id", "created_at"])
    op.create_table(
        "telegram_cards",
        sa.Column("tool_call_id", Big, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("chat_id", Big, nullable=False),
        sa.Column("message_id", Big),
        sa.Column("text", sa.Text, nullable=False, server_default=""),
        sa.Column("entities", sa.JSON),
        sa.Column("state", sa.String(16), nullable=False, server_default="open"),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_tg_cards_message", "telegram_cards", ["chat_id", "message_id"])
    op.create_table(
        "telegram_outbox",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("chat_id", Big, nullable=False),
        sa.Column("dedupe_key", sa.String(255), nullable=False, unique=True),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("message_id", Big),
        sa.Column("error", sa.Text),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("sent_at", UtcDateTime),
    )
    op.create_index("ix_tg_outbox_status", "telegram_outbox", ["status", "id"])
