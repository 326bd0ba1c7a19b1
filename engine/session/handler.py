"""``ChatSessionHandler``: one session's turns, serialised by its ``processing`` lock.

The session's public surface and the composition of its collaborators, one file each:
``SessionFrames`` (frames and their transcripts), ``CompactionTrigger``, ``LevelTools``,
``SessionPrompts`` (context building), ``FrameEnvs``, ``SubAgentFrames``, ``TurnResume``
and ``TurnConclusion``; the rounds themselves are ``run_agent_turn``. Each call takes the
lock, mints a cancel scope and runs its steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from engine.agents.catalog import AgentDefinition
from engine.session.context.compaction import CompactionError, CompactionResult
from engine.session.context.compaction_trigger import CompactionTrigger
from engine.session.context.frame_envs import FrameEnvs
from engine.session.context.frames import SessionFrames
from engine.session.context.prompts import SessionPrompts
from engine.session.context.scratchpad import SessionScratchpad
from engine.session.context.subagent_frames import SubAgentFrames
from engine.session.context.toolsets import LevelTools
from engine.session.context.transcript import FrameTranscript
from engine.session.deps import HandlerDeps
from engine.session.outcomes import Cancelled, Failed, TurnResult
from engine.session.protocols import EmitFn, PendingUserInput, RecordsAnswers
from engine.session.turn.cancel import CancelScope, TurnCancelled, TurnScopes
from engine.session.turn.conclusion import TurnConclusion
from engine.session.turn.emitter import TurnEmitter
from engine.session.turn.injection import (
    NOTIFICATION_REASONING,
    READ_NOTIFICATION_TOOL,
    store_tool_result,
)
from engine.session.turn.llm_round import TurnFailed
from engine.session.turn.loop import attachments_of, run_agent_turn
from engine.session.turn.orphans import fail_orphans
from engine.session.turn.resume import TurnResume, resume_pending_tools
from engine.session.turn.tool_call import CallFlow
from engine.store.rows import FrameRow, SessionRow
from engine.tools.protocols import Tool

#: What others import from here (the names have homes of their own).
__all__ = ["ChatSessionHandler"]


class ChatSessionHandler:
    def __init__(
        self,
        session: SessionRow,
        agent: AgentDefinition,
        deps: HandlerDeps,
        *,
        scratchpad_of: int | None = None,
    ) -> None:
        """``scratchpad_of``: share another session's scratchpad (an async task its parent's)."""
        self.session = session
        self.agent = agent
        self.processing = asyncio.Lock()
        self.scratchpad = SessionScratchpad(deps.store.scratchpad, scratchpad_of or session.id)
        self._scopes = TurnScopes()
        self._history = deps.store.history
        self._frames = SessionFrames(session.id, deps.store, deps.compactor, deps.limits)
        self._compaction = CompactionTrigger(session, deps.compactor, self._frames)
        self._tools = LevelTools(session, deps.tools, deps.agents, deps.limits, deps.mcp)
        self._prompts = SessionPrompts(
            agent, deps.agents, deps.builder, self.scratchpad, self._frames.summaries
        )
        self._envs = FrameEnvs(
            session, deps, self._frames, self._tools, self.scratchpad, agent.model
        )
        # Set after both exist: the runner builds each child's env with this factory.
        self._envs.sub_agents = SubAgentFrames(
            session.id,
            deps.store,
            deps.agents,
            deps.limits.max_agent_depth,
            self._envs,
            self._frames,
            self._prompts,
        )
        self._conclusion = TurnConclusion(session, self._history, deps.bus, self._compaction)
        self._resume = TurnResume(
            session.id, deps.store, self._envs, self._prompts, self._conclusion
        )

    @property
    def preferred_model(self) -> str | None:
        """The model tried first from the next turn on (``/model``); ``None``: the default."""
        return self._envs.preferred_model

    @preferred_model.setter
    def preferred_model(self, model: str | None) -> None:
        self._envs.preferred_model = model

    @property
    def is_processing(self) -> bool:
        return self.processing.locked()

    def cancel(self) -> None:
        """Stop the in-flight turn: LLM call, tool, sub-agents, approvals and questions."""
        self._scopes.cancel()

    async def handle_message(
        self,
        text: str,
        *,
        is_synthetic: bool = False,
        metadata: dict[str, Any] | None = None,
        extra_system_static: str | None = None,
        extra_system_dynamic: str | None = None,
        tail_reminder: str | None = None,
        interface_tools: Sequence[Tool] = (),
        pending_input: PendingUserInput | None = None,
        emit: EmitFn | None = None,
        records: RecordsAnswers | None = None,
        consumes: int | None = None,
        also: Callable[[Connection], None] | None = None,
        admitted: Callable[[], Awaitable[bool]] | None = None,
        revised: Callable[[], str | None] | None = None,
    ) -> TurnResult:
        """Store ``text`` (replacing queued message ``consumes`` and running ``also``, in the
        same commit) and answer it; when ``admitted``, asked once the session is free, says
        no, the message is dropped unstored (a ``/stop`` came while it waited). ``revised``,
        asked then too: its words as the person corrected them meanwhile (an edit)."""
        async with self.processing:
            if admitted is not None and not await admitted():
                return Cancelled()
            if revised is not None:
                text = revised() or text
            scope = self._scopes.fresh()
            emitter = TurnEmitter(emit, records)
            frame = await self._frames.root()
            tools = self._tools.for_frame(frame, interface_tools)  # a clash fails before writes
            transcript = await self._turn_context(frame, scope)
            interrupted = transcript.open_tool_calls()  # left by a crash: run before the answer
            user_row = await self._history.append_message(
                frame.id,
                "user",
                text,
                is_synthetic=is_synthetic,
                metadata=metadata,
                consumes=consumes,
                also=also,
            )
            transcript.add(user_row)
            if not is_synthetic:
                emitter.user_message(user_row.id, user_row.content, attachments_of(metadata))
            env = self._envs.build(frame, transcript, tools, scope, emitter)
            parts = self._prompts.root(extra_system_static, extra_system_dynamic, tail_reminder)
            # The model's rounds are awaited here, not in a helper: each await level is
            # resumed again at every commit of the turn.
            try:
                if await resume_pending_tools(env, interrupted) is CallFlow.CANCELLED:
                    outcome: TurnResult = Cancelled()
                else:
                    requests = self._prompts.requests(parts)
                    outcome = await run_agent_turn(env, requests, pending_input)
            except TurnFailed as exc:
                outcome = Failed(str(exc), away=exc.away)
            return await self._conclusion.conclude(outcome, env, user_row, is_synthetic)

    async def resume_turn(
        self,
        *,
        extra_system_static: str | None = None,
        extra_system_dynamic: str | None = None,
        tail_reminder: str | None = None,
        interface_tools: Sequence[Tool] = (),
        emit: EmitFn | None = None,
        records: RecordsAnswers | None = None,
    ) -> TurnResult | None:
        """Continue an interrupted turn without a new user message; ``None``: nothing to do.

        Reaps interrupted parallel sub-agent batches, resumes the deepest active frame
        (open calls re-gated and re-run, then the model), and cascades each child's
        result up to its parent until the root answers.
        """
        async with self.processing:
            parts = self._prompts.root(extra_system_static, extra_system_dynamic, tail_reminder)
            return await self._resume.resume(
                TurnEmitter(emit, records), parts, interface_tools, self._scopes.fresh()
            )

    async def deliver_notifications(
        self,
        payload: str,
        *,
        interface_tools: Sequence[Tool] = (),
        emit: EmitFn | None = None,
        records: RecordsAnswers | None = None,
        also: Callable[[Connection], None] | None = None,
        on_stored: Callable[[], Awaitable[None]] | None = None,
    ) -> TurnResult | None:
        """Hand background notifications to the agent as if it had read them, then resume."""
        return await self.inject_tool_result(
            READ_NOTIFICATION_TOOL,
            payload,
            reasoning=NOTIFICATION_REASONING,
            interface_tools=interface_tools,
            emit=emit,
            records=records,
            also=also,
            on_stored=on_stored,
        )

    async def inject_tool_result(
        self,
        tool_name: str,
        payload: str,
        *,
        reasoning: str,
        interface_tools: Sequence[Tool] = (),
        emit: EmitFn | None = None,
        records: RecordsAnswers | None = None,
        also: Callable[[Connection], None] | None = None,
        on_stored: Callable[[], Awaitable[None]] | None = None,
    ) -> TurnResult | None:
        """Store a synthetic assistant message with a completed ``tool_name`` call whose
        result is ``payload`` (one commit), then resume: the agent writes the message.

        Background work reaches a conversation this way (notifications, async task
        results). Taken under the turn lock, so it never lands inside a running turn;
        ``also`` commits with it (the sender's record of the delivery: a crash can neither
        lose it nor tell it twice); ``on_stored`` runs right after the commit.
        """
        async with self.processing:
            scope = self._scopes.fresh()
            frame = await self._frames.root()
            transcript = await self._compacted(frame, await self._frames.transcript(frame), scope)
            await store_tool_result(
                self._history, frame, transcript, tool_name, payload, reasoning=reasoning, also=also
            )
            if on_stored is not None:
                await on_stored()
            parts = self._prompts.root(None, None, None)
            return await self._resume.resume(
                TurnEmitter(emit, records), parts, interface_tools, scope
            )

    async def force_compact(self) -> CompactionResult | None:
        """``/compact``: summarise now, whatever the size; ``None`` when too little to do.
        Refused while a turn runs: waiting for it blocked the chat's lane, so the answer
        to the turn's question or a ``/stop`` queued behind it (found by review)."""
        if self.processing.locked():
            raise CompactionError("a turn is running; compact when it has ended")
        async with self.processing:
            frame = await self._frames.root()
            await fail_orphans(self._history, await self._frames.transcript(frame))
            return await self._compaction.force(frame)

    async def _turn_context(self, frame: FrameRow, scope: CancelScope) -> FrameTranscript:
        """The root's transcript for a new turn: orphans out, compacted if it grew too big
        (in the turn's scope: a ``/stop`` waited for the whole summarising call until
        2026-12-06; found by review)."""
        transcript = await self._frames.transcript(frame)
        await self.scratchpad.notes()
        await fail_orphans(self._history, transcript)
        return await self._compacted(frame, transcript, scope)

    async def _compacted(
        self, frame: FrameRow, transcript: FrameTranscript, scope: CancelScope
    ) -> FrameTranscript:
        """The transcript, compacted first when it grew too big: before a new turn and
        before a notification (a chat that only receives them compacted never; until
        2026-12-06)."""
        try:
            return await scope.run(self._compaction.before_turn(frame, transcript))
        except TurnCancelled:  # stopped while summarising: nothing stored, the turn stops
            return transcript
