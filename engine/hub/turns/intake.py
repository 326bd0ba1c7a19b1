"""``MessageIntake``: accepting a message durably, and dropping what is queued (/stop, /new)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from engine.config import HubConfig
from engine.hub.placement import Placement
from engine.hub.protocols import Publish
from engine.hub.turns.consumer import InboxConsumer
from engine.hub.turns.inbox import Unit, settle
from engine.hub.turns.sources import SourceRegistry, SourceState
from engine.hub.types import NewSession, SendOptions, check_text
from engine.store import Database, Store

__all__ = ["MessageIntake"]


class MessageIntake:
    """A message is checked, written to ``queued_messages`` and only then acknowledged."""

    __slots__ = ("_config", "_consumer", "_placement", "_publish", "_sources", "_store")

    def __init__(
        self,
        store: Store,
        sources: SourceRegistry,
        consumer: InboxConsumer,
        placement: Placement,
        publish: Publish,
        config: HubConfig,
    ) -> None:
        self._store = store
        self._sources = sources
        self._consumer = consumer
        self._placement = placement
        self._publish = publish
        self._config = config

    async def accept(
        self,
        source: str,
        text: str,
        options: SendOptions,
        also: Callable[[Connection], None] | None,
        redelivered_if_lost: bool,
    ) -> int | None:
        """Store and queue a checked message for a valid source; its queue id (``None``:
        an idle source takes a redeliverable message without a queue row)."""
        check_text(text, options, self._config.max_message_chars)
        return await self._placement.accept(
            source, text, options, also, redelivered_if_lost, self._consumer.ensure
        )

    async def amend(
        self, source: str, key: str, value: Any, text: str, by: str | None, threads: bool
    ) -> bool:
        """A waiting message corrected (checked as a message is); whether it still waited.
        Its queue row is what the turn stores and reads, in whichever process runs it."""
        check_text(text, SendOptions(), self._config.max_message_chars)
        if await self._store.queue.amend(source, key, value, text, by=by, threads=threads):
            return True
        # One taken in without a queue row (an idle source's) waits in memory only.
        states = self._sources.within(source) if threads else [self._sources.get(source)]
        return any(s is not None and s.inbox.amend(key, value, text, by) for s in states)

    async def withdraw(
        self, source: str, key: str, value: Any, by: str | None, threads: bool
    ) -> bool:
        """A waiting message its sender took back (deleted) forgotten; whether one still
        waited. Its queue row goes, and the process holding it drops it (in a fleet only
        this process's units are dropped here: docs/hub.md)."""
        rows = await self._store.queue.withdraw(source, key, value, by=by, threads=threads)
        states = self._sources.within(source) if threads else [self._sources.get(source)]
        units = [u for s in states if s is not None for u in s.inbox.withdraw(key, value, by)]
        await settle(self._store.db, units)
        in_hand = any(s is not None and s.inbox.taken_back is not None for s in states)
        return bool(rows or units or in_hand)

    async def stop(self, source: str) -> int:
        """Drop the queued messages and stop the turn; how many messages were dropped."""
        return await self._placement.stop(source, self._stop)

    async def clear(self, source: str, also: Callable[[Connection], None] | None = None) -> int:
        """Stop as ``stop`` does, wherever the turn runs, then move the source to a fresh
        session while holding it (in a fleet its owner, told to stop, lets it go first: a
        process that went on in the old session would drop what comes next); its id.
        ``also`` (the command's event marked handled) commits with the fresh session, and is
        tried first: an event handled before stops nothing (a fleet's second receiver
        handing over a ``/new`` acted on stopped the conversation that followed it)."""
        if also is not None:
            await _try(self._store.db, also)
        await self._placement.stop(source, self._stop)
        async with self._placement.holding(source):
            state = await self._sources.state(source)
            await self._stop(state)  # whatever was queued meanwhile
            previous = state.session_id
            fresh = await self._store.sessions.for_source(source, fresh=True, also=also)
            state.session_id, state.handler = fresh.id, None
            state.resume_first = False  # the old session's cut turn is left, as /new says
        self._publish(source, fresh.id, NewSession(fresh.id, previous))
        return fresh.id

    async def _stop(self, state: SourceState) -> Sequence[Unit]:
        dropped = state.inbox.clear()
        if state.handler is not None:
            state.handler.cancel()
        # Forget them durably: queue rows removed, callers' records settled.
        await self._store.queue.drop(state.name)
        await settle(self._store.db, dropped)
        return dropped


class _Tried(Exception):
    """Rolls back a unit of work that only tried its work."""


def _tried(conn: Connection, work: Callable[[Connection], None]) -> None:
    """``work`` done and rolled back: whatever it raises (``EventAlreadyHandled``) is
    raised, nothing is written."""
    work(conn)
    raise _Tried


async def _try(db: Database, work: Callable[[Connection], None]) -> None:
    try:
        await db.run(_tried, work)
    except _Tried:
        return
