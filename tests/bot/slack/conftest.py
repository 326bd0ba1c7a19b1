"""The service with Slack against the fake Slack (real HTTP and a real WebSocket)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.delivery import Pacing
from bot.serve import Service
from engine.llm.registry import ModelRegistry
from tests.bot.telegram_contract.conftest import app_config
from tests.engine.hub.conftest import EchoModel
from tests.fakes.slack_server import OWNER_ID, FakeSlackServer
from tests.pg import migrated_sqlite

OWNER = OWNER_ID
ALICE = "U0ALICE001"
BOB = "U0BOB00001"  # a stranger
GENERAL = "C0GENERAL1"
TIMEOUT = 10.0


async def until(condition: Callable[[], object], within_s: float = TIMEOUT) -> None:
    """Wait until ``condition()`` holds: the fake runs on its own loop."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the condition")
        await asyncio.sleep(0.005)


@pytest.fixture
def fake() -> Iterator[FakeSlackServer]:
    with FakeSlackServer(ack_timeout=1.0, retry_delays=(0.0, 0.2, 0.5)) as server:
        server.add_user(ALICE, "alice", "Alice")
        server.add_user(BOB, "bob", "Bob")
        server.add_channel(GENERAL, "general", members=[ALICE, BOB, OWNER])
        yield server


@pytest.fixture
def model() -> EchoModel:
    return EchoModel(name="primary")


MakeService = Callable[..., Awaitable[Service]]


@pytest.fixture
async def make_service(
    tmp_path: Path, fake: FakeSlackServer, model: EchoModel
) -> AsyncIterator[MakeService]:
    """``chathub serve`` with only Slack configured (Socket Mode unless told), connected."""
    database_url = migrated_sqlite(tmp_path / "chathub.db")
    services: list[Service] = []

    async def make(
        *, ready: bool = True, http: bool = False, pacing: Pacing | None = None, **settings: Any
    ) -> Service:
        values = {
            "slack_bot_token": fake.bot_token,
            "slack_app_token": fake.app_token,
            "slack_api_url": fake.api_url,
            "slack_owner_id": OWNER,
            "slack_allowed_user_ids": ALICE,
            **settings,
        }
        config = app_config(database_url, tmp_path / "workspace", **values)
        service = Service(
            config,
            models=ModelRegistry([model]),
            http=http,
            slack_pacing=pacing or Pacing.unpaced(),
            slack_ping_interval_s=0.5,
        )
        await service.start()
        services.append(service)
        if ready:
            if values.get("slack_app_token"):
                await until(lambda: fake.ready_connections >= 1 or service.refused.done())
            else:
                await until(lambda: slack_of(service).me.user_id or service.refused.done())
        return service

    yield make
    for service in services:
        await service.stop()


def slack_of(service: Service) -> Any:
    assert service.slack is not None and service.slack.adapter is not None
    return service.slack.adapter


def texts(fake: FakeSlackServer, channel: str, thread_ts: str | None = None) -> list[str]:
    return [m.text for m in fake.messages(channel, thread_ts=thread_ts)]
