"""The memory service: the ChatEventBus's consumer that keeps the search index current.

Subscribed before its first catch-up, so nothing published after ``start`` is missed; an
event only names a session to index (``Indexer`` reads the text back from the database).
On ``Lagged`` it no longer knows which sessions it missed, so it catches up every session
behind its watermark. The bus never waits for it: a slow index slows nobody's turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from engine.bus.broadcast import BusClosed, Lagged, Subscription
from engine.bus.chat import AssistantResponse, BusEvent, ChatEventBus, CompactionDone, UserMessage
from engine.store import Database
from memory.indexer import Indexer
from memory.search import Search

__all__ = ["MemoryService"]

log = logging.getLogger(__name__)


class MemoryService:
    """Start after the engine (its bus and database); close before the engine."""

    def __init__(
        self,
        db: Database,
        bus: ChatEventBus,
        *,
        indexer: Indexer | None = None,
        capacity: int | None = None,
    ) -> None:
        self._bus = bus
        self._capacity = capacity
        self.indexer = indexer or Indexer(db)
        self.search = Search(db)
        self._sub: Subscription[BusEvent] | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()  # set while waiting for an event with nothing buffered

    async def start(self) -> None:
        self._sub = self._bus.subscribe(self._capacity)
        self._task = asyncio.create_task(self._run(self._sub), name="chathub-memory")

    async def drained(self) -> None:
        """Return once the bus is closed and everything it delivered is indexed."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def settled(self) -> None:
        """Return once everything published so far is indexed (for tests and tools that
        must read their own writes); at once when the service is not running."""
        sub = self._sub
        while sub is not None and self._task is not None and not self._task.done():
            if self._idle.is_set() and not sub.pending:
                return
            self._idle.clear()
            # The worker sets it again when it next waits with an empty buffer.
            waiter = asyncio.ensure_future(self._idle.wait())
            await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()

    async def close(self) -> None:
        if self._sub is not None:
            self._sub.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = self._sub = None

    async def _run(self, sub: Subscription[BusEvent]) -> None:
        full = True  # at start: resume every session from its watermark
        wait = False  # the first round indexes at once, later ones wait for an event
        while True:
            sessions: set[int] = set()
            closed = False
            try:
                if wait:
                    if not sub.pending:
                        self._idle.set()
                    item = await sub.recv()
                    self._idle.clear()
                    sessions.add(_session_of(item))
                while sub.pending:  # whatever else is buffered: one pass per session
                    sessions.add(_session_of(await sub.recv()))
            except Lagged as lagged:
                log.info("memory: the chat bus dropped %d events; catching up", lagged.missed)
                full = True
            except BusClosed:
                closed = True
            self._idle.clear()  # (Lagged skipped the clear after recv)
            sessions.discard(0)
            # A failed round leaves ``full`` set: the next event retries everything behind.
            full = not await self._index(sessions, full)
            if closed:
                return
            wait = True

    async def _index(self, sessions: set[int], full: bool) -> bool:
        """Index ``sessions`` (every session behind, when ``full``); False when it failed
        (the next round catches up everything: the watermarks say what is missing)."""
        try:
            if full:
                await self.indexer.catch_up()
            for session_id in sorted(sessions):
                await self.indexer.index_session(session_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("memory: indexing failed; retrying with the next event")
            return False
        return True


def _session_of(event: BusEvent) -> int:
    match event:
        case UserMessage(e) | AssistantResponse(e):
            return e.session_id
        case CompactionDone(e):
            return e.session_id
    return 0  # an event kind this consumer does not know
