"""Sessions, stack frames, history, tool calls, summaries, sources, scratchpad, grants."""

import sqlalchemy as sa
from alembic.operations import Operations

from tests.legacy_schema.types import Id, UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "chat_sessions",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("title", sa.Text),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=False, server_default="main"),
        sa.Column("is_interactive", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("is_ephemeral", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("run_context", sa.JSON),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_chat_sessions_source", "chat_sessions", ["source", "id"])
    op.create_table(
        "chat_sessions_stack",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("session_id", Id, sa.ForeignKey("chat_sessions.id"), nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("agent_prompt", sa.Text),
        sa.Column("depth", sa.Integer, nullable=False, server_default="0"),
        sa.Column("parent_tool_call_id", Id),
        sa.Column("terminated_at", UtcDateTime),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_index(
        "ix_stack_session_active", "chat_sessions_stack", ["session_id", "terminated_at", "depth"]
    )
    op.create_table(
        "chat_history",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("session_stack_id", Id, sa.ForeignKey("chat_sessions_stack.id"), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False, server_default=""),
        sa.Column("status", sa.String(16), nullable=False, server_default="ok"),
        sa.Column("input_tokens", sa.Integer),
        sa.Column("output_tokens", sa.Integer),
        sa.Column("duration_ms", sa.Integer),
        sa.Column("model", sa.String(255)),
        sa.Column("is_synthetic", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("reasoning_content", sa.Text),
        sa.Column("cost", sa.Float),
        sa.Column("metadata", sa.JSON),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.CheckConstraint("role IN ('user', 'assistant', 'agent')", name="ck_history_role"),
        sa.CheckConstraint("status IN ('ok', 'failed')", name="ck_history_status"),
    )
    op.create_index("ix_history_stack", "chat_history", ["session_stack_id", "id"])
    op.create_table(
        "chat_llm_tools",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("message_id", Id, sa.ForeignKey("chat_history.id"), nullable=False),
        sa.Column("llm_call_id", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("arguments", sa.Text),
        sa.Column("result", sa.Text),
        sa.Column("status", sa.String(16), nullable=False, server_default="running"),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.CheckConstraint(
            "status IN ('running', 'pending', 'done', 'failed', 'cancelled', 'rejected')",
            name="ck_tools_status",
        ),
    )
    op.create_index("ix_tools_message", "chat_llm_tools", ["message_id", "id"])
    op.create_index("ix_tools_status", "chat_llm_tools", ["status"])
    op.create_table(
        "chat_summaries",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("stack_id", Id, sa.ForeignKey("chat_sessions_stack.id"), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("covers_up_to_message_id", Id, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_summaries_stack", "chat_summaries", ["stack_id", "id"])
    op.create_table(
        "sources",
        sa.Column("source", sa.String(255), primary_key=True),
        sa.Column("session_id", Id, sa.ForeignKey("chat_sessions.id"), nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "session_scratchpad",
        sa.Column("session_id", Id, sa.ForeignKey("chat_sessions.id"), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    for table, owner, target in (
        ("session_tool_grants", "session_id", "chat_sessions.id"),
        ("stack_tool_grants", "stack_id", "chat_sessions_stack.id"),
    ):
        op.create_table(
            table,
            sa.Column(owner, Id, sa.ForeignKey(target), primary_key=True),
            sa.Column("tool_group", sa.String(255), primary_key=True),
            sa.Column("created_at", UtcDateTime, nullable=False),
        )
