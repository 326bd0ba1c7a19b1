"""``ChatSessionHandler``: one session's turns, serialised by its ``processing`` lock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engine.agents.catalog import AgentDefinition
from engine.bus.chat import ChatEvent, ChatEventBus
from engine.config import EngineConfig
from engine.llm.registry import ModelRegistry
from engine.llm.types import Message
from engine.session.calls import CallFlow, handle_tool_call
from engine.session.cancel import CancelScope
from engine.session.emitter import EmitFn, TurnEmitter
from engine.session.env import TurnEnv
from engine.session.events import Done
from engine.session.gate import ApprovalPolicy
from engine.session.llm_round import TurnFailed
from engine.session.messages import MessageBuilder, SystemParts
from engine.session.outcome import OutcomeRecorder
from engine.session.outcomes import Cancelled, Exhausted, Failed, Final, TurnResult
from engine.session.scratchpad import SessionScratchpad
from engine.session.transcript import FrameTranscript
from engine.session.turn import (
    PendingUserInput,
    RequestBuilder,
    attachments_of,
    run_agent_turn,
)
from engine.store import Store
from engine.store.rows import FrameRow, MessageRow, SessionRow, ToolCallRow
from engine.tools.base import Tool, ToolContext
from engine.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

CANCELLED_MESSAGE = "Interrupted by user."


@dataclass(frozen=True, slots=True)
class HandlerDeps:
    """What every handler of a process shares."""

    store: Store
    models: ModelRegistry
    tools: ToolRegistry
    policy: ApprovalPolicy
    bus: ChatEventBus
    limits: EngineConfig
    builder: MessageBuilder


class ChatSessionHandler:
    def __init__(self, session: SessionRow, agent: AgentDefinition, deps: HandlerDeps) -> None:
        self.session = session
        self.agent = agent
        self._deps = deps
        self.processing = asyncio.Lock()
        self._scope = CancelScope()
        self._transcripts: dict[int, FrameTranscript] = {}
        self._root: FrameRow | None = None
        self.scratchpad = SessionScratchpad(deps.store.scratchpad, session.id)
        self.preferred_model: str | None = agent.model

    @property
    def is_processing(self) -> bool:
        return self.processing.locked()

    def cancel(self) -> None:
        """Stop the in-flight turn (LLM call, tool, sub-agents) at once."""
        self._scope.cancel()

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
    ) -> TurnResult:
        async with self.processing:
            scope = self._scope = CancelScope()
            emitter = TurnEmitter(emit)
            frame = await self._root_frame()
            tools = self._tools_for(frame, interface_tools)  # a name clash fails before any write
            transcript = await self._transcript(frame)
            await self.scratchpad.notes()
            await self._fail_orphans(transcript)
            interrupted = transcript.open_tool_calls()
            user_row = await self._deps.store.history.append_message(
                frame.id, "user", text, is_synthetic=is_synthetic, metadata=metadata
            )
            transcript.add(user_row)
            if not is_synthetic:
                emitter.user_message(user_row.id, text, attachments_of(metadata))
            env = self._env(frame, transcript, tools, scope, emitter)
            parts = self._system_parts(extra_system_static, extra_system_dynamic, tail_reminder)
            try:
                if await resume_pending_tools(env, interrupted) is CallFlow.CANCELLED:
                    return self._conclude(Cancelled(), env, user_row, is_synthetic)
                outcome = await run_agent_turn(env, self._request_builder(parts), pending_input)
            except TurnFailed as exc:
                emitter.error(str(exc))
                return Failed(str(exc))
            return self._conclude(outcome, env, user_row, is_synthetic)

    def _conclude(
        self, outcome: Any, env: TurnEnv, user_row: MessageRow, is_synthetic: bool
    ) -> TurnResult:
        match outcome:
            case Final():
                env.emitter.done(_done_event(outcome))
                self._publish(env.frame, user_row, outcome, is_synthetic)
            case Cancelled():
                env.emitter.error(CANCELLED_MESSAGE)
            case Exhausted(rounds):
                env.emitter.error(
                    f"Stopped after {rounds} tool rounds without a final answer. "
                    "Send a message to continue."
                )
        return outcome

    def _publish(
        self, frame: FrameRow, user_row: MessageRow, final: Final, is_synthetic: bool
    ) -> None:
        """Only a root Final publishes; the rows are committed by now."""
        s = self.session
        now = datetime.now(UTC)
        common = {
            "session_id": s.id,
            "stack_id": frame.id,
            "is_interactive": s.is_interactive,
            "is_ephemeral": s.is_ephemeral,
        }
        self._deps.bus.user_message(
            ChatEvent(
                message_id=user_row.id,
                role="user",
                content=user_row.content,
                is_synthetic=is_synthetic,
                created_at=now,
                **common,
            )
        )
        self._deps.bus.assistant_response(
            ChatEvent(
                message_id=final.message_id,
                role="assistant",
                content=final.content,
                is_synthetic=False,
                tool_calls=final.tool_calls,
                created_at=now,
                **common,
            )
        )

    async def _root_frame(self) -> FrameRow:
        if self._root is None:
            self._root = await self._deps.store.sessions.root_frame(self.session.id)
        return self._root

    async def _transcript(self, frame: FrameRow) -> FrameTranscript:
        transcript = self._transcripts.get(frame.id)
        if transcript is None:
            limits = self._deps.limits
            transcript = FrameTranscript(
                max_messages=limits.max_history_messages,
                max_tool_result_chars=limits.max_tool_result_chars,
            )
            rows = await self._deps.store.history.load(frame.id, limit=limits.max_history_messages)
            transcript.load(rows)
            self._transcripts[frame.id] = transcript
        return transcript

    async def _fail_orphans(self, transcript: FrameTranscript) -> None:
        """User/agent rows nobody answered (a /stop, a failure the user saw) leave the context."""
        while (last := transcript.last_row()) is not None and last.role != "assistant":
            await self._deps.store.history.mark_failed(last.id)
            last.status = "failed"
            transcript.drop_last(last.id)

    def _env(
        self,
        frame: FrameRow,
        transcript: FrameTranscript,
        tools: ToolRegistry,
        scope: CancelScope,
        emitter: TurnEmitter,
    ) -> TurnEnv:
        deps = self._deps
        ctx = ToolContext(
            session_id=self.session.id,
            stack_id=frame.id,
            agent_id=frame.agent_id,
            depth=frame.depth,
            working_directory=deps.builder.working_directory,
            scratchpad=self.scratchpad,
        )
        return TurnEnv(
            session=self.session,
            frame=frame,
            store=deps.store,
            transcript=transcript,
            tools=tools,
            tool_schemas=tools.schemas(),
            tool_ctx=ctx,
            policy=deps.policy,
            emitter=emitter,
            scope=scope,
            recorder=OutcomeRecorder(deps.store.history, transcript, emitter),
            models=deps.models.candidates(self.preferred_model),
            limits=deps.limits,
        )

    def _tools_for(self, frame: FrameRow, interface_tools: Sequence[Tool]) -> ToolRegistry:
        tools = self._deps.tools.for_agent(
            depth=frame.depth, is_interactive=self.session.is_interactive
        )
        for tool in interface_tools:
            tools.register(tool)  # a clash raises ValueError: one name is never sent twice
        return tools

    def _system_parts(
        self, static: str | None, dynamic: str | None, reminder: str | None
    ) -> SystemParts:
        prompt = self.agent.prompt if not static else f"{self.agent.prompt}\n\n{static}"
        return SystemParts(static=prompt, dynamic_extra=dynamic, reminder=reminder)

    def _request_builder(self, parts: SystemParts) -> RequestBuilder:
        builder = self._deps.builder
        notes = self.scratchpad

        def build(env: TurnEnv, cache_hints: bool) -> list[Message]:
            return builder.build(
                parts,
                env.transcript,
                scratchpad=notes.cached(),
                cache_hints=cache_hints,
            )

        return build


async def resume_pending_tools(env: TurnEnv, calls: Sequence[ToolCallRow]) -> CallFlow:
    """Re-gate and re-run calls a crash left ``running``/``pending`` (re-run from intent)."""
    for call in calls:
        if env.scope.cancelled:
            return CallFlow.CANCELLED
        if await handle_tool_call(env, call, None) is CallFlow.CANCELLED:
            return CallFlow.CANCELLED
    return CallFlow.CONTINUE


def _done_event(final: Final) -> Done:
    return Done(
        content=final.content,
        message_id=final.message_id,
        input_tokens=final.input_tokens,
        output_tokens=final.output_tokens,
        truncated=final.truncated,
        tool_calls=final.tool_calls,
    )
