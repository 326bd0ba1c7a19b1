"""The service with Discord against the fake Discord API (real HTTP and WebSocket)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import discord
import pytest
from discord.gateway import DiscordWebSocket

from bot.delivery import Pacing
from bot.serve import Service
from engine.llm.registry import ModelRegistry
from engine.store import utcnow
from tests.bot.telegram_contract.conftest import app_config
from tests.engine.hub.conftest import EchoModel
from tests.fakes.discord_server import FakeDiscordServer
from tests.pg import migrated_sqlite

TOKEN = "test-discord-bot-token"
OWNER = 200_000_000_000_000_009
ALICE = 200_000_000_000_000_001
BOB = 200_000_000_000_000_002  # a stranger
GUILD = 300_000_000_000_000_001
GENERAL = 300_000_000_000_000_002
OTHER_GUILD = 300_000_000_000_000_011
OTHER_CHANNEL = 300_000_000_000_000_012
TIMEOUT = 10.0


async def until(condition: Callable[[], object], within_s: float = TIMEOUT) -> None:
    """Wait until ``condition()`` holds: the fake runs on its own loop."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the condition")
        await asyncio.sleep(0.005)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDiscordServer]:
    with FakeDiscordServer(token=TOKEN) as server:
        server.add_user(OWNER, username="owner", global_name="Owner")
        server.add_user(ALICE, username="alice", global_name="Alice")
        server.add_user(BOB, username="bob", global_name="Bob")
        server.add_guild(GUILD, channels=[GENERAL], name="Home", members=[ALICE, BOB, OWNER])
        server.add_guild(OTHER_GUILD, channels=[OTHER_CHANNEL], name="Elsewhere", members=[ALICE])
        # The service points discord.py at the fake; restored after the test.
        monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
        monkeypatch.setattr(DiscordWebSocket, "DEFAULT_GATEWAY", DiscordWebSocket.DEFAULT_GATEWAY)
        yield server


@pytest.fixture
def model() -> EchoModel:
    return EchoModel(name="primary")


MakeService = Callable[..., Awaitable[Service]]


@pytest.fixture
async def make_service(
    tmp_path: Path, fake: FakeDiscordServer, model: EchoModel
) -> AsyncIterator[MakeService]:
    """``chathub serve`` with only Discord configured, ready on the gateway."""
    database_url = migrated_sqlite(tmp_path / "chathub.db")
    services: list[Service] = []

    async def make(
        *,
        ready: bool = True,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        **settings: Any,
    ) -> Service:
        """``sleep``: the login's waits (None: asyncio's)."""
        values = {
            "discord_bot_token": TOKEN,
            "discord_api_url": fake.base_url,
            "discord_owner_id": str(OWNER),
            "discord_allowed_user_ids": str(ALICE),
            "discord_guild_ids": str(GUILD),
            **settings,
        }
        config = app_config(database_url, tmp_path / "workspace", **values)
        service = Service(
            config,
            models=ModelRegistry([model]),
            http=False,
            discord_pacing=Pacing.unpaced(),
            discord_identify_gap_s=0.0,
            **({"discord_sleep": sleep} if sleep is not None else {}),
        )
        await service.start()
        services.append(service)
        if ready:
            await until(lambda: discord_of(service).bot.is_ready() or service.refused.done())
        return service

    yield make
    for service in services:
        await service.stop()


def discord_of(service: Service) -> Any:
    assert service.discord is not None and service.discord.adapter is not None
    return service.discord.adapter


def texts(fake: FakeDiscordServer, channel: int | str) -> list[str]:
    return [m.content for m in fake.messages(channel, include_deleted=False)]


async def stored(service: Service, message_id: str) -> None:
    """Until the bot has stored the gateway's message ``message_id``."""
    events = discord_of(service).events
    for _ in range(2000):
        if any(
            p["message_id"] == message_id
            for p in await events.recent(utcnow() - timedelta(hours=1), 20)
        ):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"message {message_id} was never stored")


async def answered_then_down(fake: FakeDiscordServer, make_service: MakeService) -> str:
    """Alice's DM answered, the service stopped, one more DM written while it was down;
    the DM channel's id."""
    service = await make_service()
    channel = fake.dm(ALICE, "one")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: one"])
    await service.stop()
    fake.dm(ALICE, "two (while down)", offline=True)
    return str(channel)
