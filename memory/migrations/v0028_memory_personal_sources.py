"""Conversations with one person whose source does not say so (a Discord DM's
``discord:<channel>`` reads as a server channel's): their platform records them as it
meets them, and memory treats them as a person's own conversation (``is_personal_in``).
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "memory_personal_sources",
        sa.Column("source", sa.String(255), primary_key=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
