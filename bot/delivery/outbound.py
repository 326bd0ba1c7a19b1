"""Everything a platform is sent goes through here: paced, retried, recorded.

A platform gives its ``PlatformClient`` (one try of a recorded payload, the message id in
its answer, which conversations are groups) and its ``PacingPolicy``; this gives it
durable, paced, exactly-once delivery. Every other call to the platform's API goes
through ``call`` too (``kind``: a new message, an edit, or anything else), so no call
escapes the pacing and the retries.

Pacing is token buckets (``pacing.py``): bursts within the platform's limits, so a quiet
conversation's reply goes out at once. A 429 names how long to wait (``RetryLater``): that
conversation waits (everything, when several get one at once); ``Unavailable`` (5xx,
network) is retried with backoff. Messages that must arrive exactly once (final replies)
go through the outbox: recorded before sending under a dedupe key, marked sent with the
delivered message id as soon as the platform answers, and re-sent at start if the process
died in between.

An outbox delivery that still fails after those retries is postponed, not dropped: the
row records the attempt and when it is due again (``RetrySchedule``: 1 s doubling to
5 min), and ``Redelivery`` (``redelivery.py``) sends it then, in this process. Only an
answer that no retry changes (``Refused``: blocked, the conversation gone, a request the
platform refuses) marks it failed, with the platform's reason.

In a fleet, a row is sent only by the process that took it (recorded or claimed it), and
only while that process's membership has held without a break since (``Tenure``): a
process paused or cut off past its membership lease has its rows sent by another, and
when it comes back it hands them back (``release``) instead of sending them a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any, Protocol, TypeVar

from bot.delivery.errors import (
    Gone,
    PlatformError,
    Refused,
    RetryLater,
    Unavailable,
    clamp_retry_after,
    describe,
)
from bot.delivery.handback import MARK_RETRY_S, DeliveryMarks, Handback, Tenure, TenureLost
from bot.delivery.keyed_locks import KeyedLocks
from bot.delivery.pacing import ANSWER, EDIT, OTHER, SEND, CallKind, Pacer, PacingPolicy, Ticket
from bot.delivery.postponements import Postponements, RetrySchedule
from bot.delivery.stats import OutboundStats
from bot.delivery.store import OutboxRow, OutboxStore
from engine.failpoints import failpoint
from engine.store import utcnow

__all__ = ["Delivery", "Outbound", "Pacing", "PlatformClient", "SendHealth"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Json = dict[str, Any]


class PlatformClient(Protocol):
    """What a platform gives the delivery layer: how to send one recorded payload."""

    #: The platform's name in the tables and the logs (``telegram``, ``discord``, ...).
    name: str

    def is_group(self, conversation: str) -> bool:
        """Whether ``conversation`` is paced as a group (``PacingPolicy.group``)."""
        ...

    async def send(self, conversation: str, payload: Json) -> Any:
        """One try: the platform's answer, or a ``PlatformError`` subclass raised."""
        ...

    def message_id(self, answer: Any) -> str | None:
        """The sent message's id in ``send``'s answer."""
        ...

    def fallback(self, payload: Json, error: Refused) -> Json | None:
        """A simpler payload to try once instead after a refusal (Telegram: the text
        without its entities), or ``None``."""
        ...


class SendHealth(Protocol):
    """Where send outcomes are reported (``/healthz``); Telegram's ``TelegramHealth``."""

    def failed(self, kind: str, call: str, error: str) -> None: ...

    def succeeded(self, kind: str) -> None: ...


class _NoHealth:
    def failed(self, kind: str, call: str, error: str) -> None:
        return None

    def succeeded(self, kind: str) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Pacing:
    """How fast to send (``policy``: token buckets, ``pacing.py``) and how to retry."""

    policy: PacingPolicy = field(default_factory=PacingPolicy)
    max_attempts: int = 6
    backoff_s: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    #: A 429 storm never stalls a conversation longer than this per wait, nor more waits.
    max_retry_after_s: float = 60.0
    max_retry_afters: int = 20

    @classmethod
    def unpaced(cls, **retries: Any) -> Pacing:
        """No waiting between sends (tests and benchmarks against a fake platform)."""
        return cls(policy=PacingPolicy.uniform(1e9, burst=1e9), **retries)


