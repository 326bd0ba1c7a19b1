"""An engine over a real SQLite file, a real workspace and an in-process scripted model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from engine.config import AppConfig, EngineConfig, load_settings
from engine.core import Engine
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import ScriptedModel
from engine.session.turn.gate import AllowAll
from tests.pg import migrated_sqlite


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel(name="primary")


@pytest.fixture
def limits() -> EngineConfig:
    return EngineConfig(max_tool_rounds=6, max_tool_result_chars=200, command_timeout_s=5)


@pytest.fixture
async def engine(
    tmp_path: Path, model: ScriptedModel, limits: EngineConfig
) -> AsyncIterator[Engine]:
    settings = load_settings(
        database_url=migrated_sqlite(tmp_path / "chathub.db"),
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="Europe/Rome",
        _env_file=None,
    )
    config = AppConfig(settings=settings, models=(), engine=limits)
    # The turn tests run every call; the approval tests bring their own engine with rules.
    engine = await Engine.open(config, models=ModelRegistry([model]), policy=AllowAll())
    yield engine
    await engine.close()


@pytest.fixture
async def open_engine(
    tmp_path: Path, model: ScriptedModel, limits: EngineConfig
) -> AsyncIterator[Callable[[], Awaitable[Engine]]]:
    """Opens engines with the default rules over one database: a second open is a restart."""
    settings = load_settings(
        database_url=migrated_sqlite(tmp_path / "chathub.db"),
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="UTC",
        _env_file=None,
    )
    config = AppConfig(settings=settings, models=(), engine=limits)
    opened: list[Engine] = []

    async def open_() -> Engine:
        engine = await Engine.open(config, models=ModelRegistry([model]))
        opened.append(engine)
        return engine

    yield open_
    for engine in opened:
        await engine.close()
