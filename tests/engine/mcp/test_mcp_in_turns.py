"""MCP inside real turns: invisible until activate_tools, visible from the next round."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine.approval import OPERATOR
from engine.config import AppConfig, EngineConfig, load_settings
from engine.core import Engine
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import ScriptedModel, text, tool_call
from engine.mcp.config import McpServerConfig
from engine.session import events as ev
from engine.session.outcomes import Cancelled, Final
from engine.session.turn.gate import AllowAll
from tests.engine.session.helpers import start_until

TIME = McpServerConfig(
    name="time",
    transport="stdio",
    command=(sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"),
    env=None,
    url=None,
    headers=None,
    timeout_s=20,
)


async def open_engine(tmp_path: Path, model: ScriptedModel, policy: Any = None) -> Engine:
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}",
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="UTC",
        _env_file=None,
    )
    config = AppConfig(
        settings=settings, models=(), engine=EngineConfig(max_tool_rounds=6), mcp_servers=(TIME,)
    )
    return await Engine.open(config, models=ModelRegistry([model]), policy=policy)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    engine = await open_engine(tmp_path, ScriptedModel(name="primary"), AllowAll())
    yield engine
    await engine.close()


def offered(model: ScriptedModel, index: int) -> list[str]:
    return [t["function"]["name"] for t in model.requests[index][1]]


async def test_a_server_s_tools_appear_from_the_round_after_activation(engine: Engine):
    model = engine.models.candidates(None)[0]
    assert isinstance(model, ScriptedModel)
    args = {"timezone": "Europe/Rome"}
    model.add(
        tool_call("activate_tools", json.dumps({"groups": ["time"]}), "a"),
        tool_call("mcp__time__get_current_time", json.dumps(args), "t"),
        text("It is evening in Rome."),
    )
    handler = await engine.new_session("console")

    result = await handler.handle_message("what time is it in Rome?")

    assert isinstance(result, Final)
    assert "mcp__time__get_current_time" not in offered(model, 0)
    assert "activate_tools" in offered(model, 0)
    assert "mcp__time__get_current_time" in offered(model, 1)  # the same turn, next round
    time_result = [m["content"] for m in model.requests[2][0] if m["role"] == "tool"][-1]
    assert "Europe/Rome" in time_result
    # granted for the session: the next turn sees the tools from its first round
    model.add(text("ok"))
    await handler.handle_message("thanks")
    assert "mcp__time__get_current_time" in offered(model, 3)


async def test_a_task_agents_tools_list_holds_for_a_server_it_activates(engine: Engine):
    """researcher ("never changes anything"; tools: read_file, list_files, …) activated a
    server itself and was offered all of its tools (found by review)."""
    model = engine.models.candidates(None)[0]
    assert isinstance(model, ScriptedModel)
    model.add(
        tool_call("execute_subtask", json.dumps({"agent_id": "researcher", "prompt": "look"})),
        tool_call("activate_tools", json.dumps({"groups": ["time"]}), "a"),  # the researcher
        text("found nothing"),
        text("done"),  # the root again
    )
    handler = await engine.new_session("cron", is_interactive=False)
    await handler.handle_message("research")
    researcher = offered(model, 2)  # its round after the activation
    assert "read_file" in researcher and "write_file" not in researcher
    assert not [name for name in researcher if name.startswith("mcp__")]
    told = [m["content"] for m in model.requests[2][0] if m["role"] == "tool"][-1]
    assert "mcp__time" not in told  # nor is it told of them


async def test_activating_an_unknown_group_is_a_tool_error(engine: Engine):
    model = engine.models.candidates(None)[0]
    model.add(tool_call("activate_tools", json.dumps({"groups": ["gmail"]}), "a"), text("ok"))
    handler = await engine.new_session("console")
    await handler.handle_message("read my mail")
    [error] = [m["content"] for m in model.requests[1][0] if m["role"] == "tool"]
    assert error.startswith("Error:") and "gmail" in error and "time" in error


async def test_a_call_approved_after_a_restart_runs_on_its_server(tmp_path: Path):
    """The resumed turn knew only the built-in tools: the approved call failed as an
    unknown tool and never reached the server (found by review)."""
    model = ScriptedModel(name="primary")
    args = {"timezone": "Europe/Rome"}
    model.add(
        tool_call("activate_tools", json.dumps({"groups": ["time"]}), "a"),
        tool_call("mcp__time__get_current_time", json.dumps(args), "t"),
        text("It is evening in Rome."),
    )
    first = await open_engine(tmp_path, model)  # the rules ask before an MCP call
    handler = await first.new_session("telegram:-100")
    turn, request = await start_until(
        lambda emit: handler.handle_message("time in Rome?", emit=emit), ev.ApprovalRequired, []
    )
    assert request.name == "mcp__time__get_current_time"
    turn.cancel()
    await first.close()  # the process stops while the card waits

    again = await open_engine(tmp_path, model)
    try:
        decided = await again.approve(request.tool_call_id, decider=OPERATOR)
        assert decided.resumed is not None
        assert isinstance(await asyncio.wait_for(decided.resumed, 20), Final)
        call = await again.store.history.get_tool_call(request.tool_call_id)
        assert call is not None and call.status == "done", call
        assert "Europe/Rome" in (call.result or "")
    finally:
        await again.close()


async def test_stop_while_a_round_starts_a_silent_server_stops_at_once(tmp_path: Path):
    """A granted server that never answers its handshake: the round waited out its
    timeout (30 s by default) before /stop took (found by review on 2026-12-07)."""
    started = tmp_path / "started"
    mute = McpServerConfig(
        name="mute",
        transport="stdio",
        command=(
            sys.executable,
            "-c",
            f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(120)",
        ),
        env=None,
        url=None,
        headers=None,
        timeout_s=120,
    )
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}",
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="UTC",
        _env_file=None,
    )
    config = AppConfig(settings=settings, models=(), engine=EngineConfig(), mcp_servers=(mute,))
    model = ScriptedModel([text("hi")], name="primary")
    engine = await Engine.open(config, models=ModelRegistry([model]), policy=AllowAll())
    try:
        handler = await engine.new_session("console")
        await engine.mcp.grant(handler.session.id, None, ["mute"])  # activated earlier
        turn = asyncio.create_task(handler.handle_message("hello"))
        for _ in range(3000):  # until the round is starting the server
            if started.exists():
                break
            await asyncio.sleep(0.01)
        handler.cancel()  # /stop
        result = await asyncio.wait_for(turn, 30)  # a guard: the fix takes no time
        assert isinstance(result, Cancelled)
        assert not model.requests  # the model was never asked
    finally:
        await engine.close()
