"""Connections to the configured MCP servers, their tools, notifications and tool grants.

Each live connection is one background task that holds the SDK's async context managers
(``stdio_client`` or ``streamable_http_client``, then ``ClientSession``) open until it is
told to stop, so a connection is opened by one task and closed by the same task, as anyio
requires. Callers use the open ``ClientSession`` from their own tasks.

A server is connected on first use. A call that times out, or that finds the connection
closed (the process exited, the pipe broke), drops the connection; the next use starts a
new one. Dropped connections are shut down in the background (the SDK closes stdin, then
terminates the process tree within a few seconds); ``close()`` waits for all of them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.engine import Connection

from engine.mcp.config import McpServerConfig
from engine.mcp.protocols import NotificationSink

if TYPE_CHECKING:
    import mcp.types as mt
    from mcp import ClientSession
from engine.store.db import Database
from engine.store.schema import (
    chat_sessions_stack,
    session_tool_grants,
    stack_tool_grants,
    utcnow,
)
from engine.tools.base import ToolError

__all__ = ["McpManager", "McpToolSpec"]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

# How long the per-round tool listing leaves a server that failed to start alone.
START_RETRY_S = 60.0
# A server's tool listing ends within these: a longer one is a server that loops.
MAX_LIST_PAGES = 100
MAX_LISTED_TOOLS = 2000
# Grace for a dropped connection's shutdown before its task is cancelled outright.
_CLOSE_GRACE_S = 8.0
# Notifications handled here or too chatty to pass on.
_NOT_STORED = frozenset(
    {
        "notifications/progress",
        "notifications/cancelled",
        "notifications/tools/list_changed",
    }
)
_STDERR_LINES = 20


@dataclass(frozen=True, slots=True)
class McpToolSpec:
    """A tool as a server lists it."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    #: The server marks the tool read-only or idempotent: re-run after a crash.
    rerun_safe: bool = False


class _ConnectionLost(ToolError):
    """The connection was found closed: the server crashed or exited."""


class _SessionGone(_ConnectionLost):
    """An HTTP server no longer knows the session (it restarted): it ran nothing of the
    request, which a new session may send again."""


class _LinkBroken(ToolError):
    """Sending or reading failed (a broken pipe, an HTTP failure): the link is dropped."""


