"""``Decisions``: the hub's one door for approvals, rejections and answers to questions."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.engine import Connection

from engine.approval.broker import BypassRequest
from engine.approval.bypass import BypassScope
from engine.approval.deciders import Decider
from engine.config import HubConfig
from engine.core import Decided, Engine
from engine.hub.adapters import AdapterRegistry
from engine.hub.placement import Placement
from engine.hub.protocols import Publish, StandingGrant
from engine.hub.turns.sources import SourceRegistry
from engine.hub.types import (
    ANSWERED,
    Choice,
    DecisionMade,
    SendOptions,
    check_text,
    validate_source,
)
from engine.store.inbox import ApprovalRecord

__all__ = ["Decisions"]


class Decisions:
    """The hub's one door for a human's decision on a gated call and for an answer to a
    question: found the chat from the call's own row (or checked against the chat it came
    from), recorded on that chat's current session; the engine refuses a call of another
    session (``InboxError`` ``other_session``) and a decider who may not decide.

    A call another session asks in this chat (a scheduled job's run: ``Visitors.show``)
    is decided here too; its run, not the chat, resumes it, and "🔄 Session" on it grants
    the job the tool (``StandingGrant``) instead of a bypass of everything."""

    __slots__ = (
        "_adapters",
        "_config",
        "_engine",
        "_placement",
        "_publish",
        "_sources",
        "standing_grant",
    )

    def __init__(
        self,
        engine: Engine,
        sources: SourceRegistry,
        adapters: AdapterRegistry,
        placement: Placement,
        publish: Publish,
        config: HubConfig,
    ) -> None:
        self._engine = engine
        self._placement = placement
        self._sources = sources
        self._adapters = adapters
        self._publish = publish
        self._config = config
        self.standing_grant: StandingGrant | None = None

    async def decide(
        self,
        tool_call_id: int,
        choice: Choice,
        *,
        decider: Decider,
        note: str,
        by: str | None,
        source: str | None,
        also: Callable[[Connection], None] | None = None,
    ) -> Decided:
        record = await self._engine.store.inbox.get(tool_call_id)
        chat = validate_source(source) if source is not None else await self._chat_of(record)
        if chat is None:  # a call in no chat now: the engine alone records it
            if choice.approved:
                return await self._engine.approve(
                    tool_call_id, choice.bypass, decider=decider, also=also
                )
            return await self._engine.reject(tool_call_id, note, decider=decider, also=also)
        state = await self._placement.current(chat)
        # Another session's call asking in this chat (a job's run), or the chat's own.
        foreign = None
        if record is not None and record.shown_in == chat and record.session_id != state.session_id:
            foreign = record.session_id
        bridge = self._adapters.bridge(chat, state.session_id)
        # One process resumes the chat's turn in place; a fleet where the chat runs; a
        # job's run, when its run is taken again.
        recorded = {
            "decider": decider,
            "session_id": state.session_id,
            "shown_in": chat,
            "emit": bridge,
            "records": bridge,
            "resume": self._placement.resumes_in_place and foreign is None,
            "also": also,
        }
        if not choice.approved:
            decided = await self._engine.reject(tool_call_id, note, **recorded)
        elif foreign is not None and _is_session_bypass(choice.bypass):
            # "🔄 Session" on a job's card: the job gets the tool, not a bypass of all. A
            # narrower scope (the API's category, an MCP server) is that bypass of the
            # run, never a lasting grant of the tool (until 2026-12-07 it was one; found
            # by review).
            decided = await self._engine.approve(tool_call_id, None, **recorded)
            if self.standing_grant is not None:
                await self.standing_grant(foreign, tool_call_id)
        else:
            decided = await self._engine.approve(tool_call_id, choice.bypass, **recorded)
        if not decided.resolution.live:  # its turn waits elsewhere, or a job's run reads it
            await self._placement.decided(chat, tool_call_id, in_chat=foreign is None)
        if by is not None:  # decided away from the chat: the chat's cards close
            made = DecisionMade(tool_call_id, choice.name, by, "" if choice.approved else note)
            self._publish(chat, state.session_id, made)
        return decided

    async def _chat_of(self, record: ApprovalRecord | None) -> str | None:
        """The chat a call (or question) is decided in: where its card shows (a job's
        run asks in its chat), else its session's chat while that session is the chat's
        current one; ``None`` for a call in no chat now (or no call at all: the engine
        says which)."""
        if record is None:
            return None
        if record.shown_in is not None:
            return record.shown_in
        session = await self._engine.store.sessions.get(record.session_id)
        if session is None:
            return None
        current = await self._sources.current_session(session.source)
        return session.source if current == session.id else None

    async def answer(
        self,
        request_id: int,
        answer: str,
        *,
        source: str | None,
        also: Callable[[Connection], None] | None = None,
        by: str | None = None,
    ) -> Decided:
        check_text(answer, SendOptions(), self._config.max_message_chars)
        if source is not None:
            chat: str | None = validate_source(source)
        else:
            chat = await self._chat_of(await self._engine.store.inbox.get(request_id))
        if chat is None:
            decided = await self._engine.resolve_question(request_id, answer, also=also)
            if by is not None:
                await self._answered_in(decided.resolution.session_id, request_id, answer, by)
            return decided
        state = await self._placement.current(chat)
        bridge = self._adapters.bridge(chat, state.session_id)
        decided = await self._engine.resolve_question(
            request_id,
            answer,
            session_id=state.session_id,
            emit=bridge,
            records=bridge,
            resume=self._placement.resumes_in_place,
            also=also,
        )
        if not decided.resolution.live:  # its turn waits elsewhere, or none
            await self._placement.decided(chat, request_id, in_chat=True)
        if by is not None:  # answered away from the chat's card: every view of it closes it
            self._publish(chat, state.session_id, DecisionMade(request_id, ANSWERED, by, answer))
        return decided

    async def _answered_in(self, session_id: int, request_id: int, answer: str, by: str) -> None:
        """A question answered away from its chat (the inbox, the API): the chat's views
        close its box while the session is still the chat's (the web chat kept it open;
        found by review)."""
        session = await self._engine.store.sessions.get(session_id)
        if session is None or await self._sources.current_session(session.source) != session_id:
            return
        self._publish(session.source, session_id, DecisionMade(request_id, ANSWERED, by, answer))


def _is_session_bypass(bypass: BypassRequest | None) -> bool:
    """The chat's "🔄 Session": everything, for as long as the session lasts."""
    return (
        bypass is not None
        and bypass.seconds is None
        and bypass.value is None
        and bypass.scope == BypassScope.ALL
    )
