"""A tiny stdio MCP server for the failure cases of the MCP client tests.

Tools: ``echo`` (answers), ``hang`` (never answers), ``crash`` (the process exits),
``notify_me`` (pushes a log message and a resource update before answering),
``fail`` (an ``isError`` result). Run as ``python broken_server.py`` (stdio), or
``python broken_server.py --http PORT`` (streamable HTTP on 127.0.0.1:PORT/mcp).
"""

from __future__ import annotations

import asyncio
import os
import sys
import warnings

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("broken")


@server.tool()
def echo(text: str) -> str:
    """Answer with ``text``, and the server's process id."""
    return f"{text} (pid {os.getpid()})"


@server.tool()
async def hang() -> str:
    """Never answer."""
    await asyncio.Event().wait()
    return "unreachable"


@server.tool()
def crash() -> str:
    """Exit the server process at once."""
    os._exit(1)


@server.tool()
async def notify_me(note: str, ctx: Context) -> str:
    """Push a log message and a resource update, then answer."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # logging is deprecated at 2026-07-28, not at 2025-11-25
        await ctx.session.send_log_message("info", {"note": note}, logger="broken")
    await ctx.session.send_resource_updated(f"memo://{note}")
    return "sent"


@server.tool()
def fail() -> str:
    """Fail the way a tool reports a failure: an ``isError`` result."""
    raise ToolError("it failed on purpose")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
