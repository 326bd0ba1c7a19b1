"""``GET /metrics``: Prometheus text built from the database and the process's counters.

What the database knows (turns, tool calls, model calls with their latency and tokens, job
runs) is read at scrape time, so counters survive restarts and every worker reports the
same totals; what only this process knows (Telegram sends and 429s, postponed deliveries
and their scheduled retries) comes from its ``OutboundStats``. The Telegram outbox — how
many deliveries wait for a retry, how many failed for good — is read from the database.
Each scrape builds a fresh registry: no module-level metric state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.delivery import DeliverySummary, OutboundStats, delivery_summary
from engine.store import chat_history as h
from engine.store import chat_llm_tools as t
from scheduler.store import run_counts

__all__ = [
    "CONTENT_TYPE",
    "LATENCY_BUCKETS_S",
    "FleetStats",
    "MetricsSnapshot",
    "read_snapshot",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True)
class ModelCalls:
    count: int
    latency_sum_s: float
    buckets: tuple[int, ...]  # cumulative counts per LATENCY_BUCKETS_S bound
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class FleetStats:
    """This process's part in a fleet (``CHATHUB_FLEET``)."""

    process_id: str
    owned_sources: int
    takeovers: int
    #: The process holding the Telegram receiver's lease (polling), if any.
    receiver: str | None


@dataclass(slots=True)
class MetricsSnapshot:
    turns: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)
    job_runs: dict[str, int] = field(default_factory=dict)
    models: dict[str, ModelCalls] = field(default_factory=dict)
    approvals_pending: int = 0
    clarifications_pending: int = 0
    telegram: OutboundStats | None = None
    deliveries: DeliverySummary | None = None
    fleet: FleetStats | None = None


def read_snapshot(conn: Connection) -> MetricsSnapshot:
    """The database part of a scrape, in one connection."""
    turns = conn.execute(sa.select(sa.func.count()).where(h.c.role == "user")).scalar_one()
    tools = conn.execute(sa.select(t.c.status, sa.func.count()).group_by(t.c.status)).all()
    bucket_columns = [
        sa.func.sum(sa.case((h.c.duration_ms <= int(bound * 1000), 1), else_=0))
        for bound in LATENCY_BUCKETS_S
    ]
    answered = conn.execute(
        sa.select(
            h.c.model,
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(h.c.duration_ms), 0),
            sa.func.coalesce(sa.func.sum(h.c.input_tokens), 0),
            sa.func.coalesce(sa.func.sum(h.c.output_tokens), 0),
            *bucket_columns,
        )
        .where(h.c.role == "assistant", h.c.model.is_not(None), h.c.is_synthetic.is_(False))
        .group_by(h.c.model)
    ).all()
    models = {
        row[0]: ModelCalls(
            count=int(row[1]),
            latency_sum_s=int(row[2]) / 1000,
            input_tokens=int(row[3]),
            output_tokens=int(row[4]),
            buckets=tuple(int(n or 0) for n in row[5:]),
        )
        for row in answered
    }
    return MetricsSnapshot(
        turns=int(turns),
        tool_calls={str(s): int(n) for s, n in tools},
        job_runs=run_counts(conn),
        models=models,
        deliveries=delivery_summary(conn, limit=0),
    )
