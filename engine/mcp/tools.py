"""MCP tools as chathub tools, and ``activate_tools``, which makes them visible.

A server's tools are offered to the model only once ``activate_tools`` granted the server
(a "tool group"): for the session when the root agent (depth 0) asks, for the stack frame
when a sub-agent asks. The turn engine asks ``visible_mcp_tools`` for the tools to add at
each round, so a grant takes effect from the next round of the same turn. The reserved
group ``config`` unlocks the Config-category tools (``config_unlocked``).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from engine.mcp.arguments import drop_optional_nulls
from engine.mcp.config import RESERVED_GROUPS
from engine.mcp.manager import McpManager, McpToolSpec
from engine.tools.base import ToolError
from engine.tools.builtins._common import BuiltinTool, object_schema
from engine.tools.protocols import Tool, ToolCategory, ToolContext
from engine.tools.registry import validate_args

if TYPE_CHECKING:
    from engine.agents.catalog import AgentCatalog

__all__ = [
    "CONFIG_GROUP",
    "ActivateTools",
    "McpTool",
    "config_unlocked",
    "granted_groups",
    "mcp_tool_name",
    "mcp_tool_names",
    "mcp_tools",
    "visible_mcp_tools",
]

log = logging.getLogger(__name__)

CONFIG_GROUP = "config"  # one of RESERVED_GROUPS

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # function names: ^[a-zA-Z0-9_-]{1,64}$ (OpenAI, Gemini, llama.cpp)
_HASH = 8  # hex digits of the suffix that tells mapped names apart


def mcp_tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, with characters a function name cannot hold as ``_``."""
    return f"mcp__{server}__{_UNSAFE.sub('_', tool)}"


def mcp_tool_names(
    server: str, tools: Sequence[str], taken: Iterable[str] = ()
) -> list[str | None]:
    """A valid, unique function name for each of ``server``'s ``tools`` (None: left out).

    A tool keeps its ``mcp_tool_name`` when it fits in 64 characters and either needed no
    character replaced or equals no other tool's. The others (too long, or equal to
    another's after replacing characters) get it cut to fit plus a hash of the server's own
    tool name, so the result does not depend on the listing order and no two tools share a
    name. ``taken`` holds names given already (other servers'). A duplicate in the listing
    is left out.
    """
    natural = [mcp_tool_name(server, tool) for tool in tools]
    used = set(taken)

    def is_own(name: str, tool: str) -> bool:
        return len(name) <= _MAX_NAME and name == f"mcp__{server}__{tool}"

    own = {name for name, tool in zip(natural, tools, strict=True) if is_own(name, tool)}
    counts: dict[str, int] = {}
    for name in natural:
        counts[name] = counts.get(name, 0) + 1
    names: list[str | None] = []
    seen: set[str] = set()
    for name, tool in zip(natural, tools, strict=True):
        if tool in seen:
            names.append(None)
            continue
        seen.add(tool)
        if is_own(name, tool):
            fits = name not in used
        else:
            fits = len(name) <= _MAX_NAME and counts[name] == 1 and name not in used | own
        if not fits:
            digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:_HASH]
            name = f"{name[: _MAX_NAME - _HASH - 1]}_{digest}"
            if name in used:
                names.append(None)  # a 32-bit clash as well: vanishingly rare
                continue
        used.add(name)
        names.append(name)
    return names


#: Keywords that give a schema its shape from elsewhere: no default is added beside them.
_COMPOSED = frozenset({"$ref", "allOf", "anyOf", "oneOf"})


class McpTool:
    """One remote tool of an MCP server, offered under a valid function ``name``."""

    category = ToolCategory.INTROSPECTION
    root_agent_only = False
    sub_agents_only = False
    interactive_only = False

    def __init__(self, manager: McpManager, spec: McpToolSpec, name: str | None = None) -> None:
        self._manager = manager
        self.server = spec.server
        self.remote_name = spec.name
        self.name = name or mcp_tool_name(spec.server, spec.name)
        description = spec.description or f"{spec.name} (from the MCP server {spec.server})"
        if self.name != f"mcp__{spec.server}__{spec.name}":
            description = f"{description}\n(The server names this tool {spec.name!r}.)"
        self.description = description
        schema = dict(spec.input_schema) if spec.input_schema else {}
        schema.setdefault("type", "object")
        if not _COMPOSED.intersection(schema):
            # Beside a root ``$ref`` (Go's invopop/jsonschema, zod-to-json-schema) empty
            # properties won over the referenced ones: the model was offered a tool that
            # took no argument yet required one (until 2026-12-07; found by review).
            schema.setdefault("properties", {})
        self.parameters: dict[str, Any] = schema
        self.rerun_safe = spec.rerun_safe

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        if isinstance(args, dict):
            args = drop_optional_nulls(self.parameters, args)
        validate_args(self, args)
        return await self._manager.call(self.server, self.remote_name, args)

    def __repr__(self) -> str:
        return f"<McpTool {self.name}>"


