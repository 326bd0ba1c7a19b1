"""Web chat conversations: one row per conversation the sidebar lists (bot/webchat/store.py).

The messages are the engine's, under the hub source ``web:<id>``; the row holds the title,
when it began and was last used (the sidebar's order), and ``hidden_at`` once deleted.
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import Id, UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "web_conversations",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("hidden_at", UtcDateTime),
    )
    op.create_index("ix_web_conversations_listed", "web_conversations", ["hidden_at", "updated_at"])
