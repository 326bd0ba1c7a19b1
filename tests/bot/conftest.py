"""Fixtures for tests that run ``chathub serve`` as a process against the fakes, and a
real engine and hub in the test's loop (the web chat's, the terminal's)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from bot.schema import LAYERS
from bot.settings import load_config, load_settings
from engine.config import EngineConfig, HubConfig
from engine.core import Engine
from engine.hub import ChatHub
from engine.store import Store
from tests.bot.matrix.homeserver import Homeserver, unavailable
from tests.bot.process import ALICE, free_port, service_env
from tests.engine.hub.conftest import ManualSleep
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeTelegramServer


@pytest.fixture
def telegram() -> Iterator[FakeTelegramServer]:
    server = FakeTelegramServer().start()
    yield server
    server.stop()


@pytest.fixture
def serve(tmp_path: Path, telegram: FakeTelegramServer, fake_openai: FakeOpenAIServer):
    children: list[subprocess.Popen[str]] = []

    def start(**env: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=service_env(
                tmp_path,
                fake_openai.base_url,
                **{
                    "TELEGRAM_BOT_TOKEN": "123456:TEST",
                    "TELEGRAM_API_URL": telegram.base_url,
                    "TELEGRAM_ALLOWED_USER_IDS": str(ALICE),
                    "HTTP_PORT": str(free_port()),
                    **env,
                },
            ),
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        if child.stderr:
            child.stderr.close()


@pytest.fixture(scope="session")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    """A real Synapse for the Matrix tests, started once per session and worker."""
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    server = Homeserver(tmp_path_factory.mktemp("synapse"))
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"Synapse could not start here: {exc}")
    yield server
    server.stop()


@pytest.fixture
def fallback_models() -> list[str]:
    """``LLM_FALLBACK_MODELS`` (a module overrides this fixture to have some)."""
    return []


@pytest.fixture
async def engine(
    tmp_path: Path, fake_openai: FakeOpenAIServer, fallback_models: list[str]
) -> AsyncIterator[Engine]:
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}",
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="UTC",
        llm_base_url=fake_openai.base_url,
        llm_model="fake-model",
        llm_fallback_models=fallback_models,
        _env_file=None,
    )
    config = replace(
        load_config(settings), engine=EngineConfig(max_tool_rounds=6, command_timeout_s=20)
    )
    # Every layer and the web chat's (until bot/schema.py lists it).
    store = await Store.open(settings.database_url, LAYERS)
    engine = await Engine.open(config, store=store)  # default rules: writes and commands ask
    yield engine
    await engine.close()


@pytest.fixture
async def hub(engine: Engine) -> AsyncIterator[ChatHub]:
    hub = ChatHub(engine, HubConfig(idle_evict_s=600), sleep=ManualSleep())
    await hub.start()
    yield hub
    await hub.close()
