"""``Postponements``: the outbox rows of each chat that wait for a retry, for ``Outbound``.

A delivery that failed through its in-line retries is postponed: its row records the
attempt and when it is due again (``RetrySchedule``), and ``Redelivery`` sends it then. A
chat's later replies wait behind it, so the chat never sees a later reply before an
earlier one that was waiting. A delivery that no retry changes is marked failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.delivery.errors import PlatformError, describe
from bot.delivery.stats import OutboundStats
from bot.delivery.store import OutboxRow, OutboxStore

__all__ = ["Backoff", "Postponements", "RetrySchedule"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backoff:
    """``first_s`` after the first failure, doubling, never above ``cap_s``."""

    first_s: float = 0.5
    cap_s: float = 5.0

    def delay(self, failures: int) -> float:
        return min(self.first_s * 2.0 ** min(max(failures, 1) - 1, 30), self.cap_s)


@dataclass(frozen=True, slots=True)
class RetrySchedule(Backoff):
    """When a postponed delivery is tried again: ``first_s`` doubling up to ``cap_s``
    (``delay(attempts)``: seconds from the ``attempts``-th failed attempt to the next)."""

    first_s: float = 1.0
    cap_s: float = 300.0
    #: A claimed row not settled within this (the process died mid-send) is due again.
    lease_s: float = 900.0


class Postponements:
    def __init__(
        self,
        store: OutboxStore,
        schedule: RetrySchedule,
        stats: OutboundStats,
        now: Callable[[], datetime],
        wake: asyncio.Event,
        strand: Callable[[Collection[int]], None] = lambda _ids: None,
    ) -> None:
        """``wake``: set whenever a delivery is postponed or due at once (``Redelivery``);
        ``strand``: rows whose new schedule could not be stored (the database away), for a
        fleet's orphan scan to make due (in flight with this process, nobody else would)."""
        self.store = store
        self.schedule = schedule
        self.stats = stats
        self._now = now  # wall time: a postponed row's schedule is stored
        self._wake = wake
        self._strand = strand
        # Rows postponed per chat and not settled yet: a new reply to such a chat goes
        # after them.
        self._waiting: dict[str, set[int]] = {}
        # Conversations held behind another process's earlier row, until when.
        self._held: dict[str, datetime] = {}
        # The time the last postponed row of a retry round is due again: its round's later
        # rows take the very same (``wait_with``).
        self._due_again: tuple[int, datetime] | None = None
        #: Rows ``Redelivery`` claimed and has not settled (sending, or waiting for their
        #: turn in their chat): never made due again meanwhile (another process of a fleet
        #: would claim and send them too).
        self.in_flight: set[int] = set()

    def waiting(self, conversation: str) -> set[int] | None:
        return self._waiting.get(conversation) or None

    async def queue_behind(
        self, row: OutboxRow, waiting: set[int], *, redelivered: bool = False
    ) -> None:
        """An earlier reply to this chat waits for a retry: this one goes after it.

        Sending it now could put it before the earlier one in the chat. Instead the chat's
        waiting rows and this one are due at once: ``Redelivery`` tries them in order right
        away (a new reply is a good moment to find out whether Telegram is back), and when
        the first fails again the others wait with it. A conversation held behind another
        process's row (``hold``) stays held until then: the new row waits with it.
        """
        waiting.add(row.id)
        due = max(self._now(), self._held.get(row.conversation, self._now()))
        # ``redelivered``: a row ``Redelivery`` claimed (in flight, its claim's lease as its
        # time): it is given back with the others, or it waited out that lease.
        moving = sorted((waiting - self.in_flight) | ({row.id} if redelivered else set()))
        try:
            moved = await self.store.reschedule(moving, due)
        except Exception:  # they keep their old times; this one is due at the next start
            log.exception("queueing the delivery %s failed", row.dedupe_key)
            self._strand(moving)
        else:
            self._keep(row.conversation, moved | (waiting & self.in_flight))
        self._wake.set()

    async def hold(self, row: OutboxRow, seconds: float) -> None:
        """A fleet's: an earlier reply to this conversation is on its way with another
        process (or left by a dead one for the fleet): this one, and this process's later
        ones, are tried again in ``seconds``, so none overtakes it."""
        waiting = self._waiting.setdefault(row.conversation, set())
        waiting.add(row.id)
        self.stats.held += 1
        log.info(
            "delivery %s to %s waits for an earlier one on its way with another process",
            row.dedupe_key,
            row.conversation,
        )
        due = self._now() + timedelta(seconds=seconds)
        self._held[row.conversation] = due
        # This row is not sent now, whoever was trying it: it is due again then.
        moving = sorted((waiting - self.in_flight) | {row.id})
        try:
            moved = await self.store.reschedule(moving, due)
        except Exception:  # pending: due at its lease's end, the orphan scan, or the next start
            log.exception("holding the delivery %s failed", row.dedupe_key)
            self._strand(moving)
        else:
            self._keep(row.conversation, moved | (waiting & self.in_flight))
        self._wake.set()

    def _keep(self, conversation: str, pending: set[int]) -> None:
        """What still waits of a conversation's rows: those still pending with this process
        (another process may have claimed and sent one meanwhile, in a fleet)."""
        waiting = self._waiting.get(conversation)
        if waiting is not None:
            waiting &= pending
            self._forget_if_done(conversation, waiting)

    def settled(self, row: OutboxRow) -> None:
        waiting = self._waiting.get(row.conversation)
        if waiting is not None:
            waiting.discard(row.id)
            self._forget_if_done(row.conversation, waiting)

    def _forget_if_done(self, conversation: str, waiting: set[int]) -> None:
        if not waiting:
            del self._waiting[conversation]
            self._held.pop(conversation, None)

    async def postpone(self, row: OutboxRow, error: PlatformError) -> None:
        waiting = self._waiting.setdefault(row.conversation, set())
        waiting.add(row.id)
        attempts = row.attempts + 1
        delay = self.schedule.delay(attempts)
        now = self._now()
        due = now + timedelta(seconds=delay)
        self._due_again = (row.id, due)
        self.stats.postponed += 1
        log.warning(
            "delivery %s to %s postponed (attempt %d: %s); next try in %.1f s",
            row.dedupe_key,
            row.conversation,
            attempts,
            describe(error),
            delay,
        )
        # Replies queued behind this one while it was being tried wait with it.
        later = sorted(other for other in waiting - self.in_flight if other > row.id)
        try:
            if not await self.store.postpone(row.id, describe(error), now, due):
                self.settled(row)  # another process took it meanwhile: its to send
            await self.store.reschedule(later, due)
        except Exception:  # pending: due at its lease's end, the orphan scan, or the next start
            log.exception("recording the postponed delivery %s failed", row.dedupe_key)
            self._strand([row.id, *later])
        self._wake.set()

    async def wait_with(self, row: OutboxRow, rest: Sequence[OutboxRow]) -> None:
        """``row`` of a retry round was postponed (or held): the round's later rows of its
        conversation wait with it, and a new reply queues behind them all (trying them
        now would only fail again, or overtake it)."""
        if not rest:
            return
        ids = [later.id for later in rest]
        self._waiting.setdefault(row.conversation, set()).update(ids)
        # The row's own due time, not one read a moment later: the round's later rows were
        # due a few ms after a reply queued behind it, which went first (found by review).
        postponed = self._due_again
        if postponed is not None and postponed[0] == row.id:
            due = postponed[1]
        else:
            due = self._now() + timedelta(seconds=self.schedule.delay(row.attempts + 1))
        try:
            moved = await self.store.reschedule(ids, due)
        except Exception:  # pending: due at their lease's end, the orphan scan, or a start
            log.exception("postponing the deliveries after %s failed", row.dedupe_key)
            self._strand(ids)
        else:
            others = self._waiting.get(row.conversation, set()) - set(ids)
            self._keep(row.conversation, moved | others)

    async def fail(self, row: OutboxRow, reason: str, *, gone: bool = False) -> None:
        """``gone``: the conversation refused it for good (``Gone``)."""
        self.settled(row)
        log.error("could not deliver %s to %s: %s", row.dedupe_key, row.conversation, reason)
        self.stats.deliveries_failed += 1
        try:
            await self.store.mark_failed(row.id, reason, gone=gone)
        except Exception:  # pending: tried again (the orphan scan, the next start), refused again
            log.exception("recording the failed delivery %s failed", row.dedupe_key)
            self._strand([row.id])