# How long a delivered message waits for others before its delivery is recorded: none. A
# delivery is recorded as soon as the platform answers, in every mode (a kill in a waiting
# window re-sent replies the platform had); deliveries answered while a record is being
# written still share the next commit (``DeliveryMarks``).
MARK_DELAY_S = 0.0
#: How long a sender waits for its delivery's record before it goes on (a commit takes ms;
#: a database that does not answer is written to later).
MARK_WAIT_S = 0.5
# The health kind of send outcomes.
SEND_HEALTH = "send"
#: The longest a tap's answer waits out a 429, once; a longer wait, or a second 429,
#: and it is given up.
ANSWER_WAIT_MOST_S = 5.0
# A fleet's row held behind an earlier one of its conversation is tried again this much
# later (the earlier one is in flight with another process, or due once a dead one's
# membership lapses: the orphan scan makes it due within a scan interval after that).
HOLD_S = 0.5
#: How long ``flush`` (at a stop) waits for attempts in flight (``attempt_to_the_end``).
FINISH_GRACE_S = 2.0


class Delivery(enum.Enum):
    SENT = "sent"
    POSTPONED = "postponed"
    FAILED = "failed"
    #: Handed back unsent: this fleet process's tenure broke (another sends it).
    RELEASED = "released"


#: How many plainer versions of a refused message are tried (``PlatformClient.fallback``).
FALLBACKS_MOST = 3


