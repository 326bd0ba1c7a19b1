"""Memory: one user table with per-platform identities, facts, the deriver's queue, opt-outs."""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import Id, UtcDateTime, utcnow

#: Tools over the speaker's own memory, allowed like the agent's memory/ files.
_ALLOWED = ("search_sessions", "memory_list", "memory_save", "memory_forget")


def upgrade(op: Operations) -> None:
    # A plain ADD COLUMN (never a batch copy): on SQLite the FTS5 triggers stay on the table.
    op.add_column("memory_documents", sa.Column("user_id", Id))
    op.create_index("ix_memory_documents_user", "memory_documents", ["user_id"])
    op.create_table(
        "memory_users",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("display_name", sa.String(255)),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "memory_identities",
        sa.Column("platform", sa.String(32), primary_key=True),
        sa.Column("external_id", sa.String(255), primary_key=True),
        sa.Column("user_id", Id, sa.ForeignKey("memory_users.id"), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_memory_identities_user", "memory_identities", ["user_id"])
    op.create_table(
        "memory_facts",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("user_id", Id, sa.ForeignKey("memory_users.id"), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("origin_source", sa.String(255), nullable=False),
        sa.Column("message_ids", sa.JSON, nullable=False),
        sa.Column("created_by", sa.String(16), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.CheckConstraint(
            "created_by IN ('deriver', 'tool', 'user')", name="ck_memory_facts_created_by"
        ),
    )
    op.create_index("ix_memory_facts_user", "memory_facts", ["user_id", "updated_at"])
    op.create_table(
        "memory_derive_marks",
        sa.Column("session_id", Id, sa.ForeignKey("chat_sessions.id"), primary_key=True),
        sa.Column("last_message_id", Id, nullable=False, server_default="0"),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "memory_optouts",
        sa.Column("source", sa.String(255), primary_key=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    _allow_memory_tools(op.get_bind())


def _allow_memory_tools(conn: sa.Connection) -> None:
    groups = sa.table(
        "permission_groups",
        sa.column("name"),
        sa.column("description"),
        sa.column("created_at", UtcDateTime),
    )
    rules = sa.table(
        "approval_rules",
        sa.column("group_name"),
        sa.column("tool_pattern"),
        sa.column("action"),
        sa.column("priority"),
        sa.column("note"),
        sa.column("created_at", UtcDateTime),
    )
    now = utcnow()
    if conn.execute(sa.select(groups.c.name).where(groups.c.name == "default")).first() is None:
        conn.execute(
            groups.insert().values(
                name="default", description="Rules every session falls back to", created_at=now
            )
        )
    conn.execute(
        rules.insert(),
        [
            {
                "group_name": "default",
                "tool_pattern": name,
                "action": "allow",
                "priority": 50,
                "note": "long-term memory: the speaker's own",
                "created_at": now,
            }
            for name in _ALLOWED
        ],
    )
