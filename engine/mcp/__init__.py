"""MCP: a client for the stdio and streamable-HTTP servers of ``[[mcp_servers]]``.

The names below load on first use (PEP 562): the settings read ``engine.mcp.config`` at
every start, and that must not pull in the manager, the store and their imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    "RESERVED_GROUPS": "config",
    "McpServerConfig": "config",
    "parse_mcp_servers": "config",
    "McpManager": "manager",
    "McpToolSpec": "manager",
    "CONFIG_GROUP": "tools",
    "ActivateTools": "tools",
    "McpTool": "tools",
    "config_unlocked": "tools",
    "granted_groups": "tools",
    "mcp_tool_name": "tools",
    "mcp_tool_names": "tools",
    "visible_mcp_tools": "tools",
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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
