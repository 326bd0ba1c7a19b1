"""``Decisions``: approvals, rejections and answers to questions, for a source's own calls."""

from __future__ import annotations

from engine.approval.broker import SHORT_BYPASS_SECONDS, BypassRequest
from engine.approval.deciders import Decider
from engine.config import HubConfig
from engine.core import Decided, Engine
from engine.hub.adapters import AdapterRegistry
from engine.hub.fleet import FleetWork
from engine.hub.protocols import Publish, StandingGrant
from engine.hub.sources import SourceRegistry
from engine.hub.types import DecisionMade, SendOptions, check_text

__all__ = ["Decisions", "decision_outcome"]


def decision_outcome(bypass_secs: float | None, bypass_scope: str | None) -> str:
    """How an approval is named to the cards that close on it (``DecisionMade.outcome``)."""
    if bypass_scope is not None and bypass_secs is None:
        return "bypass_session"
    if bypass_secs == SHORT_BYPASS_SECONDS:
        return "bypass_15m"
    return "approve"


class Decisions:
    """Records a human decision on the source's current session; the engine refuses a call
    of another session (``InboxError`` ``other_session``) and a decider who may not decide.

    A call another session asks in this chat (a scheduled job's run: ``Visitors.show``)
    is decided here too; its run, not the chat, resumes it, and "🔄 Session" on it grants
    the job the tool (``StandingGrant``) instead of a bypass of everything."""

    __slots__ = (
        "_adapters",
        "_config",
        "_engine",
        "_fleet",
        "_publish",
        "_sources",
        "standing_grant",
    )

    def __init__(
        self,
        engine: Engine,
        sources: SourceRegistry,
        adapters: AdapterRegistry,
        publish: Publish,
        config: HubConfig,
    ) -> None:
        self._engine = engine
        self._sources = sources
        self._adapters = adapters
        self._publish = publish
        self._config = config
        self._fleet: FleetWork | None = None
        self.standing_grant: StandingGrant | None = None

    def join_fleet(self, fleet: FleetWork) -> None:
        """A decision whose turn is not live here resumes where its source is owned."""
        self._fleet = fleet

    async def approve(
        self,
        source: str,
        tool_call_id: int,
        *,
        bypass_secs: float | None,
        bypass_scope: str | None,
        bypass_value: str | None,
        decider: Decider,
        by: str | None,
    ) -> Decided:
        state = await self._sources.state(source)
        foreign = await self._asked_here_for(source, state.session_id, tool_call_id)
        bypass = None
        if bypass_scope is not None or bypass_secs is not None:
            bypass = BypassRequest(bypass_scope or "all", bypass_value, bypass_secs)
        standing = foreign is not None and bypass is not None and bypass_secs is None
        decided = await self._engine.approve(
            tool_call_id,
            None if standing else bypass,
            decider=decider,
            session_id=state.session_id,
            shown_in=source,
            emit=self._adapters.bridge(source, state.session_id),
            resume=self._fleet is None and foreign is None,
        )
        if standing and foreign is not None and self.standing_grant is not None:
            await self.standing_grant(foreign, tool_call_id)
        await self._hand_over(source, tool_call_id, decided, foreign)
        if by is not None:  # decided away from the chat: the source's cards close
            outcome = decision_outcome(bypass_secs, bypass_scope)
            self._publish(source, state.session_id, DecisionMade(tool_call_id, outcome, by))
        return decided

    async def reject(
        self, source: str, tool_call_id: int, note: str, *, decider: Decider, by: str | None
    ) -> Decided:
        state = await self._sources.state(source)
        foreign = await self._asked_here_for(source, state.session_id, tool_call_id)
        decided = await self._engine.reject(
            tool_call_id,
            note,
            decider=decider,
            session_id=state.session_id,
            shown_in=source,
            emit=self._adapters.bridge(source, state.session_id),
            resume=self._fleet is None and foreign is None,
        )
        await self._hand_over(source, tool_call_id, decided, foreign)
        if by is not None:
            self._publish(source, state.session_id, DecisionMade(tool_call_id, "reject", by, note))
        return decided

    async def _asked_here_for(self, source: str, session_id: int, tool_call_id: int) -> int | None:
        """The other session whose call asks in ``source`` (``None``: the chat's own call)."""
        record = await self._engine.store.inbox.get(tool_call_id)
        if record is None or record.shown_in != source or record.session_id == session_id:
            return None
        return record.session_id

    async def _hand_over(
        self, source: str, tool_call_id: int, decided: Decided, foreign: int | None
    ) -> None:
        """A decision no turn here waited for reaches the process whose turn waits (a fleet),
        or is read when that turn resumes (a job's run: when its run is taken again)."""
        if self._fleet is None or decided.resolution.live:
            return
        if foreign is not None:
            await self._fleet.decided_anywhere(source, tool_call_id)
        else:
            await self._fleet.decided(source, tool_call_id)

    async def resolve_question(self, source: str, request_id: int, answer: str) -> Decided:
        state = await self._sources.state(source)
        check_text(answer, SendOptions(), self._config.max_message_chars)
        decided = await self._engine.resolve_question(
            request_id,
            answer,
            session_id=state.session_id,
            emit=self._adapters.bridge(source, state.session_id),
            resume=self._fleet is None,
        )
        if self._fleet is not None and not decided.resolution.live:
            await self._fleet.decided(source, request_id)  # its turn waits elsewhere, or none
        return decided
