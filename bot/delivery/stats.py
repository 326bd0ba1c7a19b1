"""``OutboundStats``: what this process's sending to one platform counted (``/metrics``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OutboundStats"]


@dataclass
class OutboundStats:
    sent: int = 0
    retry_after: int = 0
    #: 429s that came from several chats at once: every send waited (a global flood wait).
    global_pauses: int = 0
    #: A retry_after longer than ``Pacing.max_retry_after_s`` (waited only that long).
    retry_after_capped: int = 0
    retried_errors: int = 0
    failed: int = 0
    #: Outbox deliveries postponed after their in-line retries (each postponement counts).
    postponed: int = 0
    #: Scheduled retries of postponed deliveries, and how many of them got through.
    redelivery_attempts: int = 0
    redelivered: int = 0
    #: Outbox deliveries marked failed (blocked, chat gone, refused, unsendable payload).
    deliveries_failed: int = 0
    #: Fleet rows handed back unsent because this process's membership had lapsed.
    released: int = 0
    #: Fleet rows held back because an earlier row of their conversation was pending with
    #: another process (each hold counts).
    held: int = 0
