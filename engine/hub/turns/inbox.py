"""``SourceInbox``: one source's accepted messages, in arrival order.

It mirrors the source's rows in ``queued_messages``. The consumer takes one message to
seed a turn; the running turn drains the leading user messages at each round boundary
(``PendingUserInput``). A ``/stop`` clears it and bumps the epoch, so a unit taken a
moment before the stop is recognised as stale and dropped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from engine.hub.types import SendOptions
from engine.session.protocols import QueuedMessage
from engine.store.db import Database
from engine.store.queue import QueuedRow, matches

if TYPE_CHECKING:
    from engine.store import Store


@dataclass(frozen=True, slots=True)
class Unit:
    """An accepted message. Without ``queued_id`` it has no queue row: the caller's own
    record (a stored Telegram update) stands for it until ``also`` runs with its user row."""

    text: str
    options: SendOptions
    queued_id: int | None
    epoch: int
    also: Callable[[Connection], None] | None = None
    #: Its words as the person corrected them since (an edit; the last counts): a unit
    #: without a queue row has no other place for them.
    corrected: list[str] = field(default_factory=list)

    @property
    def words(self) -> str | None:
        """Its corrected words, if it was corrected."""
        return self.corrected[-1] if self.corrected else None


class SourceInbox:
    def __init__(self) -> None:
        self._pending: deque[Unit] = deque()
        #: The unit the consumer took and has not stored yet (it may wait for the session).
        self.in_hand: Unit | None = None
        #: ``in_hand`` taken back by its sender meanwhile: its turn drops it (``withdraw``).
        self.taken_back: Unit | None = None
        self.epoch = 0
        self.wake = asyncio.Event()
        #: In a fleet: the queue rows pushed here that may not be consumed yet (the owner
        #: pulls the rows other processes queued; these it has already).
        self.seen: set[int] = set()

    def __len__(self) -> int:
        return len(self._pending)

    def push(
        self,
        text: str,
        options: SendOptions,
        queued_id: int | None,
        also: Callable[[Connection], None] | None = None,
    ) -> None:
        self._pending.append(Unit(text, options, queued_id, self.epoch, also))
        self.wake.set()

    def take(self) -> Unit | None:
        """The oldest message: it seeds one turn (messages are never merged here)."""
        return self._pending.popleft() if self._pending else None

    def amend(self, key: str, value: Any, text: str, by: str | None) -> bool:
        """A waiting message without a queue row (taken in at once by an idle source: an
        edit reached it while it waited for the session, or for ``debounce_s``) corrected;
        whether one was (one with a row is corrected in the database)."""
        for unit in (*self._pending, self.in_hand):
            if unit is None or unit.queued_id is not None or unit.options.is_synthetic:
                continue
            if matches(unit.options.metadata or {}, key, value, by):
                unit.corrected.append(text)
                return True
        return False

    def withdraw(self, key: str, value: Any, by: str | None) -> list[Unit]:
        """Waiting messages their sender took back (deleted): those still queued, out
        (returned: a caller settles them), and the one in hand marked, which its turn
        drops once the session is free (``taken_back``)."""

        def taken(unit: Unit | None) -> bool:
            return (
                unit is not None
                and not unit.options.is_synthetic
                and matches(unit.options.metadata or {}, key, value, by)
            )

        gone = [unit for unit in self._pending if taken(unit)]
        for unit in gone:
            self._pending.remove(unit)
        if taken(self.in_hand):
            self.taken_back = self.in_hand
        return gone

    def is_current(self, unit: Unit) -> bool:
        return unit.epoch == self.epoch and self.taken_back is not unit

    def drain_user(self) -> list[QueuedMessage]:
        """The leading run of user messages, for injection into the running turn.

        Stops at the first synthetic message (it seeds a turn of its own) and at one without
        a queue row (its ``also`` must run with its own user row).
        """
        drained = []
        while (
            self._pending
            and not self._pending[0].options.is_synthetic
            and self._pending[0].queued_id is not None
        ):
            unit = self._pending.popleft()
            drained.append(QueuedMessage(unit.text, unit.options.metadata, unit.queued_id))
        return drained

    def clear(self) -> list[Unit]:
        """Drop everything queued (returned); a unit already taken becomes stale."""
        dropped = list(self._pending)
        self._pending.clear()
        self.epoch += 1
        return dropped


async def queue_message(
    store: Store,
    source: str,
    session_id: int,
    text: str,
    options: SendOptions,
    also: Callable[[Connection], None] | None,
) -> QueuedRow:
    """Write an accepted message's ``queued_messages`` row (with ``also``, one commit)."""
    return await store.queue.push(
        source,
        session_id,
        text,
        is_synthetic=options.is_synthetic,
        metadata=options.metadata,
        options=options.to_json(),
        also=also,
    )


def _run_all(conn: Connection, units: Sequence[Callable[[Connection], None]]) -> None:
    for unit in units:
        unit(conn)


async def settle(db: Database, units: Sequence[Unit]) -> None:
    """Run the ``also`` of dropped messages that have no queue row (only those carry one:
    a queued message's ``also`` ran with its queue row), so they are not handed over again."""
    pending = [unit.also for unit in units if unit.also is not None]
    if pending:
        await db.run(_run_all, pending)
