"""MCP: a client for the stdio and streamable-HTTP servers of ``[[mcp_servers]]``.

The names below load on first use (PEP 562): the settings read ``engine.mcp.config`` at
every start, and that must not pull in the manager, the store and their imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.faces import lazy_attributes

if TYPE_CHECKING:
    from engine.mcp.config import RESERVED_GROUPS, McpServerConfig, parse_mcp_servers
    from engine.mcp.manager import McpManager, McpToolSpec
    from engine.mcp.tools import (
        CONFIG_GROUP,
        ActivateTools,
        McpTool,
        config_unlocked,
        granted_groups,
        mcp_tool_name,
        mcp_tool_names,
        visible_mcp_tools,
    )

_HOMES = {
    "RESERVED_GROUPS": "engine.mcp.config",
    "McpServerConfig": "engine.mcp.config",
    "parse_mcp_servers": "engine.mcp.config",
    "McpManager": "engine.mcp.manager",
    "McpToolSpec": "engine.mcp.manager",
    "CONFIG_GROUP": "engine.mcp.tools",
    "ActivateTools": "engine.mcp.tools",
    "McpTool": "engine.mcp.tools",
    "config_unlocked": "engine.mcp.tools",
    "granted_groups": "engine.mcp.tools",
    "mcp_tool_name": "engine.mcp.tools",
    "mcp_tool_names": "engine.mcp.tools",
    "visible_mcp_tools": "engine.mcp.tools",
}

__all__ = [
    "CONFIG_GROUP",
    "RESERVED_GROUPS",
    "ActivateTools",
    "McpManager",
    "McpServerConfig",
    "McpTool",
    "McpToolSpec",
    "config_unlocked",
    "granted_groups",
    "mcp_tool_name",
    "mcp_tool_names",
    "parse_mcp_servers",
    "visible_mcp_tools",
]


__getattr__ = lazy_attributes(__name__, _HOMES)
