"""Durable, paced, exactly-once delivery for every platform.

A platform gives a ``PlatformClient`` (one try of a payload, the message id in its
answer, which conversations are groups) and its ``PacingPolicy``; ``Outbound`` gives it
the outbox (rows recorded in the answer's own transaction, sent once, postponed,
redelivered, handed back in a fleet), pacing and retries of every call, and the stores of
its inbound events and its cards. The face: import from ``bot.delivery``.
"""

from bot.delivery.errors import (
    RETRY_AFTER_MAX_S,
    Gone,
    PlatformError,
    Refused,
    RetryLater,
    Unavailable,
    clamp_retry_after,
    describe,
)
from bot.delivery.handback import Tenure, TenureLost
from bot.delivery.keyed_locks import KeyedLocks
from bot.delivery.outbound import (
    Delivery,
    Outbound,
    Pacing,
    PlatformClient,
    SendHealth,
)
from bot.delivery.pacing import ANSWER, EDIT, OTHER, SEND, CallKind, Cap, PacingPolicy, Rate
from bot.delivery.postponements import Backoff, RetrySchedule
from bot.delivery.redelivery import Redelivery, keep_delivering, recover_orphans_forever
from bot.delivery.stats import OutboundStats
from bot.delivery.store import (
    CardRow,
    CardStore,
    DeliverySummary,
    EventAlreadyHandled,
    EventStore,
    OutboxRow,
    OutboxStore,
    WaitingDelivery,
    delivery_summary,
)

__all__ = [
    "ANSWER",
    "EDIT",
    "OTHER",
    "RETRY_AFTER_MAX_S",
    "SEND",
    "Backoff",
    "CallKind",
    "Cap",
    "CardRow",
    "CardStore",
    "Delivery",
    "DeliverySummary",
    "EventAlreadyHandled",
    "EventStore",
    "Gone",
    "KeyedLocks",
    "Outbound",
    "OutboundStats",
    "OutboxRow",
    "OutboxStore",
    "Pacing",
    "PacingPolicy",
    "PlatformClient",
    "PlatformError",
    "Rate",
    "Redelivery",
    "Refused",
    "RetryLater",
    "RetrySchedule",
    "SendHealth",
    "Tenure",
    "TenureLost",
    "Unavailable",
    "WaitingDelivery",
    "clamp_retry_after",
    "delivery_summary",
    "describe",
    "keep_delivering",
    "recover_orphans_forever",
]
