"""``Recovery``: at start, what a crash interrupted is resumed and accepted messages re-queued."""

from __future__ import annotations

import logging

from engine.core import Engine
from engine.hub.placement import Start
from engine.hub.turns.sources import SourceRegistry, SourceState
from engine.hub.types import SendOptions

__all__ = ["Recovery"]

log = logging.getLogger(__name__)


class Recovery:
    """Interrupted turns first, then the queued messages in order, for the sources with
    ``prefix`` (``chathub chat`` takes only ``console``'s, leaving the chats to the service)."""

    __slots__ = ("_engine", "_prefix", "_sources")

    def __init__(self, engine: Engine, sources: SourceRegistry, prefix: str) -> None:
        self._engine = engine
        self._sources = sources
        self._prefix = prefix

    async def run(self, start: Start) -> None:
        """``start``: each source with work found gets its consumer."""
        store = self._engine.store
        sources = await store.sessions.all_sources()
        by_session = {session_id: source for source, session_id in sources.items()}
        touched: dict[str, SourceState] = {}
        for session_id in await self._engine.interrupted_sessions():
            source = by_session.get(session_id)
            if source is None:
                log.warning("session %s was interrupted but no source uses it", session_id)
                continue
            if not source.startswith(self._prefix):
                continue
            state = touched[source] = await self._sources.state(source)
            state.resume_first = True
        for row in await store.queue.pending():
            if not row.source.startswith(self._prefix):
                continue
            if sources.get(row.source) != row.session_id:
                await store.queue.remove(row.id)  # queued for a session since replaced
                continue
            state = touched[row.source] = await self._sources.state(row.source)
            options = SendOptions.from_row(row.is_synthetic, row.metadata, row.options)
            state.inbox.push(row.content, options, row.id)
        for state in touched.values():
            start(state)
        if touched:
            log.info("recovered %d source(s) with interrupted or queued work", len(touched))