class _Stderr:
    """The last lines a stdio server wrote to stderr, read by a daemon thread from a pipe."""

    def __init__(self, server: str) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")
        self._reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self._lines: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._server = server
        #: The pipe's end: every process that held it (the server) has exited.
        self.ended = threading.Event()
        threading.Thread(target=self._pump, name=f"mcp-stderr-{server}", daemon=True).start()

    def _pump(self) -> None:
        try:
            with self._reader:
                for line in self._reader:
                    line = line.rstrip()
                    if line:
                        self._lines.append(line)
                        log.debug("mcp server %s stderr: %s", self._server, line)
        finally:
            self.ended.set()

    def close_writer(self) -> None:
        """Drop our copy of the write end once the child holds its own."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def tail(self) -> str:
        return "\n".join(list(self._lines)[-5:])


class _Connection:
    """One open MCP session, held by its own task until ``stop``."""

    def __init__(self, config: McpServerConfig, on_message: Any) -> None:
        self.config = config
        self.session: ClientSession | None = None
        self.closed = False
        self._on_message = on_message
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready.add_done_callback(_consume)
        self._stderr = _Stderr(config.name) if config.transport == "stdio" else None
        self._task: asyncio.Task[None] | None = None

    @property
    def exited(self) -> bool:
        """Whether (stdio) every process that held the server's stderr is gone: the server
        exited (or closed its stderr: not proof enough to restart one that answers)."""
        return self._stderr is not None and self._stderr.ended.is_set()

    def stderr_tail(self) -> str:
        tail = self._stderr.tail() if self._stderr else ""
        return f"; its stderr ends with:\n{tail}" if tail else ""

    async def open(self) -> None:
        """Start the connection task and wait for the handshake; ``ToolError`` on failure."""
        name, limit = self.config.name, self.config.timeout_s
        self._task = asyncio.create_task(self._run(), name=f"mcp:{name}")
        try:
            async with asyncio.timeout(limit):
                await asyncio.shield(self._ready)
        except TimeoutError:
            raise ToolError(
                f"mcp server {name} did not start within {limit:g} s{self.stderr_tail()}"
            ) from None
        except ToolError:
            raise
        except Exception as exc:
            await asyncio.sleep(0.05)  # let the stderr pump catch the last words
            raise ToolError(
                f"mcp server {name} cannot start: {_describe(exc)}{self.stderr_tail()}"
            ) from None

    async def _run(self) -> None:
        # The SDK (about 0.7 s to import) is loaded when a server is first used, never by
        # a service with no MCP servers or before its first update.
        from mcp import ClientSession, StdioServerParameters, stdio_client
        from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

        config = self.config
        try:
            async with contextlib.AsyncExitStack() as stack:
                if config.transport == "stdio":
                    assert config.command is not None and self._stderr is not None
                    # A byte that is no UTF-8 (a Latin-1 file name a server echoes) is
                    # U+FFFD: "strict" killed the reader, and the call waited out its
                    # timeout on a dead connection (found by review on 2026-12-06).
                    params = StdioServerParameters(
                        command=config.command[0],
                        args=list(config.command[1:]),
                        env=config.env,
                        encoding_error_handler="replace",
                    )
                    try:
                        read, write = await stack.enter_async_context(
                            stdio_client(params, errlog=self._stderr.writer)
                        )
                    finally:
                        self._stderr.close_writer()
                else:
                    assert config.url is not None
                    client = await stack.enter_async_context(
                        create_mcp_http_client(headers=config.headers)
                    )
                    read, write = await stack.enter_async_context(
                        streamable_http_client(config.url, http_client=client)
                    )
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message)
                )
                await session.initialize()
                self.session = session
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(
                    exc if isinstance(exc, Exception) else ToolError("connection stopped")
                )
            elif isinstance(exc, Exception):
                log.warning("mcp server %s: connection ended: %s", config.name, _describe(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self.closed = True
            self.session = None
            if self._stderr is not None:
                self._stderr.close_writer()

    async def aclose(self) -> None:
        """Stop the task; cancel it if its shutdown outlasts the grace period."""
        self.closed = True
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        if not self._ready.done():
            task.cancel()  # still starting: nothing to shut down politely
        _, pending = await asyncio.wait({task}, timeout=_CLOSE_GRACE_S)
        if pending:
            task.cancel()
            await asyncio.wait({task}, timeout=_CLOSE_GRACE_S)
        if task.done() and not task.cancelled():
            task.exception()  # logged by the task itself
        if self._stderr is not None:
            self._stderr.close_writer()  # a task cancelled before its first step kept it


def _consume(future: asyncio.Future[None]) -> None:
    # An exception nobody awaited (the opener timed out first) must not be reported at GC.
    if not future.cancelled():
        future.exception()


def _says_session_gone(message: str) -> bool:
    """The SDK's words for a 404 to a known session ("Session terminated"), or a server's
    own JSON-RPC error for it ("Session not found")."""
    words = message.lower()
    return "session" in words and ("not found" in words or "terminated" in words)


def _describe(exc: BaseException) -> str:
    """A one-line reason, looking inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    import mcp.types as mt
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, MCPError) and exc.code == mt.CONNECTION_CLOSED:
        return "the server closed the connection during the handshake (it exited?)"
    if isinstance(exc, ValidationError):  # pydantic's words name classes and echo input
        return "it answered with something that is not valid MCP"
    # The model and the chat read this: the exception's words, never its class (the log
    # has it).
    text = " ".join(str(exc).split())
    return text[:300] if text else "an error without a message"


def _lost_a_message(exc: Exception) -> bool:
    """Whether an unreadable line was a JSON object (a message lost), not stray text."""
    if not isinstance(exc, ValidationError):
        return False
    return any(
        isinstance(error.get("input"), str) and error["input"].lstrip().startswith("{")
        for error in exc.errors()
    )


