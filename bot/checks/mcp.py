"""MCP servers: each configured one starts and lists its tools."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from bot.checks.result import Check
from engine.mcp import McpManager, McpServerConfig
from engine.store import connect
from engine.tools import ToolError

__all__ = ["check_mcp_servers"]

log = logging.getLogger(__name__)


async def check_mcp_servers(servers: Sequence[McpServerConfig]) -> list[Check]:
    enabled = [s for s in servers if s.enabled]
    if not enabled:
        return []
    # The manager keeps tool grants in a database; a listing never touches it, so a
    # throwaway in-memory one keeps the real database out of this check.
    db = connect("sqlite+aiosqlite:///:memory:")
    manager = McpManager(enabled, db)
    checks = []
    try:
        for server in enabled:
            checks.append(await _one(manager, server.name))
    finally:
        await manager.close()
        await db.close()
    return checks


async def _one(manager: McpManager, name: str) -> Check:
    try:
        tools = await manager.tools(name)
    except Exception as exc:  # a server's failure is its line, never the doctor's crash
        log.info("MCP server %s: %s: %s", name, type(exc).__name__, exc)
        # The manager's ToolError texts are written for people (and the model) to read.
        said = f": {str(exc)[:300]}" if isinstance(exc, ToolError) and str(exc) else ""
        return Check(
            f"mcp.{name}",
            False,
            f"MCP server {name} did not start or list its tools{said}",
            "check its command or url in CHATHUB_CONFIG; run it by hand to see its error",
        )
    return Check(f"mcp.{name}", True, f"MCP server {name} lists {len(tools)} tools")
