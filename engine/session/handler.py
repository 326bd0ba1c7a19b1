"""``ChatSessionHandler``: one session's turns, serialised by its ``processing`` lock."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Connection

from engine.agents.catalog import AgentCatalog, AgentDefinition
from engine.bus.chat import ChatEvent, ChatEventBus
from engine.config import EngineConfig
from engine.failpoints import failpoint
from engine.llm.registry import ModelRegistry
from engine.llm.types import Message
from engine.mcp.manager import McpManager
from engine.mcp.tools import CONFIG_GROUP, granted_groups, visible_mcp_tools
from engine.session.calls import CallFlow, handle_tool_call
from engine.session.cancel import CancelScope
from engine.session.compaction import (
    CompactionError,
    CompactionResult,
    Compactor,
    load_context,
)
from engine.session.dispatch import Completed, DispatchResult, Interrupted
from engine.session.dispatch import Failed as DispatchFailed
from engine.session.emitter import EmitFn, TurnEmitter
from engine.session.env import TurnEnv
from engine.session.events import Done
from engine.session.llm_round import TurnFailed
from engine.session.messages import MessageBuilder, SystemParts
from engine.session.outcome import OutcomeRecorder
from engine.session.outcomes import Cancelled, Exhausted, Failed, Final, TurnResult
from engine.session.protocols import ApprovalPolicy, HumanApprovals, PendingUserInput
from engine.session.scratchpad import SessionScratchpad
from engine.session.transcript import FrameTranscript
from engine.session.turn import (
    RequestBuilder,
    attachments_of,
    run_agent_turn,
)
from engine.store import Store
from engine.store.rows import (
    AssistantRecord,
    FrameRow,
    MessageRow,
    NewToolCall,
    SessionRow,
    ToolCallRow,
)
from engine.tools.base import Tool, ToolCategory, ToolContext
from engine.tools.builtins.subagents import SUBTASK_TOOL
from engine.tools.registry import ToolRegistry
from engine.tools.workspace import Workspace

log = logging.getLogger(__name__)

CANCELLED_MESSAGE = "Interrupted by user."
#: Tools every agent keeps whatever its ``tools`` list says (they are how levels talk).
PER_LEVEL_TOOLS = frozenset({"ask_user_clarification", SUBTASK_TOOL, "activate_tools"})
READ_NOTIFICATION_TOOL = "read_notification"
NOTIFICATION_REASONING = (
    "The system signaled pending notifications. Let me read them and surface anything "
    "relevant to the user."
)
#: What a background caller (cron, an async task) records for a turn ended by /stop.
CANCELLED_ERROR = "Turn cancelled by user"
REAPED_NOTE = (
    "this sub-agent was interrupted by a restart while it ran in parallel with "
    "others; its work was lost. Run it again if it is still needed."
)


@dataclass(frozen=True, slots=True)
class HandlerDeps:
    """What every handler of a process shares."""

    store: Store
    models: ModelRegistry
    tools: ToolRegistry
    policy: ApprovalPolicy
    approvals: HumanApprovals
    workspace: Workspace
    agents: AgentCatalog
    bus: ChatEventBus
    limits: EngineConfig
    builder: MessageBuilder
    compactor: Compactor
    mcp: McpManager | None = None


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
        self._deps = deps
        self.processing = asyncio.Lock()
        self._scope = CancelScope()
        self._transcripts: dict[int, FrameTranscript] = {}
        self._root: FrameRow | None = None
        self.scratchpad = SessionScratchpad(deps.store.scratchpad, scratchpad_of or session.id)
        self.preferred_model: str | None = agent.model
        # Compaction: the last root answer's input tokens, the frames' summaries.
        self._last_input_tokens: int | None = None
        self._summaries: dict[int, str | None] = {}

    @property
    def is_processing(self) -> bool:
        return self.processing.locked()

    def cancel(self) -> None:
        """Stop the in-flight turn: LLM call, tool, sub-agents, approvals and questions."""
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
        consumes: int | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> TurnResult:
        """Store ``text`` (replacing queued message ``consumes`` and running ``also``, in the
        same commit) and answer it."""
        async with self.processing:
            scope = self._scope = CancelScope()
            emitter = TurnEmitter(emit)
            frame = await self._root_frame()
            tools = self._tools_for(frame, interface_tools)  # a name clash fails before any write
            transcript = await self._transcript(frame)
            await self.scratchpad.notes()
            await self._fail_orphans(transcript)
            transcript = await self._maybe_compact(frame, transcript)
            interrupted = transcript.open_tool_calls()
            user_row = await self._deps.store.history.append_message(
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
                emitter.user_message(user_row.id, text, attachments_of(metadata))
            env = self._env(frame, transcript, tools, scope, emitter)
            parts = self._system_parts(extra_system_static, extra_system_dynamic, tail_reminder)
            try:
                if await resume_pending_tools(env, interrupted) is CallFlow.CANCELLED:
                    outcome: TurnResult = Cancelled()
                else:
                    outcome = await run_agent_turn(env, self._request_builder(parts), pending_input)
            except TurnFailed as exc:
                outcome = Failed(str(exc))
            return await self._conclude(outcome, env, user_row, is_synthetic)

    async def resume_turn(
        self,
        *,
        extra_system_static: str | None = None,
        extra_system_dynamic: str | None = None,
        tail_reminder: str | None = None,
        interface_tools: Sequence[Tool] = (),
        emit: EmitFn | None = None,
    ) -> TurnResult | None:
        """Continue an interrupted turn without a new user message; ``None``: nothing to do.

        Reaps interrupted parallel sub-agent batches, resumes the deepest active frame
        (open calls re-gated and re-run, then the model), and cascades each child's
        result up to its parent until the root answers.
        """
        async with self.processing:
            parts = self._system_parts(extra_system_static, extra_system_dynamic, tail_reminder)
            return await self._resume_locked(TurnEmitter(emit), parts, interface_tools)

    async def deliver_notifications(
        self,
        payload: str,
        *,
        interface_tools: Sequence[Tool] = (),
        emit: EmitFn | None = None,
        on_stored: Callable[[], Awaitable[None]] | None = None,
    ) -> TurnResult | None:
        """Hand background notifications to the agent as if it had read them, then resume."""
        return await self.inject_tool_result(
            READ_NOTIFICATION_TOOL,
            payload,
            reasoning=NOTIFICATION_REASONING,
            interface_tools=interface_tools,
            emit=emit,
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
        on_stored: Callable[[], Awaitable[None]] | None = None,
    ) -> TurnResult | None:
        """Store a synthetic assistant message with a completed ``tool_name`` call whose
        result is ``payload`` (one commit), then resume: the agent writes the message.

        Background work reaches a conversation this way (notifications, async task
        results). Taken under the turn lock, so it never lands inside a running turn;
        ``on_stored`` runs right after the commit (to record the delivery).
        """
        async with self.processing:
            frame = await self._root_frame()
            transcript = await self._transcript(frame)
            call = NewToolCall(
                f"{tool_name}_{uuid.uuid4().hex[:12]}",
                tool_name,
                "{}",
                status="done",
                result=payload,
            )
            record = AssistantRecord(content="", reasoning_content=reasoning, is_synthetic=True)
            row = await self._deps.store.history.append_assistant(frame.id, record, [call])
            transcript.add(row)
            if on_stored is not None:
                await on_stored()
            parts = self._system_parts(None, None, None)
            return await self._resume_locked(TurnEmitter(emit), parts, interface_tools)

    async def _resume_locked(
        self, emitter: TurnEmitter, root_parts: SystemParts, interface_tools: Sequence[Tool]
    ) -> TurnResult | None:
        self._scope = CancelScope()
        frames = await self._reap_parallel_batches(emitter)
        if not frames:
            return None
        frame = frames[-1]
        env = await self._frame_env(frame, emitter, interface_tools)
        try:
            outcome = await self._continue_frame(env, root_parts, seed=True)
            while outcome is not None and frame.parent_tool_call_id is not None:
                parent = frames[frames.index(frame) - 1]
                parent_env = await self._frame_env(parent, emitter, interface_tools)
                flow = await self._propagate(parent_env, frame, outcome)
                frame, env = parent, parent_env
                if flow is CallFlow.CANCELLED:
                    outcome = Cancelled()
                    break
                outcome = await self._continue_frame(env, root_parts, seed=False)
        except TurnFailed as exc:
            outcome = Failed(str(exc))
        if outcome is None:
            return None
        return await self._conclude(outcome, env, None, False)

    async def _continue_frame(
        self, env: TurnEnv, root_parts: SystemParts, *, seed: bool
    ) -> TurnResult | None:
        """Finish ``env.frame``'s turn: open calls, then the model unless it already answered."""
        open_calls = env.transcript.open_tool_calls()
        if await resume_pending_tools(env, open_calls) is CallFlow.CANCELLED:
            return Cancelled()
        last = env.transcript.last_row()
        if last is None:
            return None
        if seed and not open_calls and last.role == "assistant" and not last.tool_calls:
            if env.frame.depth == 0:
                return None  # the root already answered: nothing was interrupted
            # A child answered but the answer never reached its parent: no new model call.
            return Final(last.content, last.id, last.input_tokens, last.output_tokens, False, ())
        parts = root_parts if env.frame.depth == 0 else self._child_parts(env.frame)
        return await run_agent_turn(env, self._request_builder(parts), None)

    async def _propagate(
        self, parent_env: TurnEnv, child: FrameRow, outcome: TurnResult
    ) -> CallFlow:
        """Record a child frame's outcome as its parent's tool result; end the child frame."""
        call = _find_open_call(parent_env.transcript, child.parent_tool_call_id)
        if call is None:
            call = await self._deps.store.history.get_tool_call(child.parent_tool_call_id or 0)
        flow = CallFlow.CONTINUE
        if call is not None and call.status in ("running", "pending"):
            match outcome:
                case Final(content):
                    await parent_env.recorder.completed(call, content)
                case Exhausted(rounds):
                    await parent_env.recorder.failed(
                        call, f"sub-agent stopped after {rounds} tool rounds without an answer"
                    )
                case Failed(message):
                    await parent_env.recorder.failed(call, f"sub-agent failed: {message}")
                case _:
                    await parent_env.recorder.cancelled(call)
                    flow = CallFlow.CANCELLED
        elif isinstance(outcome, Cancelled):
            flow = CallFlow.CANCELLED
        await self._deps.store.sessions.terminate_frame(child.id)
        return flow

    async def _reap_parallel_batches(self, emitter: TurnEmitter) -> list[FrameRow]:
        """Two active frames at one depth are an interrupted parallel batch: fail and end them.

        The linear cascade needs one active frame per depth. Every frame from the batch's
        depth down is ended and the spawning calls fail, so the parent, left with fully
        resolved calls, is resumed by the normal cascade.
        """
        sessions = self._deps.store.sessions
        frames = await sessions.active_frames(self.session.id)
        depths = [f.depth for f in frames]
        batch_depth = min((d for d in depths if depths.count(d) > 1), default=None)
        if batch_depth is None:
            return frames
        kept = [f for f in frames if f.depth < batch_depth]
        parent = kept[-1]
        parent_env = await self._frame_env(parent, emitter, ())
        for frame in frames[len(kept) :]:
            call = _find_open_call(parent_env.transcript, frame.parent_tool_call_id)
            if call is not None:
                await parent_env.recorder.failed(call, REAPED_NOTE)
            await sessions.terminate_frame(frame.id)
        return kept

    async def _conclude(
        self, outcome: TurnResult, env: TurnEnv, user_row: MessageRow | None, is_synthetic: bool
    ) -> TurnResult:
        match outcome:
            case Final():
                if env.frame.depth == 0:
                    self._last_input_tokens = outcome.input_tokens
                env.emitter.done(_done_event(outcome))
                self._publish(env.frame, user_row, outcome, is_synthetic)
            case Cancelled():
                await self._fail_orphans(env.transcript)  # /stop: the message is not resumed
                env.emitter.error(CANCELLED_MESSAGE)
            case Failed(message):
                await self._fail_turn(env, message)  # the notice commits with the failed mark
                env.emitter.error(message)
            case Exhausted(rounds):
                notice = (
                    f"Stopped after {rounds} tool rounds without a final answer. "
                    "Send a message to continue."
                )
                await self._fail_turn(env, notice)  # ended, told once: never resumed
                env.emitter.error(notice)
        return outcome

    def _publish(
        self, frame: FrameRow, user_row: MessageRow | None, final: Final, is_synthetic: bool
    ) -> None:
        """Only a root Final publishes (a resume has no new user row); rows are committed."""
        s = self.session
        now = datetime.now(UTC)
        common = {
            "session_id": s.id,
            "stack_id": frame.id,
            "is_interactive": s.is_interactive,
            "is_ephemeral": s.is_ephemeral,
        }
        if user_row is not None:
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
            deps = self._deps
            limits = deps.limits
            transcript = FrameTranscript(
                max_messages=limits.max_history_messages,
                max_tool_result_chars=limits.max_tool_result_chars,
            )
            if deps.compactor.config.enabled:  # the newest summary, then only newer rows
                summary, rows = await load_context(
                    deps.store.history,
                    deps.compactor.summaries,
                    frame.id,
                    limit=limits.max_history_messages,
                )
                self._summaries[frame.id] = summary.content if summary else None
            else:  # compaction off: max_history_messages bounds the history
                rows = await deps.store.history.load(frame.id, limit=limits.max_history_messages)
            transcript.load(rows)
            self._transcripts[frame.id] = transcript
        return transcript

    async def _maybe_compact(self, frame: FrameRow, transcript: FrameTranscript) -> FrameTranscript:
        """At the start of a turn: compact when the last answer's context was too big."""
        if frame.depth != 0 or not self._deps.compactor.applies_to(self.session, frame):
            return transcript
        try:
            done = await self._deps.compactor.compact(
                self.session, frame, last_input_tokens=self._last_input_tokens
            )
        except CompactionError as exc:
            log.warning("compaction skipped for session %s: %s", self.session.id, exc)
            return transcript
        if done is None:
            return transcript
        self._transcripts.pop(frame.id, None)
        self._last_input_tokens = None  # stale now; the estimate takes over
        return await self._transcript(frame)

    async def force_compact(self) -> CompactionResult | None:
        """``/compact``: summarise now, whatever the size; ``None`` when too little to do."""
        async with self.processing:
            frame = await self._root_frame()
            await self._fail_orphans(await self._transcript(frame))
            result = await self._deps.compactor.compact(self.session, frame, force=True)
            if result is not None:
                self._transcripts.pop(frame.id, None)
                self._last_input_tokens = None
            return result

    async def _fail_orphans(self, transcript: FrameTranscript) -> None:
        """User/agent rows nobody answered (a /stop, a failure the user saw) leave the context."""
        for row in _drop_unanswered(transcript):
            await self._deps.store.history.mark_failed(row.id)

    async def _fail_turn(self, env: TurnEnv, notice: str) -> None:
        """A failure the user is told about: its unanswered rows are marked ``failed`` in the
        commit that records the caller's delivery of ``notice`` (the emitter's
        ``failure_unit``), so a crash neither resumes the turn nor loses or repeats the notice.
        """
        unit = env.emitter.failure_unit(notice)
        await self._deps.store.history.fail_unanswered(env.frame.id, also=unit)
        failpoint("after_failed_turn")
        _drop_unanswered(env.transcript)  # marked in the database just above

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
            approvals=deps.approvals,
            workspace=deps.workspace,
            emitter=emitter,
            scope=scope,
            recorder=OutcomeRecorder(deps.store.history, transcript, emitter),
            models=deps.models.candidates(self.preferred_model),
            limits=deps.limits,
            sub_agents=self,
            refresh_tools=self._tool_groups(tools) if self._uses_tool_groups() else None,
        )

    async def _frame_env(
        self, frame: FrameRow, emitter: TurnEmitter, interface_tools: Sequence[Tool]
    ) -> TurnEnv:
        tools = self._tools_for(frame, interface_tools if frame.depth == 0 else ())
        transcript = await self._transcript(frame)
        await self.scratchpad.notes()
        return self._env(frame, transcript, tools, self._scope, emitter.at_depth(frame.depth))

    def _child_parts(self, frame: FrameRow) -> SystemParts:
        agent = self._deps.agents.get(frame.agent_id) or self.agent
        return SystemParts(static=agent.prompt, dynamic_extra=None, reminder=None)

    def _tools_for(self, frame: FrameRow, interface_tools: Sequence[Tool]) -> ToolRegistry:
        """The tools of one agent level; a name is never offered twice.

        Visibility flags decide most (root-only, sub-agents-only, interactive-only). The
        per-level ones are decided here: ``execute_subtask`` for sub-agents below the depth
        limit and for background roots (conversations use ``execute_task``), and a task
        agent's ``tools`` list keeps only those (plus the per-level ones).
        """
        deps = self._deps
        tools = deps.tools.for_agent(depth=frame.depth, is_interactive=self.session.is_interactive)
        can_spawn = frame.depth + 1 <= deps.limits.max_agent_depth and (
            frame.depth > 0 or not self.session.is_interactive
        )
        if not can_spawn:
            tools = tools.without([SUBTASK_TOOL])
        agent = deps.agents.get(frame.agent_id) if frame.depth > 0 else None
        if agent is not None and agent.tools is not None:
            keep = {*agent.tools, *PER_LEVEL_TOOLS}
            tools = tools.filtered(lambda tool: tool.name in keep)
        for tool in interface_tools:
            tools.register(tool)  # a clash raises ValueError: one name is never sent twice
        return tools

    def _uses_tool_groups(self) -> bool:
        mcp = self._deps.mcp
        return mcp is not None and bool(mcp.server_names or self._config_tools())

    def _config_tools(self) -> list[Tool]:
        return [t for t in self._deps.tools if t.category is ToolCategory.CONFIG]

    def _tool_groups(self, base: ToolRegistry) -> Callable[[TurnEnv], Awaitable[None]]:
        """Each round: the level's tools plus the granted groups (MCP servers, ``config``)."""
        mcp = self._deps.mcp
        assert mcp is not None

        async def refresh(env: TurnEnv) -> None:
            frame = env.frame
            groups = await granted_groups(mcp, self.session.id, frame.id, frame.depth)
            tools = (
                base
                if CONFIG_GROUP in groups
                else base.filtered(lambda t: t.category is not ToolCategory.CONFIG)
            )
            extra = await visible_mcp_tools(mcp, self.session.id, frame.id, frame.depth)
            if extra:
                names = set(tools.names)
                tools = ToolRegistry([*tools, *(t for t in extra if t.name not in names)])
            if tools.names != env.tools.names:
                env.tools, env.tool_schemas = tools, tools.schemas()

        return refresh

    async def run_sub_agent(
        self, env: TurnEnv, call: ToolCallRow, agent_id: str, prompt: str
    ) -> DispatchResult:
        """Run a task agent on ``prompt`` one frame deeper, inline (same lock and scope)."""
        deps = self._deps
        agent = deps.agents.get(agent_id)
        depth = env.frame.depth + 1
        task_agents = ", ".join(a.id for a in deps.agents.task_agents()) or "none"
        if agent is None:
            return DispatchFailed(f"unknown agent {agent_id!r}; task agents: {task_agents}")
        if agent.kind != "task":
            return DispatchFailed(
                f"{agent_id!r} is a {agent.kind} agent, not a task agent; use one of: {task_agents}"
            )
        if agent_id == env.frame.agent_id:
            return DispatchFailed(f"agent {agent_id!r} cannot hand a task to itself")
        if depth > deps.limits.max_agent_depth:
            return DispatchFailed(
                f"sub-agents may nest {deps.limits.max_agent_depth} levels deep; this would be "
                f"level {depth}. Do the task yourself."
            )
        if not prompt.strip():
            return DispatchFailed("the task prompt is empty")
        child = await deps.store.sessions.push_frame(
            self.session.id,
            agent_id=agent_id,
            depth=depth,
            parent_tool_call_id=call.id,
            agent_prompt=prompt,
        )
        await deps.store.history.append_message(child.id, "agent", prompt)
        child_env = await self._frame_env(child, env.emitter, ())
        child_env.emitter.agent_start(agent_id, prompt, depth)
        try:
            outcome: TurnResult = await run_agent_turn(
                child_env, self._request_builder(self._child_parts(child)), None
            )
        except TurnFailed as exc:
            outcome = Failed(str(exc))
        await deps.store.sessions.terminate_frame(child.id)
        self._transcripts.pop(child.id, None)
        match outcome:
            case Final(content=content):
                child_env.emitter.agent_end(agent_id, "done", depth)
                return Completed(content)
            case Cancelled():
                child_env.emitter.agent_end(agent_id, "cancelled", depth)
                return Interrupted()
            case Exhausted(rounds):
                child_env.emitter.agent_end(agent_id, "failed", depth)
                return DispatchFailed(
                    f"sub-agent {agent_id} stopped after {rounds} tool rounds without an answer"
                )
            case Failed(message):
                child_env.emitter.agent_end(agent_id, "failed", depth)
                return DispatchFailed(f"sub-agent {agent_id} failed: {message}")
        return DispatchFailed(f"sub-agent {agent_id} ended without an answer")

    def _system_parts(
        self, static: str | None, dynamic: str | None, reminder: str | None
    ) -> SystemParts:
        prompt = self.agent.prompt if not static else f"{self.agent.prompt}\n\n{static}"
        return SystemParts(static=prompt, dynamic_extra=dynamic, reminder=reminder)

    def _request_builder(self, parts: SystemParts) -> RequestBuilder:
        builder = self._deps.builder
        notes = self.scratchpad
        summaries = self._summaries

        def build(env: TurnEnv, cache_hints: bool) -> list[Message]:
            return builder.build(
                parts,
                env.transcript,
                scratchpad=notes.cached(),
                cache_hints=cache_hints,
                summary=summaries.get(env.frame.id),
            )

        return build


