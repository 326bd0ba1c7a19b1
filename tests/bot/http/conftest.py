"""Fixtures of the HTTP tests: a real engine (SQLite file, default rules), hub and scheduler."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.schema import LAYERS
from bot.settings import load_settings
from engine.config import AppConfig, EngineConfig
from engine.core import Engine
from engine.hub import ChatHub
from engine.llm.registry import ModelRegistry
from engine.store import Store
from scheduler.service import Scheduler
from tests.clock import FakeClock
from tests.engine.hub.conftest import EchoModel


@pytest.fixture
def model() -> EchoModel:
    return EchoModel(name="primary")


@pytest.fixture
async def engine(tmp_path: Path, model: EchoModel) -> AsyncIterator[Engine]:
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}",
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="UTC",
        _env_file=None,
    )
    config = AppConfig(
        settings=settings, models=(), engine=EngineConfig(max_tool_rounds=6, command_timeout_s=5)
    )
    store = await Store.open(settings.database_url, LAYERS)  # every layer's tables
    engine = await Engine.open(config, models=ModelRegistry([model]), store=store)  # default rules
    yield engine
    await engine.close()


@pytest.fixture
async def scheduler(engine: Engine, hub: ChatHub) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(engine, hub, timezone="UTC", clock=FakeClock(), owner="api-test")
    yield scheduler
    await scheduler.close()