class Outbound:
    """One platform's paced client and outbox sender."""

    def __init__(
        self,
        client: PlatformClient,
        store: OutboxStore,
        pacing: Pacing | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        mark_delay_s: float = MARK_DELAY_S,
        mark_wait_s: float = MARK_WAIT_S,
        mark_retry_s: float = MARK_RETRY_S,
        schedule: RetrySchedule | None = None,
        now: Callable[[], datetime] = utcnow,
        health: SendHealth | None = None,
        tenure: Tenure | None = None,
        members: Callable[[], int] = lambda: 1,
    ) -> None:
        """``tenure``: a fleet process's (every row it sends was taken under it);
        ``members``: how many processes share the platform's cap (the fleet's live ones)."""
        self.client = client
        self.store = store
        self.handback = None if tenure is None else Handback(tenure, store, now)
        self.pacing = pacing or Pacing()
        self.pacer = Pacer(
            self.pacing.policy,
            clock=clock,
            sleep=sleep,
            is_group=client.is_group,
            members=members,
            name=client.name,
        )
        self.schedule = schedule or RetrySchedule()
        self.stats = OutboundStats()
        self.health: SendHealth = health or _NoHealth()
        #: Set whenever a delivery is postponed (or due at once): ``Redelivery`` wakes on it.
        self.postponed = asyncio.Event()
        self._clock = clock
        self._sleep = sleep
        self._now = now  # wall time: a postponed row's schedule is stored
        self.postponements = Postponements(
            store, self.schedule, self.stats, now, self.postponed, strand=self.strand
        )
        self._lanes: KeyedLocks[str] = KeyedLocks()
        #: A single process's stranded rows (``strand``).
        self._stranded: set[int] = set()
        # The newest edit asked for each (conversation, message): an older one still
        # waiting for its turn is dropped, the latest text wins.
        self._edits: dict[tuple[str, str], int] = {}
        self._marks = DeliveryMarks(store, mark_delay_s, mark_retry_s)
        self._mark_wait_s = mark_wait_s
        # Rows past the order check and not yet done, sent in their conversation's lane: a
        # later row of it queues behind them there instead of waiting for them to be
        # recorded sent. A redelivered row (``record_now``) is sent outside the lane, so a
        # later row still waits for it to be recorded.
        self._ahead: set[int] = set()
        # Attempts carried to their end when their caller is cancelled (``attempt_to_the_end``).
        self._finishing: set[asyncio.Task[tuple[Delivery, str | None]]] = set()

    async def call(
        self,
        conversation: str | None,
        op: Callable[[], Awaitable[T]],
        *,
        kind: CallKind = SEND,
        may_send: Callable[[], bool] | None = None,
    ) -> T:
        """Run one platform call in its turn, retrying what is retriable.

        ``kind``: ``SEND`` takes the conversation's and the platform's tokens and keeps the
        conversation's order; ``OTHER`` (a tap's answer, the typing indicator, a file)
        only waits out the pauses. ``may_send`` is asked right before each try (a wait
        for the pace or a retry can be long); when it says no, ``TenureLost`` is raised
        and nothing more is sent.
        """
        if kind != SEND or conversation is None:
            return await self._run(conversation, op, kind=kind, may_send=may_send)
        async with self._lanes.hold(conversation):
            return await self._run(conversation, op, kind=kind, may_send=may_send)

    async def edit(
        self, conversation: str, message_id: str, op: Callable[[], Awaitable[Any]]
    ) -> bool:
        """An edit of a message already sent: paced apart from new messages, and coalesced
        (False: a newer edit of the same message came while this one waited, and replaced it)."""
        key = (conversation, message_id)
        ticket = self._edits[key] = self._edits.get(key, 0) + 1
        # Where each method is limited apart, edits keep a lane of their own: one waiting
        # out its 429 held the conversation's replies (found by review on 2026-12-07).
        lane = f"{conversation}\x00edits" if self.pacer.policy.per_method else conversation
        try:
            async with self._lanes.hold(lane):
                if self._edits.get(key) != ticket:
                    return False
                await self._run(conversation, op, kind=EDIT)
                return True
        finally:
            if self._edits.get(key) == ticket:
                del self._edits[key]

    async def send(
        self, conversation: str, payload: Json, *, may_send: Callable[[], bool] | None = None
    ) -> Any:
        """Send ``payload`` now (not recorded); after a refusal, the client's plainer one,
        and so on a few times (a voice reply whose speech failed, then whose reference was
        refused: once only, it was lost until 2026-12-07; found by review)."""
        client = self.client
        attempt = payload
        for _ in range(FALLBACKS_MOST):
            try:
                return await self.call(
                    conversation, partial(client.send, conversation, attempt), may_send=may_send
                )
            except Refused as exc:
                simpler = client.fallback(attempt, exc)
                if simpler is None or simpler == attempt:
                    raise
                log.warning(
                    "%s refused a message (%s); sending it plainer", client.name, exc.description
                )
                attempt = simpler
        return await self.call(
            conversation, partial(client.send, conversation, attempt), may_send=may_send
        )

    async def _run(
        self,
        conversation: str | None,
        op: Callable[[], Awaitable[T]],
        *,
        kind: CallKind,
        may_send: Callable[[], bool] | None = None,
    ) -> T:
        errors = throttled = 0
        while True:
            ticket = await self.pacer.turn(conversation, kind)
            try:
                result = await _counted_call(ticket, op, may_send)
            except RetryLater as exc:
                self.stats.retry_after += 1
                throttled += 1
                if throttled > self.pacing.max_retry_afters:
                    self.stats.failed += 1
                    raise
                # Clamped here too: a client that passes 0, a negative or NaN on must not
                # turn a 429 into a burst of immediate retries.
                asked = clamp_retry_after(exc.seconds)
                wait = min(asked, self.pacing.max_retry_after_s)
                if asked > wait:
                    self.stats.retry_after_capped += 1
                    log.warning(
                        "%s asked %s to wait %gs; waiting %gs (the cap)",
                        self.client.name,
                        conversation,
                        asked,
                        wait,
                    )
                if self.pacer.retry_after(conversation, wait, kind):
                    self.stats.global_pauses += 1
                if kind == ANSWER and (throttled > 1 or wait > ANSWER_WAIT_MOST_S):
                    # A tap's answer is worth little late (the platform lets the query
                    # go within seconds) and its caller decides the tap after it, in
                    # the chat's lane: it is given up, not waited for minutes (a flood
                    # held the approval and the chat 20 minutes; found by review).
                    self.stats.failed += 1
                    raise
                if self.pacer.waits_itself(conversation, kind):
                    await self._sleep(wait)
                continue
            except Unavailable as exc:
                errors += 1
                self.stats.retried_errors += 1
                self.health.failed(SEND_HEALTH, "send", describe(exc))
                if errors >= self.pacing.max_attempts:
                    self.stats.failed += 1
                    raise
                backoff = self.pacing.backoff_s[min(errors, len(self.pacing.backoff_s)) - 1]
                log.warning(
                    "%s call for %s failed (%s); retrying", self.client.name, conversation, exc
                )
                await self._sleep(backoff)
                continue
            if kind != OTHER:
                self.stats.sent += 1
            self.health.succeeded(SEND_HEALTH)
            return result

    def may_take(self) -> bool:
        """Whether rows claimed now would be this process's to send: always outside a
        fleet; in one, while its membership holds."""
        return self.handback is None or self.handback.holds_now()

    def mark(self) -> float | None:
        """A fleet's: taken before rows are recorded or claimed (``taken``)."""
        return None if self.handback is None else self.handback.mark()

    @staticmethod
    def taken(rows: list[OutboxRow], mark: float | None) -> list[OutboxRow]:
        """``rows`` as taken by this process at ``mark`` (``None``: outside a fleet)."""
        return rows if mark is None else [replace(row, taken_at=mark) for row in rows]

    def record_in(
        self, conn: Any, conversation: str, key: str, payloads: Sequence[Json]
    ) -> list[OutboxRow]:
        """One message's parts recorded in ``conn``'s unit of work (the answer's own), as
        taken by this process; ``<key>:<part>`` each. Parts recorded before are left out."""
        mark = self.mark()  # in the transaction: its commit comes after
        rows = [
            self.store.enqueue_in(conn, conversation, f"{key}:{index}", payload)
            for index, payload in enumerate(payloads)
        ]
        return self.taken([row for row in rows if row is not None], mark)

    async def deliver(self, conversation: str, key: str, payload: Json) -> str | None:
        """Send ``payload`` once under ``key``: recorded first, marked sent after."""
        mark = self.mark()
        row = await self.store.enqueue(conversation, key, payload)
        if row is None:
            return None  # delivered (or being delivered) before
        return await self.deliver_row(self.taken([row], mark)[0])

    async def resend_pending(self) -> int:
        """Deliver, now, what was recorded but never marked sent (the service leaves this to
        ``recover`` and ``Redelivery``, which do not hold up start-up)."""
        rows = await self.store.pending()
        for row in rows:
            await self.deliver_row(row)
        return len(rows)

    async def recover(self) -> int:
        """At start, before anything new is recorded: every pending delivery is due now.

        ``Redelivery`` sends them (recorded by a process that died before sending, or
        postponed); returns how many.
        """
        count = await self.store.recover(self._now())
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

    def strand(self, outbox_ids: Collection[int]) -> None:
        """Rows in flight with this process that it will not send and could not make due
        (the database away): a fleet's orphan scan makes them due later; a single process
        makes them due itself once the database answers (``unstrand``, from
        ``Redelivery``; until 2026-12-06 they waited for the next start; found by review)."""
        if self.handback is not None:
            self.handback.stranded.update(outbox_ids)
        else:
            self._stranded.update(outbox_ids)

    @property
    def has_stranded(self) -> bool:
        return bool(self._stranded)

    async def unstrand(self) -> None:
        """Make this process's stranded rows due now (a single process's: see ``strand``);
        they stay stranded while the database is away."""
        if not self._stranded:
            return
        stranded = sorted(self._stranded)
        await self.store.reschedule(stranded, self._now())
        self._stranded.difference_update(stranded)
        self.postponed.set()

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

    async def deliver_row(self, row: OutboxRow) -> str | None:
        """Send a recorded row and mark it sent; the message id, ``None`` when it was not.

        A 5xx, a 429 storm or a lost connection postpones it (``Redelivery`` sends it when
        due); a refusal marks it failed.
        """
        _outcome, message_id = await self.attempt(row)
        return message_id

    async def attempt(
        self, row: OutboxRow, *, record_now: bool = False
    ) -> tuple[Delivery, str | None]:
        """One delivery attempt of a recorded row (with ``call``'s in-line retries).

        ``record_now``: the delivery is recorded before this returns, not batched with
        others a moment later (``Redelivery``: a row it claimed must not look due again).
        """
        waiting = self.postponements.waiting(row.conversation)
        # A redelivery goes too when only its own rows wait; not past an earlier row that
        # failed again (a chat's rows can fall in two claims: after a restart with more
        # than a claim's rows pending, the later one overtook it; found by review).
        if waiting and (not record_now or any(other < row.id for other in waiting)):
            await self.postponements.queue_behind(row, waiting, redelivered=record_now)
            return Delivery.POSTPONED, None
        if self.handback is not None and await self._behind_another(row):
            await self.postponements.hold(row, HOLD_S)
            return Delivery.POSTPONED, None
        if record_now:
            return await self._attempt(row, record_now)
        self._ahead.add(row.id)
        try:
            return await self._attempt(row, record_now)
        finally:
            self._ahead.discard(row.id)

    async def attempt_to_the_end(self, row: OutboxRow) -> tuple[Delivery, str | None]:
        """``attempt(row, record_now=True)``, carried on when its caller is cancelled (a
        stop): a send the platform took must be recorded, or it goes again after the
        restart. ``flush`` waits for these. The row is in flight
        (``Postponements.in_flight``) until the attempt itself ends, not its caller."""
        in_flight = self.postponements.in_flight
        in_flight.add(row.id)
        task = asyncio.ensure_future(self.attempt(row, record_now=True))
        self._finishing.add(task)
        task.add_done_callback(_finished)
        task.add_done_callback(self._finishing.discard)
        task.add_done_callback(lambda _task: in_flight.discard(row.id))
        return await asyncio.shield(task)

    async def _attempt(self, row: OutboxRow, record_now: bool) -> tuple[Delivery, str | None]:
        failpoint("before_outbox_send")
        try:
            answer = await self.send(
                row.conversation,
                row.payload,
                may_send=None if self.handback is None else self.handback.may_send(row),
            )
        except TenureLost:
            await self._release(row)
            return Delivery.RELEASED, None
        except Refused as exc:  # blocked, conversation gone, a request refused
            await self.postponements.fail(row, exc.description, gone=isinstance(exc, Gone))
            return Delivery.FAILED, None
        except PlatformError as exc:  # the platform or the network is down: not this message
            await self.postponements.postpone(row, exc)
            return Delivery.POSTPONED, None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a payload no client can send (a bug): never retried
            log.exception("delivery %s to %s cannot be sent", row.dedupe_key, row.conversation)
            await self.postponements.fail(row, f"unsendable payload ({describe(exc)})")
            return Delivery.FAILED, None
        message_id = self.client.message_id(answer)
        self.postponements.settled(row)
        if not record_now:
            # Recorded with whatever else was delivered meanwhile, in one commit, before
            # this returns (a stop does not lose the record: it is written regardless); a
            # database that does not answer holds a reply's next part no longer than
            # ``mark_wait_s`` (found by review of the first version).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.shield(self._marks.add(row.id, message_id)), self._mark_wait_s
                )
            return Delivery.SENT, message_id
        try:
            await self.store.mark_sent(row.id, message_id)
        except Exception:  # written again with the batched records, until it is
            log.exception("recording the delivery %s failed", row.dedupe_key)
            self._marks.add(row.id, message_id)
        return Delivery.SENT, message_id

    async def _behind_another(self, row: OutboxRow) -> bool:
        """A fleet's conversation moves between processes (a takeover, an idle source let
        go), and a row waiting for a retry is due for any of them: an earlier reply may
        be unsent anywhere, this process's own waiting ones included. Only what this
        process already sends before ``row`` (past this check, in the conversation's lane,
        or sent and being recorded) may be. Asked before each send, one indexed read;
        when the database is away the send goes ahead."""
        try:
            return await self.store.earlier_pending(row, self._ahead | self._marks.unrecorded())
        except Exception:
            log.warning("checking the order of delivery %s failed", row.dedupe_key, exc_info=True)
            return False

    async def _release(self, row: OutboxRow) -> None:
        assert self.handback is not None  # only a fleet's tenure breaks
        self.postponements.settled(row)
        self.stats.released += 1
        await self.handback.hand_back(row)
        self.postponed.set()

    async def flush(self, grace_s: float = FINISH_GRACE_S) -> None:
        """Wait until every delivery so far is recorded (at shutdown); an attempt still in
        flight gets ``grace_s`` to end before it is cancelled."""
        if self._finishing:
            _done, late = await asyncio.wait(set(self._finishing), timeout=grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await self._marks.flush()


def _finished(task: asyncio.Task[Any]) -> None:
    # Read, so that an error nobody awaits any more (the caller was cancelled) is not
    # reported as never retrieved: the attempt logged what it could not send.
    if not task.cancelled():
        task.exception()


async def _counted_call(
    ticket: Ticket, op: Callable[[], Awaitable[T]], may_send: Callable[[], bool] | None
) -> T:
    """``op`` in its turn; the ticket told when it was answered, failed or never made."""
    try:
        if may_send is not None and not may_send():
            raise TenureLost
        return await op()
    finally:
        ticket.answered()
