"""Pending approvals keyed by the durable tool-call id; per-session label and auto-deny."""

import sqlalchemy as sa
from alembic.operations import Operations

from tests.legacy_schema.types import Id, UtcDateTime


def upgrade(op: Operations) -> None:
    with op.batch_alter_table("chat_sessions") as batch:
        batch.add_column(sa.Column("context_label", sa.Text))
        batch.add_column(
            sa.Column("auto_deny_approvals", sa.Boolean, nullable=False, server_default=sa.false())
        )
    op.create_table(
        "tool_approvals",
        sa.Column("tool_call_id", Id, sa.ForeignKey("chat_llm_tools.id"), primary_key=True),
        sa.Column("session_id", Id, sa.ForeignKey("chat_sessions.id"), nullable=False),
        sa.Column("requested_at", UtcDateTime, nullable=False),
        sa.Column("decision", sa.String(16)),
        sa.Column("note", sa.Text),
        sa.Column("decided_at", UtcDateTime),
        sa.CheckConstraint(
            "decision IS NULL OR decision IN ('approved', 'rejected')", name="ck_approvals_decision"
        ),
    )
    op.create_index("ix_approvals_session", "tool_approvals", ["session_id", "decision"])
