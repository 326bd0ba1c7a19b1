"""Approval rules and permission groups (the ``default`` group row; its rules are seeded at start)."""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic.operations import Operations

from tests.legacy_schema.types import Id, UtcDateTime


def upgrade(op: Operations) -> None:
    groups = op.create_table(
        "permission_groups",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("seeded", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "approval_rules",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column(
            "group_name", sa.String(64), sa.ForeignKey("permission_groups.name"), nullable=False
        ),
        sa.Column("agent_id", sa.String(64)),
        sa.Column("source", sa.String(255)),
        sa.Column("tool_pattern", sa.String(255), nullable=False),
        sa.Column("path_pattern", sa.Text),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False, server_default="100"),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.CheckConstraint("action IN ('allow', 'deny', 'require')", name="ck_rules_action"),
    )
    op.create_index("ix_rules_group", "approval_rules", ["group_name", "priority", "id"])
    op.bulk_insert(
        groups,
        [
            {
                "name": "default",
                "description": "Rules every session falls back to",
                "seeded": False,
                "created_at": datetime.now(UTC),
            }
        ],
    )
