"""``MessageIntake``: accepting a message durably, and dropping what is queued (/stop, /new)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy.engine import Connection

from engine.config import HubConfig
from engine.hub.consumer import InboxConsumer
from engine.hub.fleet import FleetWork
from engine.hub.inbox import Unit, queue_message, settle
from engine.hub.protocols import Publish
from engine.hub.sources import SourceRegistry, SourceState
from engine.hub.types import NewSession, SendOptions, check_text
from engine.store import Store

__all__ = ["MessageIntake"]


class MessageIntake:
    """A message is checked, written to ``queued_messages`` and only then acknowledged."""

    __slots__ = ("_config", "_consumer", "_fleet", "_publish", "_sources", "_store")

    def __init__(
        self,
        store: Store,
        sources: SourceRegistry,
        consumer: InboxConsumer,
        publish: Publish,
        config: HubConfig,
    ) -> None:
        self._store = store
        self._sources = sources
        self._consumer = consumer
        self._publish = publish
        self._config = config
        self._fleet: FleetWork | None = None

    def join_fleet(self, fleet: FleetWork) -> None:
        """Queue every message, and run it where its source is owned."""
        self._fleet = fleet

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
        if self._fleet is not None:  # a row always: another process may be the one to run it
            return await self._fleet.accept(source, text, options, also)
        state = await self._sources.state(source, agent_id=options.agent_id)
        if redelivered_if_lost and also is not None and state.is_idle:
            state.inbox.push(text, options, None, also)  # no await since the check
            self._consumer.ensure(state)
            return None
        row = await queue_message(self._store, source, state.session_id, text, options, also)
        state.inbox.push(text, options, row.id)
        self._consumer.ensure(state)
        return row.id

    async def stop(self, source: str) -> int:
        """Drop the queued messages and stop the turn; how many messages were dropped."""
        if self._fleet is not None:  # the rows are everyone's; the turn may run elsewhere
            dropped = await self._store.queue.drop(source)
            await self._fleet.stop_elsewhere(source)
            state = self._sources.get(source)
            if state is not None:
                dropped = max(dropped, len(await self._stop(state)))
            return dropped
        state = self._sources.get(source)
        if state is None:
            return 0
        return len(await self._stop(state))

    async def clear(self, source: str) -> int:
        """Stop as ``stop`` does, then move the source to a fresh session; its id."""
        state = await self._sources.state(source)
        await self._stop(state)
        previous = state.session_id
        fresh = await self._store.sessions.for_source(source, fresh=True)
        state.session_id, state.handler = fresh.id, None
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