async def resume_pending_tools(env: TurnEnv, calls: Sequence[ToolCallRow]) -> CallFlow:
    """Re-gate and re-run calls a crash left ``running``/``pending`` (re-run from intent).

    Each row is re-read first: a question answered while no turn waited was completed
    in the database behind this handler's transcript, and must not be asked again. A
    call that had been launched (not safe to repeat, and started) is not run again: the
    model is told it was interrupted and may or may not have had its effect.
    """
    for call in calls:
        stored = await env.store.history.get_tool_call(call.id)
        if stored is not None and stored.status != call.status:
            call.status, call.result = stored.status, stored.result
            env.transcript.tool_call_changed(call)
        if call.status not in ("running", "pending"):
            continue
        if env.scope.cancelled:
            return CallFlow.CANCELLED
        if stored is not None and stored.launched_at is not None:
            await env.recorder.interrupted(call)
            continue
        if await handle_tool_call(env, call, None) is CallFlow.CANCELLED:
            return CallFlow.CANCELLED
    return CallFlow.CONTINUE


def _drop_unanswered(transcript: FrameTranscript) -> list[MessageRow]:
    """Take the trailing user/agent rows nobody answered out of the transcript, as failed."""
    dropped = []
    while (last := transcript.last_row()) is not None and last.role != "assistant":
        last.status = "failed"
        transcript.drop_last(last.id)
        dropped.append(last)
    return dropped


def _find_open_call(transcript: FrameTranscript, call_id: int | None) -> ToolCallRow | None:
    return next((c for c in transcript.open_tool_calls() if c.id == call_id), None)


def background_error(result: TurnResult | None) -> str | None:
    """The error a background caller records for a turn that did not answer."""
    match result:
        case Cancelled():
            return CANCELLED_ERROR
        case Exhausted(rounds):
            return f"Stopped after {rounds} tool rounds without a final answer"
        case Failed(message):
            return message
    return None


def _done_event(final: Final) -> Done:
    return Done(
        content=final.content,
        message_id=final.message_id,
        input_tokens=final.input_tokens,
        output_tokens=final.output_tokens,
        truncated=final.truncated,
        tool_calls=final.tool_calls,
    )