def mcp_tools(
    manager: McpManager, specs: list[McpToolSpec], taken: Iterable[str] = ()
) -> list[McpTool]:
    """The chathub tools for one server's ``specs``, named by ``mcp_tool_names``."""
    if not specs:
        return []
    server = specs[0].server
    names = mcp_tool_names(server, [spec.name for spec in specs], taken)
    tools: list[McpTool] = []
    for spec, name in zip(specs, names, strict=True):
        if name is None:
            log.warning("mcp server %s: tool %r left out (listed twice?)", server, spec.name)
            continue
        tools.append(McpTool(manager, spec, name))
    return tools


async def granted_groups(
    manager: McpManager, session_id: int, stack_id: int, depth: int
) -> set[str]:
    """The groups granted where an agent at ``depth`` runs: the session or its frame."""
    return await manager.granted(session_id, None if depth == 0 else stack_id)


async def config_unlocked(manager: McpManager, session_id: int, stack_id: int, depth: int) -> bool:
    """Whether the Config-category tools are offered to this agent."""
    return CONFIG_GROUP in await granted_groups(manager, session_id, stack_id, depth)


async def visible_mcp_tools(
    manager: McpManager, session_id: int, stack_id: int, depth: int
) -> list[Tool]:
    """The tools of the servers granted to this agent, in configuration order.

    A granted server that cannot be reached now contributes nothing this round (logged);
    its tools come back once it answers again.
    """
    groups = await granted_groups(manager, session_id, stack_id, depth)
    tools: list[Tool] = []
    for server in manager.server_names:
        if server not in groups:
            continue
        try:
            specs = await manager.tools(server, passive=True)
        except ToolError as exc:
            log.warning("mcp server %s: tools unavailable: %s", server, exc)
            continue
        tools.extend(mcp_tools(manager, specs, taken=[tool.name for tool in tools]))
    return tools


class ActivateTools(BuiltinTool):
    """``activate_tools{groups}``: grant MCP servers (and ``config``) to this agent."""

    name = "activate_tools"
    rerun_safe = True  # idempotent: a grant again
    category = ToolCategory.INTROSPECTION

    def __init__(self, manager: McpManager, agents: AgentCatalog | None = None) -> None:
        """``agents``: a task agent is told only of the tools its ``tools`` list names."""
        self._manager = manager
        self._agents = agents
        available = ", ".join([*manager.server_names, CONFIG_GROUP])
        self.description = (
            "Make more tools available to you, by group. Groups: the MCP servers "
            f"configured here and '{CONFIG_GROUP}' (configuration tools); available: "
            f"{available}. The tools appear from your next step; the grant lasts for this "
            "conversation (for a sub-agent: for its task)."
        )
        self.parameters = object_schema(
            {
                "groups": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": f"Group names, among: {available}",
                }
            },
            ["groups"],
        )

    def _offers(self, ctx: ToolContext, name: str) -> bool:
        """Whether this level is offered ``name`` (toolsets.py filters the same way)."""
        agent = None if ctx.depth == 0 or self._agents is None else self._agents.get(ctx.agent_id)
        return agent is None or agent.lists(name)

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        groups: list[str] = []
        for group in args["groups"]:
            if not isinstance(group, str) or not group.strip():
                raise ToolError("activate_tools: each group must be a non-empty string")
            if group.strip() not in groups:
                groups.append(group.strip())
        if not groups:
            raise ToolError("activate_tools: name at least one group")
        manager = self._manager
        known = [*manager.server_names, CONFIG_GROUP]
        unknown = [g for g in groups if g not in known and g not in RESERVED_GROUPS]
        if unknown:
            listed = ", ".join(repr(g) for g in unknown)
            raise ToolError(
                f"activate_tools: unknown group {listed}; available: {', '.join(known)}"
            )
        stack_id = None if ctx.depth == 0 else ctx.stack_id
        already = await manager.granted(ctx.session_id, stack_id)

        lines: list[str] = []
        for group in groups:
            if group == CONFIG_GROUP:
                lines.append(f"{CONFIG_GROUP}: the configuration tools")
                continue
            try:
                specs = await manager.tools(group)  # starts the server: fail now, not later
            except ToolError as exc:
                raise ToolError(
                    f"activate_tools: cannot activate {group!r}, nothing was activated: {exc}"
                ) from None
            names = [
                tool.name for tool in mcp_tools(manager, specs) if self._offers(ctx, tool.name)
            ]
            lines.append(f"{group}: {', '.join(names) if names else '(no tools)'}")
        await manager.grant(ctx.session_id, stack_id, groups)

        fresh = [g for g in groups if g not in already]
        head = (
            "Activated; these tools are visible from your next step:"
            if fresh
            else "Already active:"
        )
        return "\n".join([head, *(f"- {line}" for line in lines)])
