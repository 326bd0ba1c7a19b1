"""The whole service (engine, hub, Telegram adapter) over each binding and the fake Bot API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.delivery import Pacing
from bot.serve import Service
from bot.settings import load_settings
from bot.telegram.bindings.factory import make_bot_api
from engine.config import AppConfig, EngineConfig, HubConfig
from engine.llm.registry import ModelRegistry
from engine.store.schema import utcnow
from tests.engine.hub.conftest import EchoModel
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage
from tests.pg import migrated_sqlite

ALICE = 111  # allowlisted
OWNER = 999
STRANGER = 555
TOKEN = "123456:TEST-TOKEN"

# No pacing waits and short retry waits: the suite checks behaviour, the bench timings.
FAST = Pacing.unpaced(backoff_s=(0.01,), max_retry_after_s=0.02)


@pytest.fixture(params=["ptb", "aiogram"])
def library(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def telegram() -> Any:
    server = FakeTelegramServer().start()
    yield server
    server.stop()


@pytest.fixture
def model() -> EchoModel:
    return EchoModel(name="primary")


def app_config(database_url: str, workspace: Path, **settings: Any) -> AppConfig:
    """The service's configuration for the contract tests (``settings`` override)."""
    values = {
        "database_url": database_url,
        "chathub_workspace": workspace,
        "chathub_timezone": "UTC",
        "_env_file": None,
        **settings,
    }
    return AppConfig(
        settings=load_settings(**values),
        models=(),
        engine=EngineConfig(max_tool_rounds=6, command_timeout_s=5),
        hub=HubConfig(idle_evict_s=600, notify_window_s=0.01),
    )


@pytest.fixture
def make_config(tmp_path: Path, telegram: FakeTelegramServer) -> Callable[..., AppConfig]:
    database_url = migrated_sqlite(tmp_path / "chathub.db")

    def make(**settings: Any) -> AppConfig:
        telegram_settings = {
            "telegram_bot_token": TOKEN,
            "telegram_api_url": telegram.base_url,
            "telegram_allowed_user_ids": str(ALICE),
            "telegram_owner_id": OWNER,
        }
        return app_config(database_url, tmp_path / "workspace", **{**telegram_settings, **settings})

    return make


@pytest.fixture
async def start_service(
    make_config: Callable[..., AppConfig], telegram: FakeTelegramServer, library: str, model
) -> Any:
    """Starts services (a second call over the same database is a restart)."""
    running: list[Service] = []

    async def start(
        *, http: bool = False, model_override: Any = None, clock: Any = None, **settings: Any
    ) -> Service:
        config = make_config(**settings)
        api = make_bot_api(library, TOKEN, telegram.base_url)
        service = Service(
            config,
            models=ModelRegistry([model_override or model]),
            api=api,
            pacing=FAST,
            http=http,
            clock=clock or utcnow,
            providers_watch_s=0.05,
        )
        await service.start()
        running.append(service)
        return service

    yield start
    for service in running:
        await stop(service)


@pytest.fixture
async def service(start_service) -> AsyncIterator[Service]:
    service = await start_service()
    yield service
    await stop(service)


async def stop(service: Service) -> None:
    if not getattr(service, "_stopped", False):
        service._stopped = True  # type: ignore[attr-defined]
        await service.stop()


async def eventually(predicate: Callable[[], Any], within_s: float = 5.0) -> Any:
    """Wait until ``predicate()`` is truthy (the fake answers over real HTTP): polled soon
    at first, then every 50 ms at most (a predicate may ask a real server, Synapse, in
    the loop the service runs in)."""
    deadline = time.monotonic() + within_s
    pause = 0.01
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in time: {getattr(predicate, '__doc__', '')}")
        await asyncio.sleep(pause)
        pause = min(pause * 1.5, 0.05)


async def eventually_true(check: Callable[[], Awaitable[bool]], within_s: float = 5.0) -> None:
    """Wait until the coroutine ``check()`` returns true (a store written meanwhile)."""
    deadline = time.monotonic() + within_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in time: {getattr(check, '__doc__', '')}")
        await asyncio.sleep(0.01)


def texts(telegram: FakeTelegramServer, chat_id: int) -> list[str]:
    return [m.text or m.caption or "" for m in telegram.messages(chat_id) if not m.deleted]


def find(telegram: FakeTelegramServer, chat_id: int, needle: str) -> SentMessage | None:
    for message in telegram.messages(chat_id):
        if needle in (message.text or ""):
            return message
    return None


@pytest.fixture
def unused_port() -> int:
    from tests.bot.process import free_port

    return free_port()
