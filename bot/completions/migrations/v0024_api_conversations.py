"""Conversations of the OpenAI-compatible API (bot/completions/conversations.py).

The messages are the engine's, under the hub source ``api:<id>``; the rows map the
client's name for the conversation to that id, and keep the chain of digests of what the
client has seen (``head``, ``length``, and ``api_conversation_heads`` per message) to take
only the messages it does not hold yet.
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import Id, UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "api_conversations",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("agent", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200)),
        sa.Column("head", sa.String(64), nullable=False),
        sa.Column("length", sa.Integer, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    op.create_index(
        "ix_api_conversations_name", "api_conversations", ["agent", "name"], unique=True
    )
    op.create_index("ix_api_conversations_head", "api_conversations", ["agent", "head"])
    op.create_table(
        "api_conversation_heads",
        sa.Column("conversation_id", Id, sa.ForeignKey("api_conversations.id"), primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("head", sa.String(64), nullable=False),
    )
    op.create_index("ix_api_conversation_heads_head", "api_conversation_heads", ["head"])
