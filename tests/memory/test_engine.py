"""Through a real engine: turns publish on the bus, the memory service indexes them, and
``search_sessions`` (registered on the engine) answers one chat with its own past only:
asserted on the exact requests the model receives."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.config import AppConfig, EngineConfig, load_settings
from engine.core import Engine
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import ScriptedModel, text, tool_call
from engine.session.turn.gate import AllowAll
from engine.store import Store
from memory.service import MemoryService
from memory.tools import memory_tools
from tests.memory.conftest import MEMORY_LAYERS


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel(name="primary")


@pytest.fixture
async def engine(store_url: str, tmp_path: Path, model: ScriptedModel) -> AsyncIterator[Engine]:
    settings = load_settings(
        database_url=store_url,
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="UTC",
        _env_file=None,
    )
    config = AppConfig(settings=settings, models=(), engine=EngineConfig(max_tool_rounds=4))
    store = await Store.open(store_url, MEMORY_LAYERS)
    engine = await Engine.open(
        config, models=ModelRegistry([model]), policy=AllowAll(), store=store
    )
    yield engine
    await engine.close()


@pytest.fixture
async def memory(engine: Engine) -> AsyncIterator[MemoryService]:
    # The wiring bot/serve.py gets: start after the engine, register the tool, close first.
    service = MemoryService(engine.store.db, engine.bus)
    await service.start()
    for tool in memory_tools(engine.store, service):
        engine.tools.register(tool)
    yield service
    await service.close()


def tool_results(model: ScriptedModel) -> list[dict[str, object]]:
    messages, _tools = model.requests[-1]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


async def test_each_chat_searches_its_own_past_only(
    engine: Engine, memory: MemoryService, model: ScriptedModel
) -> None:
    alice = await engine.new_session("telegram:1", title="dinner plans")
    model.add(text("Noted: no meat."))
    await alice.handle_message("I'm vegetarian, keep that in mind for the dinner")
    await memory.settled()

    bob = await engine.new_session("telegram:2")
    model.add(tool_call("search_sessions", '{"query": "vegetarian dinner"}', "c1"), text("no"))
    await bob.handle_message("what did I say about dinner?")
    assert tool_results(model) == [{"results": []}]
    assert all("vegetarian" not in str(m["content"]) for m in model.requests[-1][0][1:-1])

    later = await engine.new_session("telegram:1")  # alice again, in a new conversation
    model.add(tool_call("search_sessions", '{"query": "vegetarian dinner"}', "c2"), text("yes"))
    await later.handle_message("what did I say about dinner?")
    [found] = tool_results(model)
    assert [r["title"] for r in found["results"]][:1] == ["dinner plans"]  # type: ignore[index]
    assert "[vegetarian]" in found["results"][0]["snippet"]  # type: ignore[index]
    await memory.settled()
    assert "search_sessions" in [t["function"]["name"] for t in model.requests[-1][1]]