class McpManager:
    """The configured MCP servers: lazy connections, tool listings, calls, notifications, grants."""

    def __init__(
        self,
        servers: Iterable[McpServerConfig],
        db: Database,
        *,
        notifications: NotificationSink | None = None,
        clock: Clock = utcnow,
    ) -> None:
        self._configs = {server.name: server for server in servers}
        self._db = db
        #: None: nobody reads notifications (no scheduler, e.g. ``chathub doctor``).
        self._notifications = notifications
        self._clock = clock
        self._conns: dict[str, _Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tools: dict[str, list[McpToolSpec]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._start_failures: dict[str, tuple[float, str]] = {}
        self._closed = False

    # --- servers ----------------------------------------------------------------------

    @property
    def server_names(self) -> list[str]:
        """The enabled servers, in configuration order."""
        return [name for name, config in self._configs.items() if config.enabled]

    def config(self, server: str) -> McpServerConfig:
        """The enabled server ``server``; ``ToolError`` when unknown or disabled."""
        config = self._configs.get(server)
        if config is None:
            known = ", ".join(self.server_names) or "none"
            raise ToolError(f"no MCP server named {server!r} is configured (configured: {known})")
        if not config.enabled:
            raise ToolError(f"mcp server {server} is disabled in the configuration")
        return config

    async def tools(self, server: str, *, passive: bool = False) -> list[McpToolSpec]:
        """The server's tools, listed once per connection (connecting if need be).

        ``passive`` (the per-round listing of granted servers) does not retry a server
        whose start failed less than ``START_RETRY_S`` ago, so a broken server cannot
        add its start-up timeout to every round of a turn; an explicit use always retries.
        """
        cached = self._tools.get(server)
        if cached is not None:
            return cached
        config = self.config(server)
        failure = self._start_failures.get(server)
        if passive and failure and time.monotonic() - failure[0] < START_RETRY_S:
            raise ToolError(failure[1])
        for attempt in (1, 2):
            conn = await self._connection(server)
            try:
                specs = await self._list(conn, config.timeout_s)
            except _ConnectionLost:
                if attempt == 2:
                    raise
                continue  # the server had died while idle: a listing is safe to repeat
            except ToolError as exc:
                # A server that starts but never lists (it hangs) waits as long as one that
                # cannot start: remembered, or every round waited its timeout again
                # (found by review).
                self._start_failures[server] = (time.monotonic(), str(exc))
                raise
            if self._conns.get(server) is conn:
                self._tools[server] = specs
            return specs
        raise AssertionError("unreachable")

    async def _list(self, conn: _Connection, limit: float) -> list[McpToolSpec]:
        import mcp.types as mt

        server = conn.config.name
        specs: list[McpToolSpec] = []
        cursor: str | None = None
        seen: set[str] = set()
        async with self._guard(conn, limit):
            session = self._session(conn)
            for _ in range(MAX_LIST_PAGES):
                params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
                result = await session.list_tools(params=params)
                for tool in result.tools:
                    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
                    description = (tool.description or tool.title or "").strip()
                    hints = tool.annotations
                    rerun_safe = hints is not None and bool(
                        hints.read_only_hint or hints.idempotent_hint
                    )
                    specs.append(
                        McpToolSpec(server, tool.name, description, dict(schema), rerun_safe)
                    )
                cursor = result.next_cursor
                if not cursor:
                    return specs
                # A cursor given again asked for one page for ever, until the timeout
                # restarted a server that had answered every request (until 2026-12-06).
                if cursor in seen or len(specs) > MAX_LISTED_TOOLS:
                    break
                seen.add(cursor)
        raise ToolError(
            f"mcp server {server} lists its tools without end (a page cursor given again, "
            f"or over {MAX_LISTED_TOOLS} tools in {MAX_LIST_PAGES} pages); its tools are "
            "not offered"
        )

    async def call(
        self, server: str, tool: str, args: dict[str, Any], timeout_s: float | None = None
    ) -> str:
        """Call ``tool`` and return its text; ``ToolError`` for an error result or a failure."""
        import mcp.types as mt

        config = self.config(server)
        limit = timeout_s if timeout_s is not None else config.timeout_s
        conn = await self._connection(server)
        exited = conn.exited  # before the call was sent: nothing of it can have run
        try:
            async with self._guard(conn, limit):
                result = await self._session(conn).call_tool(tool, args)
        except (_ConnectionLost, _LinkBroken) as exc:
            if not exited and not isinstance(exc, _SessionGone):
                raise  # it may have run: never sent twice
            # The server died while idle (killed, out of memory): the call goes to a new
            # one. Until 2026-12-07 it failed, "it crashed or exited", though nothing ran
            # (found by review).
            log.info("mcp server %s had exited; calling %s on a new one", server, tool)
            conn = await self._connection(server)
            async with self._guard(conn, limit):
                result = await self._session(conn).call_tool(tool, args)
        if not isinstance(result, mt.CallToolResult):
            raise ToolError(f"mcp server {server}: unexpected result for {tool}")
        text = _result_text(result)
        if result.is_error:
            raise ToolError(text if text != "(no output)" else f"{tool} failed (no message)")
        return text

    @contextlib.asynccontextmanager
    async def _guard(self, conn: _Connection, limit: float) -> Any:
        """Bound a request by ``limit``; map SDK failures to ``ToolError``, dropping dead links."""
        import mcp.types as mt
        from mcp.shared.exceptions import MCPError

        server = conn.config.name
        try:
            async with asyncio.timeout(limit) as scope:
                yield
        except TimeoutError:
            if not scope.expired():
                raise
            self._drop(conn)
            raise ToolError(
                f"mcp server {server} did not answer within {limit:g} s; "
                "it will be restarted on next use"
            ) from None
        except MCPError as exc:
            if exc.code == mt.CONNECTION_CLOSED:
                self._drop(conn)
                await asyncio.sleep(0.05)  # let the stderr pump catch the last words
                raise _ConnectionLost(
                    f"mcp server {server} closed the connection (it crashed or exited); "
                    f"it will be restarted on next use{conn.stderr_tail()}"
                ) from None
            forgotten = exc.code == mt.INVALID_REQUEST and _says_session_gone(exc.message)
            if forgotten and conn.config.transport == "http":
                # A redeployed server forgot the session: every call failed so until
                # chathub restarted (until 2026-12-07; found by review).
                self._drop(conn)
                raise _SessionGone(
                    f"mcp server {server} no longer knows this session (it restarted?)"
                ) from None
            if exc.code == mt.REQUEST_TIMEOUT:
                self._drop(conn)
            raise ToolError(f"mcp server {server}: {exc.message}") from None
        except ToolError:
            raise
        except (ValidationError, RuntimeError) as exc:
            # The server answered, with a result the SDK refuses (a malformed content block,
            # structured content against its own output schema): the link is fine, and
            # restarting the server would lose its state (found by review).
            log.warning("mcp server %s: a result the MCP client refused", server, exc_info=True)
            raise ToolError(
                f"mcp server {server} answered with a result that is not valid MCP "
                f"({_describe(exc) if isinstance(exc, RuntimeError) else 'malformed content'})"
            ) from None
        except Exception as exc:
            # Broken pipes, HTTP failures: the link is not trustworthy.
            log.warning("mcp server %s failed", server, exc_info=True)
            self._drop(conn)
            raise _LinkBroken(
                f"mcp server {server} failed: {_describe(exc)}; it will be restarted on next use"
            ) from None

    def _session(self, conn: _Connection) -> ClientSession:
        import mcp.types as mt
        from mcp.shared.exceptions import MCPError

        session = conn.session
        if session is None or conn.closed:
            raise MCPError(code=mt.CONNECTION_CLOSED, message="Connection closed")
        return session

    async def _connection(self, server: str) -> _Connection:
        if self._closed:
            raise ToolError("the MCP client is shut down")
        config = self.config(server)
        conn = self._conns.get(server)
        if conn is not None and not conn.closed:
            return conn
        lock = self._locks.setdefault(server, asyncio.Lock())
        async with lock:
            conn = self._conns.get(server)
            if conn is not None and not conn.closed:
                return conn
            if conn is not None:
                self._drop(conn)
            self._tools.pop(server, None)  # a new process may offer other tools
            conn = _Connection(config, partial(self._on_message, server))
            try:
                await conn.open()
            except BaseException as exc:
                self._closing_task(conn)
                if isinstance(exc, ToolError):
                    self._start_failures[server] = (time.monotonic(), str(exc))
                raise
            self._start_failures.pop(server, None)
            self._conns[server] = conn
            log.info("mcp server %s connected", server)
            return conn

    def _drop(self, conn: _Connection) -> None:
        server = conn.config.name
        if self._conns.get(server) is conn:
            del self._conns[server]
        conn.closed = True
        self._closing_task(conn)

    def _closing_task(self, conn: _Connection) -> None:
        task = asyncio.create_task(conn.aclose(), name=f"mcp-close:{conn.config.name}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Shut every connection down and wait for the shutdowns."""
        self._closed = True
        for conn in list(self._conns.values()):
            self._drop(conn)
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)

    # --- notifications ----------------------------------------------------------------

    async def _on_message(self, server: str, message: Any) -> None:
        if isinstance(message, Exception):
            log.warning("mcp server %s: transport error: %s", server, _describe(message))
            conn = self._conns.get(server)
            if conn is not None and _lost_a_message(message):
                # A JSON-RPC message the client could not read (a lone surrogate, say) may
                # have been the answer a call waits for: the link goes now, so the call
                # fails at once instead of at its timeout (found by review). A stray line
                # of text (a print left in a server) costs nothing.
                self._drop(conn)
            return
        method = getattr(message, "method", None)
        if not isinstance(method, str):
            return
        if method == "notifications/tools/list_changed":
            self._tools.pop(server, None)
        if method in _NOT_STORED or self._notifications is None:
            return
        params = getattr(message, "params", None)
        import mcp.types as mt

        if isinstance(message, mt.LoggingMessageNotification) and params.level == "debug":
            return
        payload = (
            params.model_dump(mode="json", by_alias=True, exclude_none=True)
            if params is not None
            else None
        )
        try:
            await self._notifications.add(f"mcp:{server}", method, payload)
        except Exception:
            log.exception("mcp server %s: could not store notification %s", server, method)

    # --- grants -----------------------------------------------------------------------

    async def grant(self, session_id: int, stack_id: int | None, groups: Iterable[str]) -> None:
        """Grant ``groups`` to the session (``stack_id`` None: the root) or to the frame."""
        await self._db.run(_grant, session_id, stack_id, sorted(set(groups)), self._clock())

    async def granted(self, session_id: int, stack_id: int | None) -> set[str]:
        """The groups granted to the session's root (``stack_id`` None) or to the frame."""
        return await self._db.run(_granted, session_id, stack_id)

    async def reset(self, session_id: int) -> int:
        """Withdraw the session's grants and those of its frames; return how many."""
        return await self._db.run(_reset, session_id)


def _result_text(result: mt.CallToolResult) -> str:
    import mcp.types as mt

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mt.TextContent):
            parts.append(block.text)
        elif isinstance(block, mt.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mt.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[binary resource {resource.uri} ({resource.mime_type or '?'})]")
        elif isinstance(block, mt.ResourceLink):
            parts.append(f"[resource {block.uri}]")
        elif isinstance(block, mt.ImageContent | mt.AudioContent):
            parts.append(f"[{block.type} ({block.mime_type}) omitted]")
        else:
            parts.append(f"[{getattr(block, 'type', 'unknown')} content omitted]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts) if parts else "(no output)"


def _grant(
    conn: Connection, session_id: int, stack_id: int | None, groups: list[str], now: datetime
) -> None:
    if stack_id is None:
        table, key, value = session_tool_grants, session_tool_grants.c.session_id, session_id
    else:
        table, key, value = stack_tool_grants, stack_tool_grants.c.stack_id, stack_id
    have = set(conn.execute(sa.select(table.c.tool_group).where(key == value)).scalars())
    rows = [{key.name: value, "tool_group": g, "created_at": now} for g in groups if g not in have]
    if rows:
        conn.execute(table.insert(), rows)


def _granted(conn: Connection, session_id: int, stack_id: int | None) -> set[str]:
    if stack_id is None:
        query = sa.select(session_tool_grants.c.tool_group).where(
            session_tool_grants.c.session_id == session_id
        )
    else:
        query = sa.select(stack_tool_grants.c.tool_group).where(
            stack_tool_grants.c.stack_id == stack_id
        )
    return set(conn.execute(query).scalars())


def _reset(conn: Connection, session_id: int) -> int:
    frames = sa.select(chat_sessions_stack.c.id).where(
        chat_sessions_stack.c.session_id == session_id
    )
    removed = conn.execute(
        session_tool_grants.delete().where(session_tool_grants.c.session_id == session_id)
    ).rowcount
    removed += conn.execute(
        stack_tool_grants.delete().where(stack_tool_grants.c.stack_id.in_(frames))
    ).rowcount
    return removed
