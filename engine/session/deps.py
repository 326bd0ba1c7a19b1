"""``HandlerDeps``: what every session handler of a process shares."""

from __future__ import annotations

from dataclasses import dataclass

from engine.agents.catalog import AgentCatalog
from engine.bus.chat import ChatEventBus
from engine.config import EngineConfig
from engine.llm.registry import ModelRegistry
from engine.mcp.manager import McpManager
from engine.session.context.compaction import Compactor
from engine.session.context.messages import MessageBuilder
from engine.session.protocols import ApprovalPolicy, HumanApprovals
from engine.store import Store
from engine.tools.registry import ToolRegistry
from engine.tools.workspace import Workspace


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
