"""The scheduler's tables, on the one shared ``MetaData`` (``engine.store.schema``).

Created by ``scheduler/migrations/v0006_scheduler.py``: jobs and their runs
(``scheduler/store.py``), incoming events and the notify dedupe log (``scheduler/events.py``).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    true,
)

from engine.store import Id, UtcDateTime, metadata

__all__ = [
    "JOB_KINDS",
    "RUN_STATUSES",
    "events",
    "job_runs",
    "notification_log",
    "scheduled_jobs",
]

JOB_KINDS = ("cron", "sync", "async", "tic")
RUN_STATUSES = ("pending", "running", "done", "failed", "missed", "abandoned")

scheduled_jobs = Table(
    "scheduled_jobs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("kind", String(16), nullable=False),
    Column("title", Text, nullable=False),
    Column("spec", String(255)),
    Column("timezone", String(64), nullable=False),
    Column("prompt", Text, nullable=False),
    Column("agent_id", String(64), nullable=False, server_default="main"),
    Column("origin_source", String(255)),
    Column("parent_session_id", Id, ForeignKey("chat_sessions.id")),
    #: The job's grants: the RunContext its runs apply (scheduler/grants.py).
    Column("run_context", JSON),
    #: Whom the job serves (a platform user id, ``telegram:42``); ``None``: the home chat's.
    Column("owner_id", String(255)),
    #: How long a run waits for a decision on a call outside its grants (``None``: default).
    Column("approval_wait_s", Integer),
    Column("enabled", Boolean, nullable=False, server_default=true()),
    Column("single_run", Boolean, nullable=False, server_default=false()),
    Column("coalesce", Boolean, nullable=False, server_default=true()),
    Column("misfire_grace_s", Integer, nullable=False, server_default="300"),
    Column("max_attempts", Integer, nullable=False, server_default="3"),
    Column("next_run_at", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Column("deleted_at", UtcDateTime),
    CheckConstraint("kind IN ('cron', 'sync', 'async', 'tic')", name="ck_jobs_kind"),
    Index("ix_jobs_due", "enabled", "next_run_at"),
    Index("ix_jobs_source", "origin_source", "id"),
)

job_runs = Table(
    "job_runs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("job_id", Id, ForeignKey("scheduled_jobs.id"), nullable=False),
    Column("scheduled_for", UtcDateTime, nullable=False),
    Column("status", String(16), nullable=False, server_default="pending"),
    Column("attempt", Integer, nullable=False, server_default="0"),
    Column("lease_owner", String(64)),
    Column("lease_expires_at", UtcDateTime),
    Column("session_id", Id),
    Column("result", Text),
    Column("error", Text),
    Column("delivery_status", String(16), nullable=False, server_default="pending"),
    Column("delivered_message_ids", JSON),
    Column("created_at", UtcDateTime, nullable=False),
    Column("started_at", UtcDateTime),
    Column("finished_at", UtcDateTime),
    Column("delivered_at", UtcDateTime),
    #: A kill or delete asked the run to stop (read by whichever process runs it).
    Column("cancel_requested_at", UtcDateTime),
    #: The fires a ``missed`` row stands for: past ``MAX_MISSED_ROWS`` the row of the first
    #: missed fire also stands for the ones between it and the last rows recorded.
    Column("fires", Integer, nullable=False, server_default="1"),
    UniqueConstraint("job_id", "scheduled_for", name="uq_runs_job_fire"),
    CheckConstraint(
        "status IN ('pending', 'running', 'done', 'failed', 'missed', 'abandoned')",
        name="ck_runs_status",
    ),
    Index("ix_runs_status", "status", "lease_expires_at"),
    Index("ix_runs_delivery", "delivery_status", "status"),
)

events = Table(
    "events",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("source", String(255), nullable=False),
    Column("type", String(255), nullable=False),
    Column("payload", JSON),
    Column("processed", Boolean, nullable=False, server_default=false()),
    Column("created_at", UtcDateTime, nullable=False),
    Column("processed_at", UtcDateTime),
    Index("ix_events_unprocessed", "processed", "id"),
)

notification_log = Table(
    "notification_log",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("fingerprint", String(64), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_notification_log", "fingerprint", "created_at"),
)
