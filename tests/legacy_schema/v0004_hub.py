"""ChatHub: the durable per-source message queue, app settings, a source's chosen model."""

import sqlalchemy as sa
from alembic.operations import Operations

from tests.legacy_schema.types import Id, UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "queued_messages",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("session_id", Id, sa.ForeignKey("chat_sessions.id"), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("is_synthetic", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("metadata", sa.JSON),
        sa.Column("options", sa.JSON),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_queued_source", "queued_messages", ["source", "id"])
    op.create_table(
        "app_settings",
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    with op.batch_alter_table("sources") as batch:
        batch.add_column(sa.Column("preferred_model", sa.String(255)))
