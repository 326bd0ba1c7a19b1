"""The headless engine assembled from its parts; adapters and the hub build on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from engine.agents.catalog import AgentCatalog
from engine.bus.chat import ChatEventBus
from engine.bus.system import SystemEventBus
from engine.config import AppConfig, EngineConfig
from engine.llm.registry import ModelRegistry
from engine.session.gate import AllowAll, ApprovalPolicy
from engine.session.handler import ChatSessionHandler, HandlerDeps
from engine.session.messages import MessageBuilder
from engine.store import Store
from engine.tools.builtins import builtin_tools
from engine.tools.registry import ToolRegistry
from engine.tools.workspace import Workspace


@dataclass
class Engine:
    store: Store
    models: ModelRegistry
    agents: AgentCatalog
    tools: ToolRegistry
    policy: ApprovalPolicy
    limits: EngineConfig
    builder: MessageBuilder
    bus: ChatEventBus = field(default_factory=ChatEventBus)
    system_bus: SystemEventBus = field(default_factory=SystemEventBus)

    @classmethod
    async def open(
        cls,
        config: AppConfig,
        *,
        models: ModelRegistry | None = None,
        policy: ApprovalPolicy | None = None,
        store: Store | None = None,
    ) -> Engine:
        settings = config.settings
        workspace = Workspace(Path(settings.chathub_workspace))
        limits = config.engine
        return cls(
            store=store or await Store.open(settings.database_url),
            models=models or ModelRegistry.from_config(config.models),
            agents=AgentCatalog.load(config.agents_dir),
            tools=ToolRegistry(
                builtin_tools(
                    workspace,
                    command_timeout_s=limits.command_timeout_s,
                    max_read_chars=limits.max_tool_output_chars - 200,
                    max_output_chars=limits.max_tool_output_chars - 200,
                )
            ),
            policy=policy or AllowAll(),
            limits=limits,
            builder=MessageBuilder(
                timezone=ZoneInfo(settings.chathub_timezone),
                working_directory=workspace.root,
            ),
        )

    @property
    def deps(self) -> HandlerDeps:
        return HandlerDeps(
            store=self.store,
            models=self.models,
            tools=self.tools,
            policy=self.policy,
            bus=self.bus,
            limits=self.limits,
            builder=self.builder,
        )

    async def new_session(
        self, source: str, *, agent_id: str = "main", **session: Any
    ) -> ChatSessionHandler:
        row = await self.store.sessions.create(source, agent_id=agent_id, **session)
        return ChatSessionHandler(row, self.agents[agent_id], self.deps)

    async def open_session(self, session_id: int) -> ChatSessionHandler:
        row = await self.store.sessions.get(session_id)
        if row is None:
            raise LookupError(f"no session {session_id}")
        return ChatSessionHandler(row, self.agents[row.agent_id], self.deps)

    async def close(self) -> None:
        self.bus.close()
        self.system_bus.close()
        await self.models.aclose()
        await self.store.close()
