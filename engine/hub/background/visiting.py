"""``Visitors``: sessions no chat owns (a scheduled job's run) that ask in a chat.

The run's session is not the chat's: its card is recorded with the chat (``shown_in`` on
the approval) before it is published there, so a decision in that chat, also after a
restart, reaches that call (``Decisions``); the card closes when its call ends without
one. What "🔄 Session" does on such a card is the job's business (``StandingGrant``). Its
turns know the user it serves as that chat's turns do (``turn_context``); it is stopped
through the hub's one door (``ChatHub.cancel_session``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core import Engine
from engine.hub.adapters import AdapterRegistry
from engine.hub.decisions import Decisions
from engine.hub.protocols import StandingGrant
from engine.hub.turns.sources import SourceRegistry
from engine.hub.types import DecisionMade, validate_source
from engine.session.events import ApprovalRequired

__all__ = ["Visitors"]


class Visitors:
    __slots__ = ("_adapters", "_decisions", "_engine", "_sources")

    def __init__(
        self,
        engine: Engine,
        sources: SourceRegistry,
        adapters: AdapterRegistry,
        decisions: Decisions,
    ) -> None:
        self._engine = engine
        self._sources = sources
        self._adapters = adapters
        self._decisions = decisions

    async def turn_context(self, source: str, metadata: Mapping[str, Any] | None) -> str | None:
        """What a turn of ``source``'s sender in ``metadata`` gets there (their profile)."""
        return await self._adapters.dynamic(source, metadata, None)

    async def show(self, source: str, event: ApprovalRequired) -> None:
        """Ask ``event``'s call in chat ``source``: recorded first, then published there."""
        source = validate_source(source)
        await self._engine.store.inbox.show_in(event.tool_call_id, source)
        state = await self._sources.state(source)
        self._adapters.publish(source, state.session_id, event)

    async def close(self, source: str, tool_call_id: int, outcome: str, by: str = "") -> None:
        """The call ended without a decision in the chat (its wait ran out, its job was
        stopped): the chat's card shows ``outcome``."""
        source = validate_source(source)
        state = await self._sources.state(source)
        self._adapters.publish(source, state.session_id, DecisionMade(tool_call_id, outcome, by))

    def on_standing_grant(self, grant: StandingGrant) -> None:
        """What "🔄 Session" on such a card does (the job gets the call's tool)."""
        self._decisions.standing_grant = grant
