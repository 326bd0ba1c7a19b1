"""``SessionControls``: a source's model choice, usage, compaction and tool grants."""

from __future__ import annotations

from engine.core import Engine
from engine.hub.placement import Placement
from engine.hub.turns.sources import SourceRegistry
from engine.hub.types import HubError
from engine.session.context.compaction import CompactionResult
from engine.store.views import SessionUsage

__all__ = ["AUTO_MODEL", "SessionControls"]

#: The model choice that follows the configured order instead of pinning one model.
AUTO_MODEL = "auto"


class SessionControls:
    __slots__ = ("_engine", "_placement", "_sources")

    def __init__(self, engine: Engine, sources: SourceRegistry, placement: Placement) -> None:
        """``placement``: each control reads the source's current session through it (in a
        fleet another process may have moved the source on)."""
        self._engine = engine
        self._sources = sources
        self._placement = placement

    async def usage(self, source: str) -> SessionUsage:
        """Token use of the last answer (how full the context is) and the session's totals."""
        state = await self._placement.current(source)
        return await self._engine.store.views.usage(state.session_id)

    async def force_compact(self, source: str) -> CompactionResult | None:
        handler = await self._sources.handler(await self._placement.current(source))
        return await handler.force_compact()

    async def reset_tools(self, source: str) -> int:
        state = await self._placement.current(source)
        return await self._engine.store.sessions.reset_tool_grants(state.session_id)

    def list_models(self) -> list[str]:
        return list(self._engine.models.names)

    async def selected_model(self, source: str) -> str:
        state = await self._placement.current(source)
        return await self._engine.store.sessions.source_model(state.name) or AUTO_MODEL

    async def select_model(self, source: str, model: str) -> str:
        """Pin the source to a configured model, or ``auto`` (persisted per source)."""
        state = await self._placement.current(source)
        names = self.list_models()
        chosen = None if model == AUTO_MODEL else model
        if chosen is not None and chosen not in names:
            raise HubError(f"model: {model!r} is not configured; choose one of {names} or 'auto'")
        await self._engine.store.sessions.set_source_model(source, chosen)
        if state.handler is not None:
            state.handler.preferred_model = chosen or state.handler.agent.model
        return model
