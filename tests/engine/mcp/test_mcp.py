"""The MCP client against real servers: mcp-server-time and the in-repo broken_server.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.schema import LAYERS
from engine.mcp import (
    ActivateTools,
    McpManager,
    McpServerConfig,
    config_unlocked,
    parse_mcp_servers,
    visible_mcp_tools,
)
from engine.store import Store
from engine.tools.base import ToolError
from engine.tools.protocols import ToolContext
from scheduler.events import EventStore
from scheduler.tables import events

BROKEN = str(Path(__file__).with_name("broken_server.py"))
RAW = str(Path(__file__).with_name("raw_server.py"))
TIME = McpServerConfig(
    name="time",
    transport="stdio",
    command=(sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"),
    timeout_s=20,
)
# Start-up gets a generous limit (a cold interpreter importing the mcp package takes ~1 s on
# a slow machine); the hang test sets its own short per-call limit.
BROKEN_SERVER = McpServerConfig(
    name="broken", transport="stdio", command=(sys.executable, BROKEN), timeout_s=15
)


class _Pad:
    async def set(self, key: str, value: str) -> None: ...

    async def delete(self, key: str) -> None: ...


def _ctx(session_id: int, stack_id: int, depth: int) -> ToolContext:
    return ToolContext(
        session_id=session_id,
        stack_id=stack_id,
        agent_id="main",
        depth=depth,
        working_directory=Path("."),
        scratchpad=_Pad(),
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await Store.open(
        f"sqlite+aiosqlite:///{tmp_path}/t.db", LAYERS
    )  # events: the scheduler's
    yield store
    await store.close()


@contextlib.asynccontextmanager
async def _manager(store: Store, *servers: McpServerConfig) -> AsyncIterator[McpManager]:
    manager = McpManager(servers, store.db, notifications=EventStore(store.db))
    try:
        yield manager
    finally:
        await manager.close()


# --- configuration -----------------------------------------------------------------------


def test_parse_mcp_servers_accepts_both_transports() -> None:
    servers = parse_mcp_servers(
        [
            {"name": "time", "command": ["mcp-server-time"], "env": {"TZ": "UTC"}},
            {
                "name": "mail-2",
                "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": "Bearer x"},
                "timeout_s": 5,
                "enabled": False,
            },
        ]
    )
    assert servers[0] == McpServerConfig(
        name="time", transport="stdio", command=("mcp-server-time",), env={"TZ": "UTC"}
    )
    assert servers[1].transport == "http" and servers[1].timeout_s == 5.0
    assert not servers[1].enabled
    assert parse_mcp_servers(None) == ()


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"name": "x"}, "array of tables"),
        ([{"command": ["x"]}], r"mcp_servers\[0\]: name"),
        ([{"name": "Time", "command": ["x"]}], r"mcp_servers\[0\]: name: 'Time'"),
        ([{"name": "a__b", "command": ["x"]}], "without '__'"),
        # Its tools (mcp__git___push) would match every pattern written for server "git".
        ([{"name": "git_", "command": ["x"]}], "not ending in '_'"),
        ([{"name": "config", "command": ["x"]}], "reserved"),
        ([{"name": "t"}], r"mcp_servers\[0\] \(t\): give exactly one of command"),
        ([{"name": "t", "command": ["x"], "url": "http://h"}], "exactly one"),
        ([{"name": "t", "command": "x y"}], r"\(t\): command: must be a non-empty list"),
        ([{"name": "t", "command": []}], "command: must be"),
        ([{"name": "t", "url": "ftp://h"}], "url: must be"),
        ([{"name": "t", "command": ["x"], "transport": "http"}], "transport: 'http' needs url"),
        ([{"name": "t", "command": ["x"], "timeout_s": 0}], "timeout_s"),
        ([{"name": "t", "command": ["x"], "env": {"A": 1}}], "env: must be a table of strings"),
        ([{"name": "t", "command": ["x"], "headers": {"A": "b"}}], "headers: only for"),
        ([{"name": "t", "command": ["x"], "colour": 1}], r"unknown keys \['colour'\]"),
        (
            [{"name": "t", "command": ["x"]}, {"name": "t", "url": "http://h"}],
            r"mcp_servers\[1\] \(t\): name: used by an earlier server",
        ),
    ],
)
def test_parse_mcp_servers_refuses_bad_entries(entries: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_mcp_servers(entries)


# --- mcp-server-time over stdio ------------------------------------------------------------


async def test_time_server_tools_and_calls(store: Store) -> None:
    async with _manager(store, TIME) as manager:
        specs = await manager.tools("time")
        assert {"get_current_time", "convert_time"} <= {s.name for s in specs}
        assert await manager.tools("time") is specs  # cached

        session = await store.sessions.create("test")
        root = await store.sessions.root_frame(session.id)
        await manager.grant(session.id, None, ["time"])
        tools = {t.name: t for t in await visible_mcp_tools(manager, session.id, root.id, 0)}
        tool = tools["mcp__time__get_current_time"]
        assert tool.parameters["required"] == ["timezone"]
        ctx = _ctx(session.id, root.id, 0)

        answer = json.loads(await tool.run({"timezone": "Europe/Paris"}, ctx))
        assert answer["timezone"] == "Europe/Paris" and "datetime" in answer

        with pytest.raises(ToolError, match="missing required argument 'timezone'"):
            await tool.run({}, ctx)
        with pytest.raises(ToolError, match="'timezone' must be a string, got integer"):
            await tool.run({"timezone": 5}, ctx)
        with pytest.raises(ToolError, match="Invalid timezone"):
            await tool.run({"timezone": "Nowhere/Land"}, ctx)
        with pytest.raises(ToolError, match=r"mcp server time: .*nope"):
            await manager.call("time", "nope", {})
        # Errors keep the connection: the same server answers the next call.
        assert "Asia/Tokyo" in await tool.run({"timezone": "Asia/Tokyo"}, ctx)


async def test_grants_scope_persistence_and_reset(store: Store) -> None:
    session = await store.sessions.create("test")
    root = await store.sessions.root_frame(session.id)
    child = await store.sessions.push_frame(
        session.id, agent_id="helper", depth=1, parent_tool_call_id=1, agent_prompt="p"
    )
    async with _manager(store, TIME, BROKEN_SERVER) as manager:
        activate = ActivateTools(manager)
        assert "time, broken, config" in activate.description
        assert await visible_mcp_tools(manager, session.id, root.id, 0) == []

        result = await activate.run({"groups": ["time"]}, _ctx(session.id, root.id, 0))
        assert "visible from your next step" in result
        assert "mcp__time__get_current_time" in result
        names = [t.name for t in await visible_mcp_tools(manager, session.id, root.id, 0)]
        assert "mcp__time__convert_time" in names
        # The root's grant is the session's; a sub-agent's frame has its own.
        assert await visible_mcp_tools(manager, session.id, child.id, 1) == []
        await activate.run({"groups": ["config"]}, _ctx(session.id, child.id, 1))
        assert await config_unlocked(manager, session.id, child.id, 1)
        assert not await config_unlocked(manager, session.id, root.id, 0)
        assert await manager.granted(session.id, child.id) == {"config"}

        again = await activate.run({"groups": ["time"]}, _ctx(session.id, root.id, 0))
        assert again.startswith("Already active")

    async with _manager(store, TIME) as fresh:  # grants live in the database
        assert await fresh.granted(session.id, None) == {"time"}
        assert await fresh.reset(session.id) == 2
        assert await fresh.granted(session.id, None) == set()
        assert await fresh.granted(session.id, child.id) == set()


async def test_activate_refuses_unknown_groups_and_servers_that_cannot_start(
    store: Store,
) -> None:
    missing = McpServerConfig(
        name="ghost", transport="stdio", command=("/nonexistent/mcp-ghost",), timeout_s=5
    )
    bad_tz = McpServerConfig(
        name="badtz",
        transport="stdio",
        command=(sys.executable, "-m", "mcp_server_time", "--local-timezone", "Nowhere/X"),
        timeout_s=20,
    )
    off = McpServerConfig(name="off", transport="stdio", command=("x",), enabled=False)
    session = await store.sessions.create("test")
    root = await store.sessions.root_frame(session.id)
    ctx = _ctx(session.id, root.id, 0)
    async with _manager(store, missing, bad_tz, off) as manager:
        activate = ActivateTools(manager)
        with pytest.raises(
            ToolError, match=r"unknown group 'gmail'; available: ghost, badtz, config"
        ):
            await activate.run({"groups": ["gmail"]}, ctx)
        with pytest.raises(ToolError, match="must be an array"):
            await activate.run({"groups": "time"}, ctx)
        with pytest.raises(ToolError, match="command not found: /nonexistent/mcp-ghost"):
            await activate.run({"groups": ["config", "ghost"]}, ctx)
        with pytest.raises(
            ToolError, match=r"(?s)cannot start.*invalid --local-timezone 'Nowhere/X'"
        ):
            await activate.run({"groups": ["badtz"]}, ctx)
        with pytest.raises(ToolError, match="off is disabled"):
            await manager.tools("off")
        assert await manager.granted(session.id, None) == set()  # nothing half-granted

        # A granted server that fails to start is left out of each round, and not retried
        # at every round (the failure is remembered for a while).
        await manager.grant(session.id, None, ["badtz"])
        started = time.monotonic()
        assert await visible_mcp_tools(manager, session.id, root.id, 0) == []
        assert time.monotonic() - started < 0.5


# --- failures and notifications, with broken_server.py -------------------------------------


def _pid(text: str) -> int:
    match = re.search(r"pid (\d+)", text)
    assert match, text
    return int(match.group(1))


async def test_a_hanging_server_times_out_and_restarts(store: Store) -> None:
    async with _manager(store, BROKEN_SERVER) as manager:
        first = _pid(await manager.call("broken", "echo", {"text": "a"}))
        started = time.monotonic()
        with pytest.raises(ToolError, match="did not answer within 1 s"):
            await manager.call("broken", "hang", {}, timeout_s=1)
        assert time.monotonic() - started < 3
        second = _pid(await manager.call("broken", "echo", {"text": "b"}))
        assert second != first


async def test_a_crashing_server_fails_the_call_and_restarts(store: Store) -> None:
    async with _manager(store, BROKEN_SERVER) as manager:
        first = _pid(await manager.call("broken", "echo", {"text": "a"}))
        with pytest.raises(ToolError, match="closed the connection"):
            await manager.call("broken", "crash", {})
        second = _pid(await manager.call("broken", "echo", {"text": "b"}))
        assert second != first
        with pytest.raises(ToolError, match="it failed on purpose"):
            await manager.call("broken", "fail", {})
        with pytest.raises(ToolError, match="Field required"):  # the server's own check
            await manager.call("broken", "echo", {})


def _raw(tools: list[Any], result: Any) -> McpServerConfig:
    """tests/engine/mcp/raw_server.py, listing ``tools`` and answering ``result``."""
    return _raw_server({"TOOLS_JSON": json.dumps(tools), "RESULT_JSON": json.dumps(result)})


def _raw_server(env: dict[str, str], timeout_s: float = 15) -> McpServerConfig:
    """tests/engine/mcp/raw_server.py with ``env`` (its doc says what each variable does)."""
    return McpServerConfig(
        name="raw", transport="stdio", command=(sys.executable, RAW), env=env, timeout_s=timeout_s
    )


_PID = {"name": "pid", "inputSchema": {"type": "object"}}
_COUNTED = {
    "name": "echo",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
}


@pytest.mark.parametrize(
    ("tool", "result"),
    [
        (_COUNTED, {"content": [], "structuredContent": {"n": "x"}}),  # not its output schema
        ({"name": "echo", "inputSchema": {"type": "object"}}, {"content": [{"type": "text"}]}),
    ],
    ids=["output-schema", "malformed-block"],
)
async def test_a_result_the_client_refuses_names_no_exception_and_keeps_the_server(
    store: Store, tool: Any, result: Any
) -> None:
    """The model and the chat read "ValidationError: 12 validation errors for
    CallToolResult ...", and the server was restarted, losing its state, though it had
    answered (found by review)."""
    async with _manager(store, _raw([_PID, tool], result)) as manager:
        before = await manager.call("raw", "pid", {})
        with pytest.raises(ToolError) as refused:
            await manager.call("raw", "echo", {})
        assert "not valid MCP" in str(refused.value)
        assert not re.search(r"[A-Z][a-z]+(Error|Exception)\b", str(refused.value))
        assert await manager.call("raw", "pid", {}) == before


async def test_a_server_that_never_lists_is_not_waited_for_at_every_round(
    store: Store, tmp_path: Path
) -> None:
    """It started, then never answered tools/list: each round's listing started it again
    and waited its whole timeout (found by review). Like a failed start, it is left alone
    by the rounds for START_RETRY_S; an explicit use tries again."""
    starts = tmp_path / "starts"
    server = _raw_server({"LIST_HANGS": "1", "STARTS_FILE": str(starts)}, timeout_s=1.0)
    async with _manager(store, server) as manager:
        with pytest.raises(ToolError, match="did not answer"):
            await manager.tools("raw", passive=True)
        with pytest.raises(ToolError, match="did not answer"):
            await manager.tools("raw", passive=True)  # the next round: not started again
        assert len(starts.read_text().split()) == 1


async def test_a_server_that_gives_its_page_cursor_again_is_not_asked_for_ever(
    store: Store, tmp_path: Path
) -> None:
    """Asked for one page thousands of times until the timeout, then restarted as "did
    not answer" though it had answered every request (found by review on 2026-12-06)."""
    lists = tmp_path / "lists"
    server = _raw_server({"NEXT_CURSOR": "page2", "LISTS_FILE": str(lists)})
    async with _manager(store, server) as manager:
        with pytest.raises(ToolError, match="lists its tools without end"):
            await manager.tools("raw")
    assert len(lists.read_text().split()) == 2  # the first page, and page2 once


