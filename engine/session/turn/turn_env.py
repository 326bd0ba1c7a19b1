"""Everything one agent level of a turn works with, passed explicitly to collaborators."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from engine.config import EngineConfig
from engine.llm.protocols import ChatModel
from engine.llm.types import ToolSchema
from engine.session.context.transcript import FrameTranscript
from engine.session.protocols import ApprovalPolicy, HumanApprovals
from engine.session.turn.cancel import CancelScope
from engine.session.turn.dispatch import DispatchResult
from engine.session.turn.emitter import TurnEmitter
from engine.session.turn.outcome_recorder import OutcomeRecorder
from engine.store import Store
from engine.store.rows import FrameRow, SessionRow, ToolCallRow
from engine.tools.protocols import ToolContext
from engine.tools.registry import ToolRegistry
from engine.tools.workspace import Workspace


class SubAgentRunner(Protocol):
    """Runs a sub-agent call one frame deeper (``subframes.SubAgentFrames`` implements it).

    The one Protocol of this package kept out of ``protocols.py``: it is no seam another
    package plugs into, only how the per-call code reaches the child frames without
    importing them (they import the per-call code).
    """

    async def run_sub_agent(
        self, env: TurnEnv, call: ToolCallRow, agent_id: str, prompt: str
    ) -> DispatchResult: ...


@dataclass(slots=True)
class TurnEnv:
    session: SessionRow
    frame: FrameRow
    store: Store
    transcript: FrameTranscript
    tools: ToolRegistry
    tool_schemas: list[ToolSchema]
    tool_ctx: ToolContext
    policy: ApprovalPolicy
    approvals: HumanApprovals
    workspace: Workspace
    emitter: TurnEmitter
    scope: CancelScope
    recorder: OutcomeRecorder
    models: list[ChatModel]
    limits: EngineConfig
    sub_agents: SubAgentRunner | None = None
    #: Recomputes ``tools``/``tool_schemas`` at each round (tool groups granted meanwhile).
    refresh_tools: Callable[[TurnEnv], Awaitable[None]] | None = None
