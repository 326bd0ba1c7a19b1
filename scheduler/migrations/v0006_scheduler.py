"""Scheduler: jobs, their runs (one row per fire, claimed with a lease), incoming events."""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import Id, UtcDateTime


def upgrade(op: Operations) -> None:
    op.create_table(
        "scheduled_jobs",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("spec", sa.String(255)),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=False, server_default="main"),
        sa.Column("origin_source", sa.String(255)),
        sa.Column("parent_session_id", Id, sa.ForeignKey("chat_sessions.id")),
        sa.Column("run_context", sa.JSON),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("single_run", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("coalesce", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("misfire_grace_s", sa.Integer, nullable=False, server_default="300"),
        sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
        sa.Column("next_run_at", UtcDateTime),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("deleted_at", UtcDateTime),
        sa.CheckConstraint("kind IN ('cron', 'sync', 'async', 'tic')", name="ck_jobs_kind"),
    )
    op.create_index("ix_jobs_due", "scheduled_jobs", ["enabled", "next_run_at"])
    op.create_index("ix_jobs_source", "scheduled_jobs", ["origin_source", "id"])
    op.create_table(
        "job_runs",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("job_id", Id, sa.ForeignKey("scheduled_jobs.id"), nullable=False),
        sa.Column("scheduled_for", UtcDateTime, nullable=False),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("lease_expires_at", UtcDateTime),
        sa.Column("session_id", Id),
        sa.Column("result", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("delivery_status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("delivered_message_ids", sa.JSON),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("started_at", UtcDateTime),
        sa.Column("finished_at", UtcDateTime),
        sa.Column("delivered_at", UtcDateTime),
        sa.UniqueConstraint("job_id", "scheduled_for", name="uq_runs_job_fire"),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'done', 'failed', 'missed', 'abandoned')",
            name="ck_runs_status",
        ),
    )
    op.create_index("ix_runs_status", "job_runs", ["status", "lease_expires_at"])
    op.create_index("ix_runs_delivery", "job_runs", ["delivery_status", "status"])
    op.create_table(
        "events",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("type", sa.String(255), nullable=False),
        sa.Column("payload", sa.JSON),
        sa.Column("processed", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("processed_at", UtcDateTime),
    )
    op.create_index("ix_events_unprocessed", "events", ["processed", "id"])
    op.create_table(
        "notification_log",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_notification_log", "notification_log", ["fingerprint", "created_at"])