async def test_a_handshake_that_is_not_valid_mcp_is_said_in_a_sentence(store: Store) -> None:
    """The model and the chat read pydantic's words: the class, the echoed input and a
    link (found by review on 2026-12-06)."""
    async with _manager(store, _raw_server({"BAD_INIT": "1"})) as manager:
        with pytest.raises(ToolError) as failed:
            await manager.tools("raw")
    assert "not valid MCP" in str(failed.value)
    assert not re.search(r"validation error|pydantic|input_value", str(failed.value))


async def test_a_line_the_client_cannot_read_fails_the_call_at_once(store: Store) -> None:
    """A result holding a lone surrogate (Node writes one for a string cut inside an
    emoji) is refused by the SDK's reader as a whole: the call waited its whole timeout
    (found by review). The link goes at once, and the server is started again."""
    result = {"content": [{"type": "text", "text": "before \ud800 after"}]}
    server = _raw([_PID, {"name": "get", "inputSchema": {"type": "object"}}], result)
    async with _manager(store, replace(server, timeout_s=30)) as manager:
        first = await manager.call("raw", "pid", {})
        with pytest.raises(ToolError) as failed:
            await manager.call("raw", "get", {})
        assert "did not answer" not in str(failed.value)
        assert await manager.call("raw", "pid", {}) != first  # started again


