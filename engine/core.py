"""The headless engine assembled from its parts; adapters and the hub build on it."""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy.engine import Connection

from engine.agents.catalog import AgentCatalog
from engine.approval.broker import ApprovalBroker, BypassRequest, Resolution
from engine.approval.bypass import Bypasses
from engine.approval.deciders import Decider
from engine.approval.policy import RulesPolicy
from engine.approval.rules import RuleStore
from engine.bus.chat import ChatEventBus
from engine.bus.system import SystemEventBus
from engine.config import AppConfig, CompactionConfig, EngineConfig
from engine.llm.registry import ModelRegistry
from engine.mcp.manager import McpManager
from engine.mcp.protocols import NotificationSink
from engine.mcp.tools import ActivateTools
from engine.session.context.compaction import Compactor
from engine.session.context.frame_envs import chosen_directory
from engine.session.context.messages import MessageBuilder
from engine.session.deps import HandlerDeps
from engine.session.handler import ChatSessionHandler
from engine.session.outcomes import TurnResult
from engine.session.protocols import ApprovalPolicy, EmitFn, GateRequest, RecordsAnswers
from engine.session.turn.gate import denies_reading
from engine.store import Store
from engine.store.inbox import InboxItem
from engine.store.rows import ToolCallRow
from engine.tools.builtins import builtin_tools
from engine.tools.preview import ApprovalPreview, preview_call
from engine.tools.processes import reap_group
from engine.tools.registry import ToolRegistry
from engine.tools.workspace import Workspace

log = logging.getLogger(__name__)


async def reap_interrupted_commands(store: Store) -> int:
    """Before anything resumes: make sure no command a crash interrupted still runs.

    Its group normally died with the service (the shell tool's watcher); this covers a
    member that outlived it. Returns how many recorded groups were checked.
    """
    launched = await store.history.launched_processes()
    for process in launched:
        if not await reap_group(process.process_group, process.process_start):
            log.error(
                "tool call %s: process group %s could not be killed",
                process.tool_call_id,
                process.process_group,
            )
    if launched:
        log.info("checked %d interrupted command(s): their process groups are gone", len(launched))
    return len(launched)


@dataclass(frozen=True, slots=True)
class Decided:
    """A human decision applied. ``resumed`` runs the owning session when no turn was waiting."""

    resolution: Resolution
    resumed: asyncio.Task[TurnResult | None] | None = None


