"""The tools of one agent level, and the per-round refresh when tool groups are granted."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from engine.agents.catalog import AgentCatalog
from engine.config import EngineConfig
from engine.mcp.manager import McpManager
from engine.mcp.tools import CONFIG_GROUP, granted_groups, visible_mcp_tools
from engine.session.turn.turn_env import TurnEnv
from engine.store.rows import FrameRow, SessionRow
from engine.tools.builtins.subagents import SUBTASK_TOOL
from engine.tools.protocols import Tool, ToolCategory
from engine.tools.registry import ToolRegistry

#: Tools every agent keeps whatever its ``tools`` list says (they are how levels talk).
PER_LEVEL_TOOLS = frozenset({"ask_user_clarification", SUBTASK_TOOL, "activate_tools"})

RefreshTools = Callable[[TurnEnv], Awaitable[None]]
#: What the root's tools were built from: its agent, the registry's version, the front
#: end's interface tools.
_BuiltFrom = tuple[str, int, tuple[Tool, ...]]


def _same(a: _BuiltFrom, b: _BuiltFrom) -> bool:
    """Tools compare by identity: a front end's new tool object is a new tool set."""
    return (
        a[:2] == b[:2]
        and len(a[2]) == len(b[2])
        and all(x is y for x, y in zip(a[2], b[2], strict=True))
    )


class LevelTools:
    """A name is never offered twice at one level.

    Visibility flags decide most (root-only, sub-agents-only, interactive-only). The
    per-level ones are decided here: ``execute_subtask`` for sub-agents below the depth
    limit and for background roots (conversations use ``execute_task``), and a task
    agent's ``tools`` list keeps only those (plus the per-level ones).
    """

    __slots__ = ("_agents", "_built", "_limits", "_mcp", "_session", "_tools")

    def __init__(
        self,
        session: SessionRow,
        tools: ToolRegistry,
        agents: AgentCatalog,
        limits: EngineConfig,
        mcp: McpManager | None,
    ) -> None:
        self._session = session
        self._tools = tools
        self._agents = agents
        self._limits = limits
        self._mcp = mcp
        # The root's tools as last built, kept while nothing they were built from changed:
        # every turn starts with them, and rebuilding costs a filter pass and a schema per
        # tool. Views are never changed once built (``refresher`` makes new ones).
        self._built: tuple[_BuiltFrom, ToolRegistry] | None = None

    def for_frame(self, frame: FrameRow, interface_tools: Sequence[Tool]) -> ToolRegistry:
        """``frame``'s tools; the front end's ``interface_tools`` are the root's only.

        A clash of an interface tool with another raises ``ValueError``.
        """
        if frame.depth > 0:  # a sub-agent's: its agent's definition may change meanwhile
            return self._build(frame, interface_tools)
        key = (frame.agent_id, self._tools.version, tuple(interface_tools))
        built = self._built
        if built is not None and _same(built[0], key):
            return built[1]
        tools = self._build(frame, interface_tools)
        self._built = (key, tools)
        return tools

    def _build(self, frame: FrameRow, interface_tools: Sequence[Tool]) -> ToolRegistry:
        tools = self._tools.for_agent(
            depth=frame.depth, is_interactive=self._session.is_interactive
        )
        can_spawn = frame.depth + 1 <= self._limits.max_agent_depth and (
            frame.depth > 0 or not self._session.is_interactive
        )
        if not can_spawn:
            tools = tools.without([SUBTASK_TOOL])
        agent = self._agents.get(frame.agent_id) if frame.depth > 0 else None
        if agent is not None and agent.tools is not None:
            keep = {*agent.tools, *PER_LEVEL_TOOLS}
            tools = tools.filtered(lambda tool: tool.name in keep)
        if frame.depth == 0:
            for tool in interface_tools:
                tools.register(tool)
        return tools

    def refresher(self, base: ToolRegistry) -> RefreshTools | None:
        """Each round: ``base`` plus the granted groups (MCP servers, ``config``); ``None``
        when there are no groups to grant and the tool set is fixed for the turn."""
        mcp = self._mcp
        if mcp is None or not (mcp.server_names or self._has_config_tools()):
            return None
        session_id = self._session.id

        async def refresh(env: TurnEnv) -> None:
            frame = env.frame
            groups = await granted_groups(mcp, session_id, frame.id, frame.depth)
            tools = (
                base
                if CONFIG_GROUP in groups
                else base.filtered(lambda t: t.category is not ToolCategory.CONFIG)
            )
            extra = await visible_mcp_tools(mcp, session_id, frame.id, frame.depth)
            agent = self._agents.get(frame.agent_id) if frame.depth > 0 else None
            if agent is not None:  # a task agent's list holds for granted tools too
                # (until 2026-12-06 ``researcher``, which "changes nothing", was offered
                # every tool of a server it activated itself; found by review)
                extra = [t for t in extra if agent.lists(t.name)]
            if extra:
                names = set(tools.names)
                tools = ToolRegistry([*tools, *(t for t in extra if t.name not in names)])
            if tools.names != env.tools.names:
                env.tools, env.tool_schemas = tools, tools.schemas()

        return refresh

    def _has_config_tools(self) -> bool:
        # A loop, not any(<generator>): this runs at every turn start, once per tool.
        for tool in self._tools:  # noqa: SIM110
            if tool.category is ToolCategory.CONFIG:
                return True
        return False
