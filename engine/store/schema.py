"""The engine's tables (SQLAlchemy Core), and the one ``MetaData`` and column types that every
layer's tables share (``bot/telegram/tables.py``, ``scheduler/tables.py``, ``bot/http/tables.py``).

Migrations create the tables; queries import them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    false,
    true,
)
from sqlalchemy.engine import Connection, Dialect

metadata = MetaData()


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python; naive UTC on disk so SQLite and PostgreSQL agree."""

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


# Primary keys are BIGINT on PostgreSQL and INTEGER (rowid alias) on SQLite.
Id = BigInteger().with_variant(Integer(), "sqlite")

chat_sessions = Table(
    "chat_sessions",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("title", Text),
    Column("source", String(255), nullable=False),
    Column("agent_id", String(64), nullable=False, server_default="main"),
    Column("is_interactive", Boolean, nullable=False, server_default=true()),
    Column("is_ephemeral", Boolean, nullable=False, server_default=false()),
    Column("run_context", JSON),
    Column("created_at", UtcDateTime, nullable=False),
    # v0003: a human-readable label ("CronJob: <title>") and headless auto-deny.
    Column("context_label", Text),
    Column("auto_deny_approvals", Boolean, nullable=False, server_default=false()),
    Index("ix_chat_sessions_source", "source", "id"),
)