async def test_an_answer_that_is_no_utf8_comes_with_replacement_characters(store: Store) -> None:
    """One Latin-1 byte killed the SDK's reader, and the call waited out its timeout on a
    dead connection (found by review)."""
    result = {"content": [{"type": "text", "text": "café.txt"}]}
    server = _raw([_PID, {"name": "get", "inputSchema": {"type": "object"}}], result)
    latin1 = replace(server, env={**(server.env or {}), "LATIN1": "1"}, timeout_s=30)
    async with _manager(store, latin1) as manager:
        assert await manager.call("raw", "get", {}) == "caf\ufffd.txt"


async def test_a_stray_line_of_text_keeps_the_server(store: Store) -> None:
    """A print left in a server is logged, and its calls work on the same process (each
    restarted it for a moment this session, when every unreadable line dropped the link;
    found by review)."""
    server = _raw([_PID], None)
    chatty = replace(server, env={**(server.env or {}), "CHATTY": "1"})
    async with _manager(store, chatty) as manager:
        pids = [await manager.call("raw", "pid", {}) for _ in range(3)]
        assert len(set(pids)) == 1


async def _events(store: Store, want: int) -> list[Any]:
    def select(conn: Any) -> list[Any]:
        return conn.execute(sa.select(events).order_by(events.c.id)).all()

    for _ in range(100):
        rows = await store.db.run(select)
        if len(rows) >= want:
            return rows
        await asyncio.sleep(0.02)
    return rows


