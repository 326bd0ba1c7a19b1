"""Everything the bot sends goes through here: paced per chat, retried, recorded.

Pacing is token buckets (``pacing.py``): bursts within Telegram's limits — about one
message per second in a chat, twenty per minute in a group, thirty per second overall —
so a quiet chat's reply goes out at once. A 429 names how long to wait (``retry_after``):
that chat waits (everything, when several chats get one at once); 5xx and network errors
are retried with backoff. Messages that must arrive exactly once (final replies)
go through the outbox: recorded before sending under a dedupe key, marked sent with the
delivered message id, and re-sent at start if the process died in between.

An outbox delivery that still fails after those retries is postponed, not dropped: the
row records the attempt and when it is due again (``RetrySchedule``: 1 s doubling to
5 min), and ``Redelivery`` (``redelivery.py``) sends it then, in this process. Only an
answer that no retry changes — 403 (the bot was blocked), 400 (chat not found, a
request Telegram refuses) — marks it failed, with Telegram's reason.

In a fleet, a row is sent only by the process that took it (recorded or claimed it), and
only while that process's membership has held without a break since (``Tenure``): a
process paused or cut off past its membership lease has its rows sent by another, and
when it comes back it hands them back (``release``) instead of sending them a second time.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from bot.telegram.api import (
    BadRequest,
    BotApi,
    Forbidden,
    Json,
    NetworkError,
    RetryAfter,
    ServerError,
    TelegramError,
)
from bot.telegram.handback import DeliveryMarks, Handback, Tenure, TenureLost
from bot.telegram.health import TelegramHealth
from bot.telegram.pacing import Cap, Pacer, PacingPolicy, Rate
from bot.telegram.postponements import Postponements, RetrySchedule
from bot.telegram.retrying import describe
from bot.telegram.settings import TelegramSettings
from bot.telegram.stats import OutboundStats
from bot.telegram.store import OutboxRow, TelegramStore
from engine.failpoints import failpoint
from engine.store.schema import utcnow

__all__ = [
    "Delivery",
    "Outbound",
    "OutboundStats",
    "Pacing",
    "RetrySchedule",
    "Tenure",
    "is_group_chat",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Pacing:
    """How fast to send (``policy``: token buckets, ``pacing.py``) and how to retry."""

    policy: PacingPolicy = field(default_factory=PacingPolicy)
    max_attempts: int = 6
    backoff_s: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    #: A 429 storm never stalls a chat longer than this per wait, nor more waits than this.
    max_retry_after_s: float = 60.0
    max_retry_afters: int = 20

    @classmethod
    def unpaced(cls, **retries: Any) -> Pacing:
        """No waiting between sends (tests and benchmarks against a fake Bot API)."""
        return cls(policy=PacingPolicy.uniform(1e9, burst=1e9), **retries)

    @classmethod
    def from_settings(cls, settings: TelegramSettings) -> Pacing:
        """The ``TELEGRAM_*_BURST`` / ``_PER_SECOND`` / ``_PER_MINUTE`` settings."""
        return cls(
            policy=PacingPolicy(
                private=Rate(settings.telegram_private_burst, settings.telegram_private_per_second),
                group=Rate(settings.telegram_group_burst, settings.telegram_group_per_minute / 60),
                group_cap=Cap(max(1, int(settings.telegram_group_per_minute)), 60.0),
                overall=Cap.per_second(settings.telegram_global_per_second),
            )
        )


# How long a delivered message waits for others before its delivery is recorded: none. A
# delivery is recorded as soon as Telegram answers, in every mode (a kill in a waiting
# window re-sent replies Telegram had); deliveries answered while a record is being
# written still share the next commit (``DeliveryMarks``).
MARK_DELAY_S = 0.0
# The health kind of send outcomes (``TelegramHealth``).
SEND = "send"


class Delivery(enum.Enum):
    SENT = "sent"
    POSTPONED = "postponed"
    FAILED = "failed"
    #: Handed back unsent: this fleet process's tenure broke (another sends it).
    RELEASED = "released"


@dataclass(eq=False)
class _Lane:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def is_group_chat(chat_id: int) -> bool:
    """Group and channel ids are negative in the Bot API."""
    return chat_id < 0


class Outbound:
    def __init__(
        self,
        api: BotApi,
        store: TelegramStore,
        pacing: Pacing | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        mark_delay_s: float = MARK_DELAY_S,
        schedule: RetrySchedule | None = None,
        now: Callable[[], datetime] = utcnow,
        health: TelegramHealth | None = None,
        tenure: Tenure | None = None,
    ) -> None:
        """``tenure``: a fleet process's (every row it sends was taken under it)."""
        self.api = api
        self.store = store
        self.handback = None if tenure is None else Handback(tenure, store, now)
        self.pacing = pacing or Pacing()
        self.pacer = Pacer(self.pacing.policy, clock=clock, sleep=sleep)
        self.schedule = schedule or RetrySchedule()
        self.stats = OutboundStats()
        self.health = health or TelegramHealth(clock=clock)
        #: Set whenever a delivery is postponed (or due at once): ``Redelivery`` wakes on it.
        self.postponed = asyncio.Event()
        self._clock = clock
        self._sleep = sleep
        self._now = now  # wall time: a postponed row's schedule is stored
        self.postponements = Postponements(store, self.schedule, self.stats, now, self.postponed)
        self._lanes: dict[int, _Lane] = {}
        # The newest edit asked for each (chat, message): an older one still waiting for
        # its turn is dropped, the latest text wins.
        self._edits: dict[tuple[int, int], int] = {}
        self._marks = DeliveryMarks(store, mark_delay_s)

    async def call(
        self,
        chat_id: int,
        op: Callable[[], Awaitable[T]],
        *,
        may_send: Callable[[], bool] | None = None,
    ) -> T:
        """Run one Bot API call for ``chat_id`` in its turn, retrying what is retriable.

        ``may_send`` is asked right before each try (a wait for the pace or a retry can be
        long); when it says no, ``TenureLost`` is raised and nothing more is sent.
        """
        lane = self._lanes.setdefault(chat_id, _Lane())
        async with lane.lock:
            return await self._run(chat_id, op, edit=False, may_send=may_send)

    async def edit(self, chat_id: int, message_id: int, op: Callable[[], Awaitable[Any]]) -> bool:
        """An edit of a message already sent: paced apart from new messages, and coalesced
        (False: a newer edit of the same message came while this one waited, and replaced it)."""
        key = (chat_id, message_id)
        ticket = self._edits[key] = self._edits.get(key, 0) + 1
        lane = self._lanes.setdefault(chat_id, _Lane())
        try:
            async with lane.lock:
                if self._edits.get(key) != ticket:
                    return False
                await self._run(chat_id, op, edit=True)
                return True
        finally:
            if self._edits.get(key) == ticket:
                del self._edits[key]

    async def _run(
        self,
        chat_id: int,
        op: Callable[[], Awaitable[T]],
        *,
        edit: bool,
        may_send: Callable[[], bool] | None = None,
    ) -> T:
        errors = throttled = 0
        while True:
            await self.pacer.turn(chat_id, edit=edit)
            if may_send is not None and not may_send():
                raise TenureLost
            try:
                result = await op()
            except RetryAfter as exc:
                self.stats.retry_after += 1
                throttled += 1
                if throttled > self.pacing.max_retry_afters:
                    self.stats.failed += 1
                    raise
                wait = min(exc.seconds, self.pacing.max_retry_after_s)
                if exc.seconds > wait:
                    self.stats.retry_after_capped += 1
                    log.warning(
                        "telegram asked chat %s to wait %gs; waiting %gs (the cap)",
                        chat_id,
                        exc.seconds,
                        wait,
                    )
                if self.pacer.retry_after(chat_id, wait):
                    self.stats.global_pauses += 1
                continue
            except (ServerError, NetworkError) as exc:
                errors += 1
                self.stats.retried_errors += 1
                self.health.failed(SEND, "send", describe(exc))
                if errors >= self.pacing.max_attempts:
                    self.stats.failed += 1
                    raise
                backoff = self.pacing.backoff_s[min(errors, len(self.pacing.backoff_s)) - 1]
                log.warning("telegram call for chat %s failed (%s); retrying", chat_id, exc)
                await self._sleep(backoff)
                continue
            self.stats.sent += 1
            self.health.succeeded(SEND)
            return result

    async def send_text(
        self,
        chat_id: int,
        text: str,
        *,
        entities: list[Json] | None = None,
        reply_markup: Json | None = None,
        thread_id: int | None = None,
        reply_to: int | None = None,
        may_send: Callable[[], bool] | None = None,
    ) -> Json:
        """Send a message; when Telegram rejects the entities, send it as plain text."""

        def send(with_entities: list[Json] | None) -> Callable[[], Awaitable[Json]]:
            return lambda: self.api.send_message(
                chat_id,
                text,
                entities=with_entities,
                reply_markup=reply_markup,
                message_thread_id=thread_id,
                reply_to_message_id=reply_to,
            )

        try:
            return await self.call(chat_id, send(entities or None), may_send=may_send)
        except BadRequest as exc:
            if not entities or "entit" not in exc.description.lower():
                raise
            log.warning("entities rejected (%s); sending plain text", exc.description)
            return await self.call(chat_id, send(None), may_send=may_send)

    def mark(self) -> float | None:
        """A fleet's: taken before rows are recorded or claimed (``taken``)."""
        return None if self.handback is None else self.handback.mark()

    @staticmethod
    def taken(rows: list[OutboxRow], mark: float | None) -> list[OutboxRow]:
        """``rows`` as taken by this process at ``mark`` (``None``: outside a fleet)."""
        return rows if mark is None else [replace(row, taken_at=mark) for row in rows]

    async def deliver(self, chat_id: int, key: str, payload: Json) -> int | None:
        """Send ``payload`` once under ``key``: recorded first, marked sent after."""
        mark = self.mark()
        row = await self.store.enqueue(chat_id, key, payload)
        if row is None:
            return None  # delivered (or being delivered) before
        return await self.deliver_row(self.taken([row], mark)[0])

    async def resend_pending(self) -> int:
        """Deliver, now, what was recorded but never marked sent (the service leaves this to
        ``recover`` and ``Redelivery``, which do not hold up start-up)."""
        rows = await self.store.pending_outbox()
        for row in rows:
            await self.deliver_row(row)
        return len(rows)

    async def recover(self) -> int:
        """At start, before anything new is recorded: every pending delivery is due now.

        ``Redelivery`` sends them (recorded by a process that died before sending, or
        postponed); returns how many.
        """
        count = await self.store.recover_outbox(self._now())
        if count:
            self.postponed.set()
        return count

    async def recover_orphans(self) -> int:
        """A fleet's: what dead (or lapsed) processes took and never sent is due now, and so
        are this process's rows it could not hand back before."""
        if self.handback is None:
            raise RuntimeError("recovering a fleet's orphans in a process of no fleet")
        count = await self.handback.recover_orphans()
        if count:
            self.postponed.set()
        return count

    async def deliver_rows(self, rows: Sequence[OutboxRow]) -> None:
        """Send one reply's recorded rows in order; once one is handed back (the tenure
        broke), so are the rest: none may overtake it."""
        for index, row in enumerate(rows):
            outcome, _message_id = await self.attempt(row)
            if outcome is Delivery.RELEASED:
                await self.release_rows(rows[index + 1 :])
                return

    async def release_rows(self, rows: Sequence[OutboxRow]) -> None:
        for row in rows:
            await self._release(row)

    async def deliver_row(self, row: OutboxRow) -> int | None:
        """Send a recorded row and mark it sent; the message id, ``None`` when it was not.

        A 5xx, a 429 storm or a lost connection postpones it (``Redelivery`` sends it when
        due); a 403 or 400 marks it failed.
        """
        _outcome, message_id = await self.attempt(row)
        return message_id

    async def attempt(
        self, row: OutboxRow, *, record_now: bool = False
    ) -> tuple[Delivery, int | None]:
        """One delivery attempt of a recorded row (with ``call``'s in-line retries).

        ``record_now``: the delivery is recorded before this returns, not batched with
        others a moment later (``Redelivery``: a row it claimed must not look due again).
        """
        waiting = self.postponements.waiting(row.chat_id)
        if waiting and not record_now:
            await self.postponements.queue_behind(row, waiting)
            return Delivery.POSTPONED, None
        payload = row.payload
        failpoint("before_outbox_send")
        try:
            message = await self.send_text(
                row.chat_id,
                payload["text"],
                entities=payload.get("entities"),
                reply_markup=payload.get("reply_markup"),
                thread_id=payload.get("thread_id"),
                may_send=None if self.handback is None else self.handback.may_send(row),
            )
        except TenureLost:
            await self._release(row)
            return Delivery.RELEASED, None
        except (BadRequest, Forbidden) as exc:  # blocked, chat gone, a request refused
            await self.postponements.fail(row, exc.description)
            return Delivery.FAILED, None
        except TelegramError as exc:  # Telegram or the network is down: not this message
            await self.postponements.postpone(row, exc)
            return Delivery.POSTPONED, None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a payload no binding can send (a bug): never retried
            log.exception("delivery %s to chat %s cannot be sent", row.dedupe_key, row.chat_id)
            await self.postponements.fail(row, f"unsendable payload ({describe(exc)})")
            return Delivery.FAILED, None
        message_id = _message_id(message)
        self.postponements.settled(row)
        if not record_now:
            self._marks.add(row.id, message_id)
            return Delivery.SENT, message_id
        try:
            await self.store.mark_sent(row.id, message_id)
        except Exception:  # pending under its lease: sent again when that ends (a duplicate)
            log.exception("recording the delivery %s failed", row.dedupe_key)
        return Delivery.SENT, message_id

    async def _release(self, row: OutboxRow) -> None:
        assert self.handback is not None  # only a fleet's tenure breaks
        self.postponements.settled(row)
        self.stats.released += 1
        await self.handback.hand_back(row)
        self.postponed.set()

    async def flush(self) -> None:
        """Wait until every delivery so far is recorded (at shutdown)."""
        await self._marks.flush()


def _message_id(message: Any) -> int | None:
    if isinstance(message, dict):
        value = message.get("message_id")
        return value if isinstance(value, int) else None
    return None