chat_sessions_stack = Table(
    "chat_sessions_stack",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("session_id", Id, ForeignKey("chat_sessions.id"), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("agent_prompt", Text),
    Column("depth", Integer, nullable=False, server_default="0"),
    # Not a foreign key: chat_llm_tools references chat_history which references this table.
    Column("parent_tool_call_id", Id),
    Column("terminated_at", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    # The frame's last row when a turn ended without an answer and the user was told
    # (a failure, exhaustion): recovery resumes nothing up to it (0009).
    Column("ended_turn_at", Id),
    Index("ix_stack_session_active", "session_id", "terminated_at", "depth"),
)

chat_history = Table(
    "chat_history",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("session_stack_id", Id, ForeignKey("chat_sessions_stack.id"), nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False, server_default=""),
    Column("status", String(16), nullable=False, server_default="ok"),
    Column("input_tokens", Integer),
    Column("output_tokens", Integer),
    Column("duration_ms", Integer),
    Column("model", String(255)),
    Column("is_synthetic", Boolean, nullable=False, server_default=false()),
    Column("reasoning_content", Text),
    Column("cost", Float),
    Column("metadata", JSON),
    Column("created_at", UtcDateTime, nullable=False),
    CheckConstraint("role IN ('user', 'assistant', 'agent')", name="ck_history_role"),
    CheckConstraint("status IN ('ok', 'failed')", name="ck_history_status"),
    Index("ix_history_stack", "session_stack_id", "id"),
)

TOOL_STATUSES = ("running", "pending", "done", "failed", "cancelled", "rejected")

chat_llm_tools = Table(
    "chat_llm_tools",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("message_id", Id, ForeignKey("chat_history.id"), nullable=False),
    Column("llm_call_id", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("arguments", Text),
    Column("result", Text),
    Column("status", String(16), nullable=False, server_default="running"),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # Set just before a call that is not safe to repeat starts its effect (0007): such a
    # call interrupted by a crash is reported to the model, never run again.
    Column("launched_at", UtcDateTime),
    # The command's process group and its leader's identity (boot id and start time), so
    # recovery can make sure the group is gone, and never kills a reused id (0007).
    Column("process_group", BigInteger),
    Column("process_start", String(80)),
    CheckConstraint(
        "status IN ('running', 'pending', 'done', 'failed', 'cancelled', 'rejected')",
        name="ck_tools_status",
    ),
    Index("ix_tools_message", "message_id", "id"),
    Index("ix_tools_status", "status"),
)

chat_summaries = Table(
    "chat_summaries",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("stack_id", Id, ForeignKey("chat_sessions_stack.id"), nullable=False),
    Column("content", Text, nullable=False),
    Column("covers_up_to_message_id", Id, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_summaries_stack", "stack_id", "id"),
)

sources = Table(
    "sources",
    metadata,
    Column("source", String(255), primary_key=True),
    Column("session_id", Id, ForeignKey("chat_sessions.id"), nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # v0004: the model picked with /model (None: automatic).
    Column("preferred_model", String(255)),
)

session_scratchpad = Table(
    "session_scratchpad",
    metadata,
    Column("session_id", Id, ForeignKey("chat_sessions.id"), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

session_tool_grants = Table(
    "session_tool_grants",
    metadata,
    Column("session_id", Id, ForeignKey("chat_sessions.id"), primary_key=True),
    Column("tool_group", String(255), primary_key=True),
    Column("created_at", UtcDateTime, nullable=False),
)

stack_tool_grants = Table(
    "stack_tool_grants",
    metadata,
    Column("stack_id", Id, ForeignKey("chat_sessions_stack.id"), primary_key=True),
    Column("tool_group", String(255), primary_key=True),
    Column("created_at", UtcDateTime, nullable=False),
)

# Approval rules (engine/approval), migration v0002.
permission_groups = Table(
    "permission_groups",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("description", Text, nullable=False, server_default=""),
    # Set once the group's default rules were inserted; they are never inserted again.
    Column("seeded", Boolean, nullable=False, server_default=false()),
    Column("created_at", UtcDateTime, nullable=False),
)


def seed_rows(conn: Connection) -> None:
    """The rows the engine's migrations put in a new database (v0002's default group), for
    a database created whole (``engine.store.db``)."""
    conn.execute(
        permission_groups.insert().values(
            name="default",
            description="Rules every session falls back to",
            seeded=False,
            created_at=utcnow(),
        )
    )


approval_rules = Table(
    "approval_rules",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("group_name", String(64), ForeignKey("permission_groups.name"), nullable=False),
    Column("agent_id", String(64)),
    Column("source", String(255)),
    Column("tool_pattern", String(255), nullable=False),
    Column("path_pattern", Text),
    Column("action", String(16), nullable=False),
    Column("priority", Integer, nullable=False, server_default="100"),
    Column("note", Text, nullable=False, server_default=""),
    Column("created_at", UtcDateTime, nullable=False),
    CheckConstraint("action IN ('allow', 'deny', 'require')", name="ck_rules_action"),
    Index("ix_rules_group", "group_name", "priority", "id"),
)

# v0003: one approval record per gated tool call, keyed by the durable tool-call id.
APPROVAL_DECISIONS = ("approved", "rejected")

tool_approvals = Table(
    "tool_approvals",
    metadata,
    Column("tool_call_id", Id, ForeignKey("chat_llm_tools.id"), primary_key=True),
    Column("session_id", Id, ForeignKey("chat_sessions.id"), nullable=False),
    Column("requested_at", UtcDateTime, nullable=False),
    Column("decision", String(16)),
    Column("note", Text),
    Column("decided_at", UtcDateTime),
    # Whose message started the turn that raised the call (0010): with APPROVERS
    # requester+owner they and the owner may decide. NULL for background sessions.
    Column("requester_id", String(64)),
    Column("requester_name", String(255)),
    # The chat where a call of another session asks (0020): a job run's card; a decision
    # there may reach this call. NULL: asked in the session's own chat.
    Column("shown_in", String(255)),
    CheckConstraint(
        "decision IS NULL OR decision IN ('approved', 'rejected')", name="ck_approvals_decision"
    ),
    Index("ix_approvals_session", "session_id", "decision"),
)

# v0004: ChatHub. A message waits here from the moment it is accepted until it becomes a
# chat_history row (deleted in that same transaction) or a /stop or /clear drops it.
queued_messages = Table(
    "queued_messages",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("source", String(255), nullable=False),
    Column("session_id", Id, ForeignKey("chat_sessions.id"), nullable=False),
    Column("content", Text, nullable=False),
    Column("is_synthetic", Boolean, nullable=False, server_default=false()),
    Column("metadata", JSON),
    Column("options", JSON),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_queued_source", "source", "id"),
)

app_settings = Table(
    "app_settings",
    metadata,
    Column("key", String(255), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

# v0015: named leases (scale-out: the Telegram receiver, later per-source ownership). Times
# are the database's own clock in epoch seconds (engine/store/leases.py), never a process's.
leases = Table(
    "leases",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("owner", String(255), nullable=False),
    # The fencing token: +1 at every change of owner, never reset (a release keeps the row).
    Column("epoch", BigInteger, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("acquired_at", Float, nullable=False),
)
