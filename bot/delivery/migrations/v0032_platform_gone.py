"""Conversations that refuse the bot for good (blocked, removed, deleted), as their last
delivery learnt: a scheduled job of such a chat kept running at every fire, its answer
refused each time (until 2026-12-07); now it pauses, and says why in /jobs."""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "platform_gone",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("conversation", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("since", UtcDateTime, nullable=False),
        sa.Column("outbox_id", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("platform", "conversation"),
    )
