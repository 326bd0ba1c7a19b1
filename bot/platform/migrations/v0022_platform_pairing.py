"""Paired people and pairing codes for every platform but Telegram (which keeps its own
``telegram_users`` and ``telegram_pairing``), keyed by platform and the platform's user id
as a string (bot/platform/pairing.py).
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "platform_people",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("name", sa.Text, nullable=False, server_default=""),
        sa.Column("paired_by", sa.String(64)),
        sa.Column("paired_at", UtcDateTime, nullable=False),
        sa.PrimaryKeyConstraint("platform", "user_id"),
    )
    op.create_table(
        "platform_pairing",
        sa.Column("code", sa.String(16), primary_key=True),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("chat", sa.String(255), nullable=False),
        sa.Column("name", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.Column("used_at", UtcDateTime),
    )
    op.create_index(
        "ix_platform_pairing_user", "platform_pairing", ["platform", "user_id", "created_at"]
    )