async def test_server_notifications_become_events(store: Store) -> None:
    async with _manager(store, BROKEN_SERVER) as manager:
        assert await manager.call("broken", "notify_me", {"note": "hello"}) == "sent"
        rows = await _events(store, 2)
    by_type = {row.type: row for row in rows}
    log_row = by_type["notifications/message"]
    assert log_row.source == "mcp:broken"
    assert log_row.payload == {"level": "info", "logger": "broken", "data": {"note": "hello"}}
    assert not log_row.processed
    assert by_type["notifications/resources/updated"].payload == {"uri": "memo://hello"}


# --- streamable HTTP ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _serving(port: int) -> Iterator[str]:
    """broken_server.py over streamable HTTP on ``port``, until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, BROKEN, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def http_server() -> Iterator[str]:
    with _serving(_free_port()) as url:
        yield url


async def test_streamable_http_server(store: Store, http_server: str) -> None:
    server = McpServerConfig(name="web", transport="http", url=http_server, timeout_s=10)
    async with _manager(store, server) as manager:
        assert "echo" in {spec.name for spec in await manager.tools("web")}
        assert (await manager.call("web", "echo", {"text": "hi"})).startswith("hi (pid")
        assert await manager.call("web", "notify_me", {"note": "web"}) == "sent"
        rows = await _events(store, 1)
        assert any(row.source == "mcp:web" for row in rows)
        with pytest.raises(ToolError, match=r"did not answer within 0\.5 s"):
            await manager.call("web", "hang", {}, timeout_s=0.5)
        assert (await manager.call("web", "echo", {"text": "again"})).startswith("again")


async def test_an_http_server_that_restarted_is_used_again(store: Store) -> None:
    """A redeployed server forgot the MCP session and answered 404: the manager kept the
    dead session, and every call failed until chathub restarted (found by review on
    2026-12-07). The call goes to a new session; the server ran nothing of the first try."""
    port = _free_port()
    server = McpServerConfig(
        name="web", transport="http", url=f"http://127.0.0.1:{port}/mcp", timeout_s=10
    )
    async with _manager(store, server) as manager:
        with _serving(port):
            first = _pid(await manager.call("web", "echo", {"text": "a"}))
        with _serving(port):
            second = _pid(await manager.call("web", "echo", {"text": "b"}))
        assert second != first


async def test_a_server_that_died_while_idle_answers_the_next_call_on_a_new_one(
    store: Store,
) -> None:
    """Killed between calls (out of memory, a crash): the next call went to the dead
    session and failed, "it crashed or exited", though nothing had run (found by review
    on 2026-12-07). It goes to a new process."""
    async with _manager(store, BROKEN_SERVER) as manager:
        first = _pid(await manager.call("broken", "echo", {"text": "a"}))
        os.kill(first, signal.SIGKILL)
        conn = manager._conns["broken"]
        for _ in range(500):  # until its stderr's end says the process is gone
            if conn.exited:
                break
            await asyncio.sleep(0.01)
        assert conn.exited
        second = _pid(await manager.call("broken", "echo", {"text": "b"}))
        assert second != first