@dataclass
class Engine:
    store: Store
    models: ModelRegistry
    agents: AgentCatalog
    tools: ToolRegistry
    policy: ApprovalPolicy
    approvals: ApprovalBroker
    workspace: Workspace
    limits: EngineConfig
    builder: MessageBuilder
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    mcp: McpManager | None = None
    bus: ChatEventBus = field(default_factory=ChatEventBus)
    system_bus: SystemEventBus = field(default_factory=SystemEventBus)
    # One handler per session while anyone holds it: two would not share the turn lock.
    _handlers: weakref.WeakValueDictionary[int, ChatSessionHandler] = field(
        default_factory=weakref.WeakValueDictionary
    )
    _background: set[asyncio.Task[Any]] = field(default_factory=set)

    @classmethod
    async def open(
        cls,
        config: AppConfig,
        *,
        models: ModelRegistry | None = None,
        policy: ApprovalPolicy | None = None,
        store: Store | None = None,
        notifications: NotificationSink | None = None,
    ) -> Engine:
        """The engine over ``config``; the approval rules are seeded on first use.

        ``notifications`` receives the MCP servers' notifications (the scheduler's events,
        which the tic reads); without it they are dropped."""
        settings = config.settings
        workspace = Workspace(Path(settings.chathub_workspace))
        limits = config.engine
        store = store or await Store.open(settings.database_url)
        await reap_interrupted_commands(store)
        tools = ToolRegistry(
            builtin_tools(
                workspace,
                command_timeout_s=limits.command_timeout_s,
                max_read_chars=limits.max_tool_output_chars - 200,
                max_output_chars=limits.max_tool_output_chars - 200,
            )
        )
        mcp = McpManager(config.mcp_servers, store.db, notifications=notifications)
        agents = AgentCatalog.load(config.agents_dir)
        tools.register(ActivateTools(mcp, agents))
        bypasses = Bypasses()
        if policy is None:
            policy = RulesPolicy(
                RuleStore(store.db),
                workspace,
                bypasses,
                tool_categories=lambda name: getattr(tools.get(name), "category", None),
                requester_of=store.inbox.requester_of,
                lasting=lambda name: bool(getattr(tools.get(name), "lasting", False)),
            )
        return cls(
            store=store,
            models=models or ModelRegistry.from_config(config.models),
            agents=agents,
            tools=tools,
            policy=policy,
            approvals=ApprovalBroker(store.inbox, bypasses, approvers=settings.approvers),
            workspace=workspace,
            limits=limits,
            builder=MessageBuilder(
                timezone=ZoneInfo(settings.chathub_timezone),
                working_directory=workspace.root,
            ),
            compaction=config.compaction,
            mcp=mcp,
        )

    @property
    def deps(self) -> HandlerDeps:
        return HandlerDeps(
            store=self.store,
            models=self.models,
            tools=self.tools,
            policy=self.policy,
            approvals=self.approvals,
            workspace=self.workspace,
            agents=self.agents,
            bus=self.bus,
            limits=self.limits,
            builder=self.builder,
            compactor=Compactor(
                self.models, self.store.summaries, self.store.history, self.bus, self.compaction
            ),
            mcp=self.mcp,
        )

    async def new_session(
        self,
        source: str,
        *,
        agent_id: str = "main",
        scratchpad_of: int | None = None,
        **session: Any,
    ) -> ChatSessionHandler:
        row = await self.store.sessions.create(source, agent_id=agent_id, **session)
        handler = ChatSessionHandler(
            row, self.agents[agent_id], self.deps, scratchpad_of=scratchpad_of
        )
        self._handlers[row.id] = handler
        return handler

    async def open_session(
        self, session_id: int, *, scratchpad_of: int | None = None
    ) -> ChatSessionHandler:
        """The session's live handler, or a new one over its stored state (sharing
        ``scratchpad_of``'s scratchpad, as ``new_session`` made it)."""
        handler = self._handlers.get(session_id)
        if handler is not None:
            return handler
        row = await self.store.sessions.get(session_id)
        if row is None:
            raise LookupError(f"no session {session_id}")
        handler = self._handlers.get(session_id)  # opened meanwhile
        if handler is None:
            handler = ChatSessionHandler(
                row, self.agents[row.agent_id], self.deps, scratchpad_of=scratchpad_of
            )
            self._handlers[session_id] = handler
        return handler

    # -- human decisions (adapters and the API call these) ----------------------------------

    async def approve(
        self,
        tool_call_id: int,
        bypass: BypassRequest | None = None,
        *,
        decider: Decider,
        session_id: int | None = None,
        shown_in: str | None = None,
        emit: EmitFn | None = None,
        records: RecordsAnswers | None = None,
        resume: bool = True,
        also: Callable[[Connection], None] | None = None,
    ) -> Decided:
        """Approve a pending call, live or persisted before a restart (then its turn resumes,
        unless ``resume`` is off: a fleet resumes it where the session is owned); ``also``
        commits with the decision.

        ``NotPermitted`` when ``decider`` may not decide it under ``APPROVERS``."""
        resolution = await self.approvals.approve(
            tool_call_id,
            bypass,
            decider=decider,
            session_id=session_id,
            shown_in=shown_in,
            also=also,
        )
        return self._after_decision(resolution, emit, records, resume)

    async def reject(
        self,
        tool_call_id: int,
        note: str = "",
        *,
        decider: Decider,
        session_id: int | None = None,
        shown_in: str | None = None,
        emit: EmitFn | None = None,
        records: RecordsAnswers | None = None,
        resume: bool = True,
        also: Callable[[Connection], None] | None = None,
    ) -> Decided:
        resolution = await self.approvals.reject(
            tool_call_id, note, decider=decider, session_id=session_id, shown_in=shown_in, also=also
        )
        return self._after_decision(resolution, emit, records, resume)

    async def resolve_question(
        self,
        request_id: int,
        answer: str,
        *,
        session_id: int | None = None,
        emit: EmitFn | None = None,
        records: RecordsAnswers | None = None,
        resume: bool = True,
        also: Callable[[Connection], None] | None = None,
    ) -> Decided:
        resolution = await self.approvals.answer(
            request_id, answer, session_id=session_id, also=also
        )
        return self._after_decision(resolution, emit, records, resume)

    async def pending_approvals(
        self, session_id: int | None = None, *, shown_in: str | None = None
    ) -> list[InboxItem]:
        return await self.store.inbox.pending_approvals(session_id, shown_in=shown_in)

    async def pending_questions(self, session_id: int | None = None) -> list[InboxItem]:
        return await self.store.inbox.pending_questions(session_id)

    async def preview_pending(self, item: InboxItem) -> ApprovalPreview | None:
        """What a waiting call would do, as its turn showed it when it asked: from its
        session's working directory (a page showing it later: a reload, the inbox)."""
        try:
            args = json.loads(item.arguments or "{}")
        except ValueError:
            return None
        if not isinstance(args, dict):
            return None
        session = await self.store.sessions.get(item.session_id)
        cwd = chosen_directory(session, self.workspace)
        call = ToolCallRow(item.tool_call_id, 0, "", item.name, item.arguments, None, "pending")
        request = GateRequest(item.session_id, item.agent_id, item.source, call, args)
        readable = not await denies_reading(self.policy, replace(request, working_directory=cwd))
        tool = self.tools.get(item.name)
        return preview_call(self.workspace, item.name, args, cwd, tool=tool, readable=readable)

    def cancel_session(self, session_id: int) -> bool:
        """Stop a live session's turn with its approvals and questions; False if none is live."""
        handler = self._handlers.get(session_id)
        if handler is None:
            return False
        handler.cancel()
        return True

    # -- recovery ---------------------------------------------------------------------------

    async def resume(
        self,
        session_id: int,
        *,
        emit: EmitFn | None = None,
        records: RecordsAnswers | None = None,
    ) -> TurnResult | None:
        handler = await self.open_session(session_id)
        return await handler.resume_turn(emit=emit, records=records)

    async def interrupted_sessions(self) -> list[int]:
        """Sessions a crash left mid-turn (unanswered message, open call, active sub-agent)."""
        return await self.store.sessions.interrupted()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.mcp is not None:
            await self.mcp.close()
        self.bus.close()
        self.system_bus.close()
        await self.models.aclose()
        await self.store.close()

    async def deliver_decided(self, tool_call_id: int) -> bool:
        """A decision or answer another process recorded: wake its call's waiter here, if
        it waits."""
        return await self.approvals.deliver_decided(tool_call_id)

    def _after_decision(
        self,
        resolution: Resolution,
        emit: EmitFn | None,
        records: RecordsAnswers | None,
        resume: bool = True,
    ) -> Decided:
        if resolution.live or not resume:
            return Decided(resolution)
        task = asyncio.create_task(self.resume(resolution.session_id, emit=emit, records=records))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_log_failure)
        return Decided(resolution, task)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("resuming a session after a decision failed", exc_info=task.exception())
