"""``GET /metrics``: Prometheus text built from the database and the process's counters.

What the database knows (turns, tool calls, model calls with their latency and tokens, job
runs) is read at scrape time, so counters survive restarts and every worker reports the
same totals; what only this process knows (Telegram sends and 429s, postponed deliveries
and their scheduled retries) comes from its ``OutboundStats``. The Telegram outbox — how
many deliveries wait for a retry, how many failed for good — is read from the database.
Each scrape builds a fresh registry: no module-level metric state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from sqlalchemy.engine import Connection

from bot.telegram.outbound import OutboundStats
from bot.telegram.store import DeliverySummary, delivery_summary
from engine.store.schema import chat_history as h
from engine.store.schema import chat_llm_tools as t
from scheduler.store import run_counts

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS_S", "MetricsSnapshot", "read_snapshot", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True)
class ModelCalls:
    count: int
    latency_sum_s: float
    buckets: tuple[int, ...]  # cumulative counts per LATENCY_BUCKETS_S bound
    input_tokens: int
    output_tokens: int


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


def render(snapshot: MetricsSnapshot) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(snapshot))
    return generate_latest(registry)


class _Collector:
    def __init__(self, snapshot: MetricsSnapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        yield CounterMetricFamily(
            "chathub_turns", "User messages that started a turn.", value=s.turns
        )
        yield _labelled(
            CounterMetricFamily("chathub_tool_calls", "Tool calls by status.", labels=["status"]),
            s.tool_calls,
        )
        yield GaugeMetricFamily(
            "chathub_approvals_pending",
            "Gated tool calls waiting for a decision.",
            value=s.approvals_pending,
        )
        yield GaugeMetricFamily(
            "chathub_clarifications_pending",
            "Questions waiting for an answer.",
            value=s.clarifications_pending,
        )
        yield _labelled(
            CounterMetricFamily(
                "chathub_job_runs", "Scheduled job runs by status.", labels=["status"]
            ),
            s.job_runs,
        )
        yield from self._models()
        if s.telegram is not None:
            yield from _telegram(s.telegram)
        if s.deliveries is not None:
            yield from _deliveries(s.deliveries)

    def _models(self) -> Iterator[Metric]:
        latency = HistogramMetricFamily(
            "chathub_llm_request_duration_seconds",
            "Model calls that answered, by model and latency.",
            labels=["model"],
        )
        tokens = CounterMetricFamily(
            "chathub_llm_tokens", "Tokens of answered model calls.", labels=["model", "kind"]
        )
        for model, calls in sorted(self.snapshot.models.items()):
            buckets = [
                (str(bound), count)
                for bound, count in zip(LATENCY_BUCKETS_S, calls.buckets, strict=True)
            ]
            buckets.append(("+Inf", calls.count))
            latency.add_metric([model], buckets, calls.latency_sum_s)
            tokens.add_metric([model, "input"], calls.input_tokens)
            tokens.add_metric([model, "output"], calls.output_tokens)
        yield latency
        yield tokens


def _labelled(family: CounterMetricFamily, values: dict[str, int]) -> CounterMetricFamily:
    for label, value in sorted(values.items()):
        family.add_metric([label], value)
    return family


def _telegram(stats: OutboundStats) -> Iterator[Metric]:
    yield CounterMetricFamily(
        "chathub_telegram_sends", "Bot API calls that succeeded.", value=stats.sent
    )
    yield CounterMetricFamily(
        "chathub_telegram_429", "Bot API answers 429 (retry_after).", value=stats.retry_after
    )
    yield CounterMetricFamily(
        "chathub_telegram_global_pauses",
        "429s from several chats at once: every send waited (a global flood wait).",
        value=stats.global_pauses,
    )
    yield CounterMetricFamily(
        "chathub_telegram_retry_after_capped",
        "429s asking for a wait longer than the cap (60 s): the cap was waited.",
        value=stats.retry_after_capped,
    )
    yield CounterMetricFamily(
        "chathub_telegram_retried_errors",
        "Bot API 5xx or network errors that were retried.",
        value=stats.retried_errors,
    )
    yield CounterMetricFamily(
        "chathub_telegram_failed", "Bot API calls given up.", value=stats.failed
    )
    yield CounterMetricFamily(
        "chathub_telegram_deliveries_postponed",
        "Outbox deliveries postponed for a scheduled retry (Telegram or the network down).",
        value=stats.postponed,
    )
    yield CounterMetricFamily(
        "chathub_telegram_redelivery_attempts",
        "Scheduled retries of postponed deliveries.",
        value=stats.redelivery_attempts,
    )
    yield CounterMetricFamily(
        "chathub_telegram_redelivered",
        "Postponed deliveries that a scheduled retry got through.",
        value=stats.redelivered,
    )


def _deliveries(summary: DeliverySummary) -> Iterator[Metric]:
    outbox = GaugeMetricFamily(
        "chathub_telegram_outbox",
        "Outbox deliveries: waiting for a retry, failed for good (blocked, chat gone), sent.",
        labels=["state"],
    )
    outbox.add_metric(["waiting"], summary.waiting)
    outbox.add_metric(["failed"], summary.failed)
    outbox.add_metric(["sent"], summary.sent)
    yield outbox
    if summary.oldest_waiting_at is not None:
        yield GaugeMetricFamily(
            "chathub_telegram_oldest_waiting_delivery_timestamp_seconds",
            "When the oldest delivery still waiting for a retry was recorded (Unix time).",
            value=summary.oldest_waiting_at.timestamp(),
        )
