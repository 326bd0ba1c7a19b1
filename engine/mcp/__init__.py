"""MCP: a client for the stdio and streamable-HTTP servers of ``[[mcp_servers]]``."""

from __future__ import annotations

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
