"""Postponed outbox deliveries, sent again by the running process when they are due.

``Outbound`` postpones a delivery that failed through its in-line retries (the platform's
outage, a dead network): the row stays pending with its attempt count and the time it is
due again (``RetrySchedule``: 1 s, doubling, at most 5 min apart). This loop sleeps
until the earliest row is due — or until a new postponement wakes it — claims what is
due, and delivers it: chats concurrently, each chat's rows in order; when one fails again
the rest of that chat waits with it, so a chat never sees a later reply before an
earlier one that was waiting. Each chat's rows go in a task of their own and the loop
goes on claiming meanwhile: a chat held by a 429 storm (up to 20 waits of a minute in
line) holds up no other (until 2026-12-06 the round waited for its slowest chat). At start every pending row is due at once
(``Outbound.recover``).

Time is injected (``now`` for the stored schedule, ``sleep`` for the waits): tests run
an outage's whole schedule without waiting for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from bot.delivery.outbound import Delivery, Outbound
from bot.delivery.store import OutboxRow, OutboxStore
from engine.store import utcnow

__all__ = ["Redelivery", "keep_delivering", "recover_orphans_forever"]

log = logging.getLogger(__name__)

#: Rows claimed per round; more wait for the next round (which starts at once).
BATCH = 50
#: After a failure of the loop itself (the database away), try again this much later.
ERROR_PAUSE_S = 5.0
#: While a fleet member's tenure is broken (paused, cut off, its membership renewed
#: late), it claims nothing for this long: what it claimed it would hand straight back.
TENURE_PAUSE_S = 1.0


class Redelivery:
    def __init__(
        self,
        outbound: Outbound,
        store: OutboxStore,
        *,
        now: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.outbound = outbound
        self.store = store
        self._now = now
        self._sleep = sleep
        # Shared with the postponements: a row being sent here is never moved by them.
        self._in_flight = outbound.postponements.in_flight
        # Each chat's newest delivery: the chat's next rows go after it.
        self._chats: dict[str, asyncio.Task[None]] = {}
        # Every delivery under way, those queued behind another included (a stop ends all).
        self._running: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Deliver postponed rows as they come due, until cancelled."""
        wake = self.outbound.postponed
        try:
            while True:
                await self._round(wake)
        finally:  # a stop: each attempt under way still ends and is recorded (shielded)
            # Every chat's task, not only its newest: one queued behind another left that
            # one running past the stop, on to the chat's next rows (found by review).
            running = list(self._running)
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _round(self, wake: asyncio.Event) -> None:
        """Start what is due, then sleep until more is (or a postponement comes in)."""
        if not self.outbound.may_take():
            # Each row claimed would be handed back and claimed again at once: a busy
            # loop of the database until the membership holds again (found by review
            # on 2026-12-06). Another member sends them meanwhile.
            await self._sleep(TENURE_PAUSE_S)
            return
        wake.clear()  # before reading the schedule: a postponement from now on wakes us
        try:
            if await self.start_due():
                return  # a full batch, perhaps: look again at once
            due = await self.store.next_attempt_at()
        except asyncio.CancelledError:
            raise
        except Exception:  # the database is away: the rows wait, nothing is lost
            log.exception("redelivering postponed %s messages failed", self.outbound.client.name)
            await self._sleep(ERROR_PAUSE_S)
            return
        if due is None and self.outbound.has_stranded:
            due = self._now() + timedelta(seconds=ERROR_PAUSE_S)  # the database, again
        if due is None:
            await wake.wait()
            return
        delay = (due - self._now()).total_seconds()
        if delay > 0:
            await self._wait(delay, wake)

    async def run_due(self) -> int:
        """Claim the rows due now and deliver them; how many were tried. Returns when
        their deliveries have ended (``run`` does not wait for them)."""
        claimed = await self.start_due()
        await asyncio.gather(*self._running, return_exceptions=True)
        return claimed

    async def start_due(self) -> int:
        """Claim the rows due now and start their delivery, a task per chat queued behind
        that chat's task still under way; how many were claimed."""
        await self.outbound.unstrand()  # rows whose schedule could not be stored: due now
        now = self._now()
        lease_until = now + timedelta(seconds=self.outbound.schedule.lease_s)
        mark = self.outbound.mark()
        claimed = self.outbound.taken(await self.store.claim_due(now, lease_until, BATCH), mark)
        # A row still being sent here (its lease ran out during a long 429 storm) is left
        # to the delivery in progress: never two sends of one row from this process.
        rows = [row for row in claimed if row.id not in self._in_flight]
        # Each claimed row is in flight until its own attempt ends, not only during it: a
        # new reply queued behind one still waiting for its turn in its chat must not make
        # it due again (another process would claim it and send it too).
        self._in_flight.update(row.id for row in rows)
        by_chat: dict[str, list[OutboxRow]] = {}
        for row in rows:
            by_chat.setdefault(row.conversation, []).append(row)
        for chat, chat_rows in by_chat.items():
            self._start_chat(chat, chat_rows)
        return len(rows)

    def _start_chat(self, chat: str, rows: list[OutboxRow]) -> None:
        task = asyncio.create_task(self._deliver_chat(rows, self._chats.get(chat)))
        self._chats[chat] = task
        self._running.add(task)

        def ended(task: asyncio.Task[None]) -> None:
            self._running.discard(task)
            if self._chats.get(chat) is task:
                del self._chats[chat]
            if not task.cancelled() and task.exception() is not None:
                # That chat's rows wait for their lease.
                log.error("redelivering to a chat failed", exc_info=task.exception())

        task.add_done_callback(ended)

    async def _deliver_chat(self, rows: list[OutboxRow], after: asyncio.Task[None] | None) -> None:
        """One chat's claimed rows in order, after the chat's earlier ones (``after``).
        Each stays in flight until its own attempt ends (``attempt_to_the_end``, which a
        stop does not cut short); the rows not tried leave it when this ends for them."""
        tried = 0
        try:
            if after is not None:  # its outcome is its own: a row it postponed still waits
                await asyncio.wait({after})  # for ours, ``attempt`` queues behind it
            for index, row in enumerate(rows):
                tried = index + 1
                if not await self._deliver(row, rows[tried:]):
                    return
        except Exception:
            self.outbound.strand([row.id for row in rows[tried:]])
            raise
        finally:
            self._in_flight.difference_update(row.id for row in rows[tried:])

    async def _deliver(self, row: OutboxRow, rest: list[OutboxRow]) -> bool:
        """Try ``row``; whether the chat's later rows of this round go on after it."""
        stats = self.outbound.stats
        stats.redelivery_attempts += 1
        outcome, _message_id = await self.outbound.attempt_to_the_end(row)
        if outcome is Delivery.SENT:
            stats.redelivered += 1
            log.info("postponed delivery %s reached %s", row.dedupe_key, row.conversation)
        elif outcome is Delivery.RELEASED:  # a fleet's: the rest are no longer ours
            await self.outbound.release_rows(rest)
            return False
        elif outcome is Delivery.POSTPONED:
            # The platform is still failing for this chat (or an earlier reply is on its way
            # elsewhere): its later rows wait with this one.
            await self.outbound.postponements.wait_with(row, rest)
            return False
        return True

    async def _wait(self, delay: float, wake: asyncio.Event) -> None:
        """Sleep ``delay`` seconds, or less if a postponement comes in meanwhile."""
        sleeper = asyncio.ensure_future(self._sleep(delay))
        waker = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waker.cancel()


async def recover_orphans_forever(outbound: Outbound, every_s: float) -> None:
    """A fleet's: replies a dead process took to send and never sent are due (its
    membership lease expired); a live process's in-flight replies stay its own, and so do
    this process's own (it hands back itself what it may no longer send)."""
    while True:
        try:
            await outbound.recover_orphans()
        except Exception:  # the database is away: the next round
            log.warning(
                "recovering the fleet's unsent %s replies failed",
                outbound.client.name,
                exc_info=True,
            )
        await asyncio.sleep(every_s)


async def keep_delivering(outbound: Outbound, orphan_scan_s: float | None = None) -> None:
    """A platform's delivery chores until cancelled: its postponed rows redelivered, and
    in a fleet (``orphan_scan_s``) the rows of dead members recovered."""
    work = [Redelivery(outbound, outbound.store).run()]
    if orphan_scan_s is not None:
        work.append(recover_orphans_forever(outbound, orphan_scan_s))
    await asyncio.gather(*work)
