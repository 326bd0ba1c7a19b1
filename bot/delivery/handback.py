"""Two collaborators of ``Outbound`` on the outbox's side: a fleet process's hold on the
rows it sends (``Handback``), and the batched "sent" marks (``DeliveryMarks``).

In a fleet a row is sent only by the process that took it (recorded or claimed it), and
only while that process's membership has held without a break since (``Tenure``, checked
right before every try). Once it broke — the process was paused or cut off past its
membership lease, and another may have taken the row for an orphan and sent it — the row
is handed back instead (``release``: due for the fleet unless another process took it).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from bot.delivery.store import OutboxRow, OutboxStore

__all__ = ["DeliveryMarks", "Handback", "Tenure", "TenureLost"]

log = logging.getLogger(__name__)


class Tenure(Protocol):
    """A fleet process's hold on what it takes to send (``SourceOwnership``'s membership)."""

    def mark(self) -> float:
        """Now, taken before a row is recorded or claimed."""
        ...

    def tenure_holds(self, mark: float) -> bool:
        """Whether a row taken at ``mark`` is still this process's to send."""
        ...


class TenureLost(Exception):
    """A send not started: the row's process may no longer send it."""


class Handback:
    """A fleet process's side of sending outbox rows: checked against its tenure, handed
    back when it broke."""

    def __init__(self, tenure: Tenure, store: OutboxStore, now: Callable[[], datetime]) -> None:
        self.tenure = tenure
        self.store = store
        self._now = now
        #: Rows handed back while the database was away: ``recover_orphans`` retries them.
        self.stranded: set[int] = set()

    def mark(self) -> float:
        """Taken before rows are recorded or claimed (``OutboxRow.taken_at``)."""
        return self.tenure.mark()

    def holds_now(self) -> bool:
        """Whether rows taken now would be this process's to send."""
        return self.tenure.tenure_holds(self.tenure.mark())

    def may_send(self, row: OutboxRow) -> Callable[[], bool]:
        """What to ask right before each try of ``row``."""
        tenure, mark = self.tenure, row.taken_at
        if mark is None:  # taken without a mark: never sent unchecked in a fleet
            return lambda: False
        return lambda: tenure.tenure_holds(mark)

    async def hand_back(self, row: OutboxRow) -> None:
        """``row`` is due for whoever claims it first (another process that took it for an
        orphan already did)."""
        log.warning(
            "this process's fleet membership lapsed (paused or cut off): delivery %s to "
            "%s is left to the fleet",
            row.dedupe_key,
            row.conversation,
        )
        try:
            await self.store.release(row.id, self._now())
        except Exception:  # the database is away: the orphan scan hands it back later
            log.warning("handing back the delivery %s failed", row.dedupe_key, exc_info=True)
            self.stranded.add(row.id)

    async def recover_orphans(self) -> int:
        """What dead (or lapsed) processes took and never sent is due now, and so are this
        process's rows it could not hand back before."""
        stranded = set(self.stranded)
        count = await self.store.recover_orphans(self._now(), stranded)
        self.stranded -= stranded
        return count


#: After a failed record of deliveries (the database away), the next try this much later.
MARK_RETRY_S = 1.0


class DeliveryMarks:
    """Deliveries recorded as sent together: those of the next ``delay_s``, one commit.

    A record that fails (the database away) is tried again every ``MARK_RETRY_S`` until it
    is written: a delivery left pending would be sent again (by a fleet's orphan scan, or
    at the next start), and until then it holds the chat's later replies back elsewhere.
    """

    def __init__(self, store: OutboxStore, delay_s: float, retry_s: float = MARK_RETRY_S) -> None:
        self.store = store
        self.delay_s = delay_s
        self.retry_s = retry_s
        self._sent: list[tuple[int, str | None]] = []
        self._writing: list[tuple[int, str | None]] = []
        #: Who waits for the records of ``_sent``: told when the commit carrying them ran.
        self._waiting: list[asyncio.Future[None]] = []
        # Records that failed: written again after a pause, with whatever came meanwhile.
        self._failed: list[tuple[int, str | None]] = []
        self._marking: asyncio.Task[None] | None = None
        # Set while the writer pauses after a failure (``flush`` does not wait for it).
        self._pausing = asyncio.Event()

    def unrecorded(self) -> set[int]:
        """The rows delivered whose record is not committed yet."""
        return {outbox_id for outbox_id, _ in (*self._failed, *self._writing, *self._sent)}

    def add(self, outbox_id: int, message_id: str | None) -> asyncio.Future[None]:
        """Record a delivery; the future is done once the commit carrying it ran (written,
        or failed: then it is written again in the background). A sender awaits it, so a
        crash after the platform answered does not send the reply again (until 2026-12-06
        nobody waited, and a kill within the commit's few ms did; found by review)."""
        self._sent.append((outbox_id, message_id))
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._pausing.is_set():  # the database is failing: written when it is back
            waiter.set_result(None)
        else:
            self._waiting.append(waiter)
        if self._marking is None or self._marking.done():
            # In a context of its own: made inside a turn (a voice message a tool sent),
            # it took the turn's lease check with it, and once that chat was let go
            # every record it wrote, any chat's, was refused for good (until 2026-12-07;
            # found by review).
            self._marking = asyncio.create_task(
                self._write(), name="outbox-marks", context=contextvars.Context()
            )
        return waiter

    async def _write(self) -> None:
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)  # real time: a batch, not a pacing wait
        while self._sent or self._failed:
            if not await self._write_once():
                self._pausing.set()
                try:
                    await asyncio.sleep(self.retry_s)  # real time: the database's
                finally:
                    self._pausing.clear()

    async def _write_once(self) -> bool:
        self._writing, self._sent, self._failed = self._failed + self._sent, [], []
        waiting, self._waiting = self._waiting, []
        try:
            await self.store.mark_sent_many(self._writing)
        except Exception:
            log.exception("recording %d delivered message(s) failed", len(self._writing))
            self._failed = self._writing
            return False
        finally:
            self._writing = []
            for waiter in waiting:
                if not waiter.done():
                    waiter.set_result(None)
        return True

    async def flush(self) -> None:
        """Until every delivery so far is recorded; when the database is away, until one
        more try failed (a stop does not wait for the database to come back)."""
        while self._marking is not None and not self._marking.done():
            pausing = asyncio.ensure_future(self._pausing.wait())
            try:
                await asyncio.wait(
                    {asyncio.shield(self._marking), pausing},
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                pausing.cancel()
            if not self._marking.done():  # paused after a failure: one more try, now
                self._marking.cancel()
                await asyncio.gather(self._marking, return_exceptions=True)
                if self._sent or self._failed:
                    await self._write_once()
                return
