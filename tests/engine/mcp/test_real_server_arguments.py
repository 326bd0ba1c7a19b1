"""``null`` for an optional argument, against the real npm filesystem server (issue 18/3).

The server validates with zod: ``"head": null`` is ``MCP error -32602 ... expected number,
received null``. Through chathub's ``McpTool`` the null is dropped before the call; in a
turn, the model that sent it gets the file, and the schemas it was offered are portable.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.config import AppConfig, EngineConfig, load_settings
from engine.core import Engine
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import ScriptedModel, text, tool_call
from engine.llm.tool_schemas import PortableToolSchemas
from engine.mcp import McpManager, McpServerConfig, visible_mcp_tools
from engine.session.outcomes import Final
from engine.session.turn.gate import AllowAll
from engine.store import Store
from engine.tools.base import ToolError
from engine.tools.protocols import ToolContext
from tests.engine.mcp.npm_filesystem import server_script


@pytest.fixture(scope="module")
def script() -> Path:
    found, reason = server_script()
    if found is None:
        pytest.skip(f"the npm MCP filesystem server is not available: {reason}")
    return found


@pytest.fixture
def root(tmp_path: Path) -> Path:
    files = tmp_path / "files"
    files.mkdir()
    (files / "notes.txt").write_text("one\ntwo\nthree\nfour")
    return files.resolve()


def _files(script: Path, root: Path) -> McpServerConfig:
    node = shutil.which("node")
    assert node is not None
    return McpServerConfig(
        name="files", transport="stdio", command=(node, str(script), str(root)), timeout_s=20
    )


class _Pad:
    async def set(self, key: str, value: str) -> None: ...

    async def delete(self, key: str) -> None: ...


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/t.db")
    yield store
    await store.close()


async def test_nulls_for_optional_arguments_reach_the_server_as_absent(
    store: Store, script: Path, root: Path
) -> None:
    notes = str(root / "notes.txt")
    manager = McpManager([_files(script, root)], store.db)
    try:
        # The defect as the server shows it: a null passed through is refused.
        with pytest.raises(ToolError, match=r"-32602.*expected number, received null"):
            await manager.call("files", "read_text_file", {"path": notes, "head": None})

        session = await store.sessions.create("test")
        frame = await store.sessions.root_frame(session.id)
        await manager.grant(session.id, None, ["files"])
        tools = {t.name: t for t in await visible_mcp_tools(manager, session.id, frame.id, 0)}
        read = tools["mcp__files__read_text_file"]
        ctx = ToolContext(
            session_id=session.id,
            stack_id=frame.id,
            agent_id="main",
            depth=0,
            working_directory=root,
            scratchpad=_Pad(),
        )

        assert (
            await read.run({"path": notes, "head": None, "tail": None}, ctx)
            == "one\ntwo\nthree\nfour"
        )
        assert await read.run({"path": notes, "head": 2, "tail": None}, ctx) == "one\ntwo"
        # A required argument given null is kept: the model reads a plain error.
        with pytest.raises(ToolError) as refused:
            await read.run({"path": None}, ctx)
        assert str(refused.value) == (
            "mcp__files__read_text_file: argument 'path' must be a string, got null"
        )
        # Sent as is, the server's own refusal is just as plain.
        with pytest.raises(ToolError, match=r"expected string, received null at path$"):
            await manager.call("files", "read_text_file", {"path": None})
    finally:
        await manager.close()


async def test_in_a_turn_the_model_gets_the_file_and_portable_schemas(
    tmp_path: Path, script: Path, root: Path
) -> None:
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}",
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="UTC",
        _env_file=None,
    )
    config = AppConfig(
        settings=settings,
        models=(),
        engine=EngineConfig(max_tool_rounds=6),
        mcp_servers=(_files(script, root),),
    )
    model = ScriptedModel(name="gemini")
    args = {"path": str(root / "notes.txt"), "head": None, "tail": 1}
    model.add(
        tool_call("activate_tools", json.dumps({"groups": ["files"]}), "a"),
        tool_call("mcp__files__read_text_file", json.dumps(args), "r"),
        text("The last line is four."),
    )
    models = ModelRegistry([PortableToolSchemas(model)])
    engine = await Engine.open(config, models=models, policy=AllowAll())
    try:
        handler = await engine.new_session("console")
        result = await handler.handle_message("what is the last line of notes.txt?")
    finally:
        await engine.close()

    assert isinstance(result, Final)
    [read] = [t for t in model.requests[1][1] if t["function"]["name"].endswith("read_text_file")]
    parameters = read["function"]["parameters"]
    assert "$schema" not in json.dumps(parameters)
    assert parameters["properties"]["head"]["type"] == "number"
    [answer] = [m["content"] for m in model.requests[2][0] if m.get("tool_call_id") == "r"]
    assert answer == "four"
