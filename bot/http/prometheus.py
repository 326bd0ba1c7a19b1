"""The Prometheus text of a metrics snapshot (``GET /metrics``; bot/http/metrics.py reads
the snapshot). Imported with the first scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from bot.delivery import DeliverySummary, OutboundStats
from bot.http.metrics import LATENCY_BUCKETS_S, FleetStats, MetricsSnapshot

__all__ = ["render_text"]


def render_text(snapshot: MetricsSnapshot) -> bytes:
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
        if s.fleet is not None:
            yield from _fleet(s.fleet)
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
    yield CounterMetricFamily(
        "chathub_telegram_deliveries_released",
        "A fleet's: deliveries handed back unsent, this process's membership having lapsed.",
        value=stats.released,
    )
    yield CounterMetricFamily(
        "chathub_telegram_deliveries_held",
        "A fleet's: deliveries held back while an earlier one of their chat was with another"
        " process.",
        value=stats.held,
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


def _fleet(fleet: FleetStats) -> Iterator[Metric]:
    labels = ["process"]
    owned = GaugeMetricFamily(
        "chathub_fleet_owned_sources", "Chats this process holds the lease of.", labels=labels
    )
    owned.add_metric([fleet.process_id], fleet.owned_sources)
    yield owned
    takeovers = CounterMetricFamily(
        "chathub_fleet_takeovers",
        "Chats this process took with work nobody held (a dead process's, or unclaimed).",
        labels=labels,
    )
    takeovers.add_metric([fleet.process_id], fleet.takeovers)
    yield takeovers
    receiver = GaugeMetricFamily(
        "chathub_fleet_receiver",
        "1 for the process holding the Telegram receiver's lease (polling).",
        labels=["receiver"],
    )
    if fleet.receiver is not None:
        receiver.add_metric([fleet.receiver], 1)
    yield receiver
