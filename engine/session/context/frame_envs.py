"""Builds the ``TurnEnv`` one agent level of a session works with."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engine.session.context.frames import SessionFrames
from engine.session.context.scratchpad import SessionScratchpad
from engine.session.context.toolsets import LevelTools
from engine.session.context.transcript import FrameTranscript
from engine.session.deps import HandlerDeps
from engine.session.turn.cancel import CancelScope
from engine.session.turn.emitter import TurnEmitter
from engine.session.turn.outcome_recorder import OutcomeRecorder
from engine.session.turn.turn_env import SubAgentRunner, TurnEnv
from engine.store.rows import FrameRow, SessionRow
from engine.tools.protocols import Tool, ToolContext
from engine.tools.registry import ToolRegistry
from engine.tools.workspace import Workspace


class FrameEnvs:
    """``preferred_model`` is read at each env (the hub switches it between turns).

    ``sub_agents`` is set once after construction: the runner builds its child's env here.
    """

    __slots__ = (
        "_deps",
        "_frames",
        "_scratchpad",
        "_session",
        "_tools",
        "preferred_model",
        "sub_agents",
    )

    def __init__(
        self,
        session: SessionRow,
        deps: HandlerDeps,
        frames: SessionFrames,
        tools: LevelTools,
        scratchpad: SessionScratchpad,
        preferred_model: str | None,
    ) -> None:
        self._session = session
        self._deps = deps
        self._frames = frames
        self._tools = tools
        self._scratchpad = scratchpad
        self.preferred_model = preferred_model
        self.sub_agents: SubAgentRunner | None = None

    async def for_frame(
        self,
        frame: FrameRow,
        emitter: TurnEmitter,
        interface_tools: Sequence[Tool],
        scope: CancelScope,
    ) -> TurnEnv:
        """``frame``'s env with its stored transcript, its events at its depth."""
        tools = self._tools.for_frame(frame, interface_tools)
        transcript = await self._frames.transcript(frame)
        await self._scratchpad.notes()
        return self.build(frame, transcript, tools, scope, emitter.at_depth(frame.depth))

    def build(
        self,
        frame: FrameRow,
        transcript: FrameTranscript,
        tools: ToolRegistry,
        scope: CancelScope,
        emitter: TurnEmitter,
    ) -> TurnEnv:
        deps = self._deps
        session = self._session
        ctx = ToolContext(
            session_id=session.id,
            stack_id=frame.id,
            agent_id=frame.agent_id,
            depth=frame.depth,
            working_directory=working_directory(session, deps),
            scratchpad=self._scratchpad,
        )
        return TurnEnv(
            session=session,
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
            sub_agents=self.sub_agents,
            refresh_tools=self._tools.refresher(tools),
        )


def working_directory(session: SessionRow, deps: HandlerDeps) -> Path:
    """The directory relative paths of the session's tools start from: its RunContext's
    ``working_directory`` (workspace-relative, as the gate reads it), else the workspace."""
    return chosen_directory(session, deps.workspace) or deps.builder.working_directory


def chosen_directory(session: SessionRow | None, workspace: Workspace) -> Path | None:
    """The session's RunContext ``working_directory``, when it chose one."""
    chosen = ((session.run_context if session else None) or {}).get("working_directory")
    return workspace.root / chosen if isinstance(chosen, str) and chosen else None
