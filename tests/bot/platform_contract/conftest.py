"""One driver per platform; the platform-neutral scenarios run over each of them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import discord
import pytest
from discord.gateway import DiscordWebSocket

from bot.serve import Service
from bot.telegram.bindings.factory import make_bot_api
from engine.config import AppConfig
from engine.llm.registry import ModelRegistry
from tests.bot.discord.conftest import ALICE as DISCORD_ALICE
from tests.bot.discord.conftest import OWNER as DISCORD_OWNER
from tests.bot.discord.conftest import TOKEN as DISCORD_TOKEN
from tests.bot.matrix.conftest import Accounts
from tests.bot.matrix.homeserver import Homeserver
from tests.bot.platform_contract.discord_driver import DiscordDriver
from tests.bot.platform_contract.driver import PlatformDriver
from tests.bot.platform_contract.matrix_driver import MatrixDriver
from tests.bot.platform_contract.slack_driver import SlackDriver
from tests.bot.platform_contract.telegram_driver import TelegramDriver
from tests.bot.platform_contract.terminal_driver import TerminalDriver
from tests.bot.platform_contract.webchat_driver import WebChatDriver
from tests.bot.process import free_port
from tests.bot.slack.conftest import ALICE as SLACK_ALICE
from tests.bot.telegram_contract.conftest import (  # noqa: F401 (telegram: a fixture)
    ALICE,
    FAST,
    OWNER,
    TOKEN,
    app_config,
    eventually,
    telegram,
)
from tests.engine.hub.conftest import EchoModel
from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.slack_server import OWNER_ID as SLACK_OWNER
from tests.fakes.slack_server import FakeSlackServer
from tests.fakes.telegram_server import FakeTelegramServer
from tests.pg import migrated_sqlite

PLATFORMS = [
    "telegram-ptb",
    "telegram-aiogram",
    "terminal",
    "webchat",
    "discord",
    "slack",
    "matrix",
]

MakeDriver = Callable[..., Awaitable[PlatformDriver]]


@pytest.fixture(params=PLATFORMS)
def platform(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def model() -> EchoModel:
    return EchoModel(name="primary")


@pytest.fixture
async def make_driver(
    request: pytest.FixtureRequest, platform: str, tmp_path: Path, model: EchoModel
) -> AsyncIterator[MakeDriver]:
    """Starts the platform's service and its driver (``settings`` override the config)."""
    database_url = migrated_sqlite(tmp_path / "chathub.db")
    workspace = tmp_path / "workspace"
    models = ModelRegistry([model])
    drivers: list[PlatformDriver] = []

    async def make(**settings: Any) -> PlatformDriver:
        config = partial(app_config, database_url, workspace)
        driver: PlatformDriver
        if platform == "terminal":
            driver = terminal_driver(lambda: config(**settings), models, workspace)
        elif platform == "webchat":
            driver = webchat_driver(config, settings, models, workspace)
        elif platform == "discord":
            fake_discord: FakeDiscordServer = request.getfixturevalue("discord_fake")
            discord_settings = {
                "discord_bot_token": DISCORD_TOKEN,
                "discord_api_url": fake_discord.base_url,
                "discord_allowed_user_ids": str(DISCORD_ALICE),
                "discord_owner_id": str(DISCORD_OWNER),
            }
            driver = discord_driver(
                lambda: config(**{**discord_settings, **settings}), models, workspace, fake_discord
            )
        elif platform == "matrix":
            homeserver: Homeserver = request.getfixturevalue("homeserver")
            accounts = matrix_accounts(homeserver)
            matrix_settings = {
                "matrix_homeserver": homeserver.url,
                "matrix_user_id": accounts.bot.user_id,
                "matrix_access_token": accounts.bot.token,
                "matrix_allowed_user_ids": accounts.alice.user_id,
                "matrix_owner_id": accounts.owner.user_id,
            }
            driver = matrix_driver(
                lambda: config(**{**matrix_settings, **settings}), models, workspace, accounts
            )
        elif platform == "slack":
            fake_slack: FakeSlackServer = request.getfixturevalue("slack_fake")
            slack_settings = {
                "slack_bot_token": fake_slack.bot_token,
                "slack_app_token": fake_slack.app_token,
                "slack_api_url": fake_slack.api_url,
                "slack_allowed_user_ids": SLACK_ALICE,
                "slack_owner_id": SLACK_OWNER,
            }
            driver = slack_driver(
                lambda: config(**{**slack_settings, **settings}), models, workspace, fake_slack
            )
        else:
            fake: FakeTelegramServer = request.getfixturevalue("telegram")
            library = platform.removeprefix("telegram-")
            telegram_settings = {
                "telegram_bot_token": TOKEN,
                "telegram_api_url": fake.base_url,
                "telegram_allowed_user_ids": str(ALICE),
                "telegram_owner_id": OWNER,
            }
            driver = telegram_driver(
                lambda: config(**{**telegram_settings, **settings}),
                models,
                workspace,
                library,
                fake,
            )
        await driver.start()
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        await driver.close()


def terminal_driver(
    config: Callable[[], AppConfig], models: ModelRegistry, workspace: Path
) -> TerminalDriver:
    """``chathub serve`` at a terminal with no Telegram token: the hub and the chat."""

    async def start() -> Service:
        service = Service(config(), models=models, http=False, console=True)
        await service.start()
        return service

    return TerminalDriver(start, workspace)


def webchat_driver(
    config: Callable[..., AppConfig],
    settings: dict[str, Any],
    models: ModelRegistry,
    workspace: Path,
) -> WebChatDriver:
    """``chathub serve`` with no Telegram token and no terminal: its HTTP app on 127.0.0.1
    (a free port, kept across a restart as a bookmarked page's), no API token (loopback
    lets the page in without a sign-in)."""
    port = free_port()
    http = {"http_host": "127.0.0.1", "http_port": port, "chathub_api_token": None}

    async def start() -> Service:
        service = Service(config(**{**http, **settings}), models=models, http=True)
        await service.start()
        return service

    return WebChatDriver(start, workspace, port)


def telegram_driver(
    config: Callable[[], AppConfig],
    models: ModelRegistry,
    workspace: Path,
    library: str,
    fake: FakeTelegramServer,
) -> TelegramDriver:
    """The service over one binding and the fake Bot API, unpaced."""

    async def start() -> Service:
        api = make_bot_api(library, TOKEN, fake.base_url)
        service = Service(config(), models=models, api=api, pacing=FAST, http=False)
        await service.start()
        return service

    return TelegramDriver(library, fake, start, workspace)


def discord_driver(
    config: Callable[[], AppConfig],
    models: ModelRegistry,
    workspace: Path,
    fake: FakeDiscordServer,
) -> DiscordDriver:
    """The service with only Discord configured, unpaced, over the fake Discord; start
    returns once the gateway is ready."""

    async def start() -> Service:
        service = Service(
            config(),
            models=models,
            http=False,
            discord_pacing=FAST,
            discord_identify_gap_s=0.0,
        )
        await service.start()
        assert service.discord is not None and service.discord.adapter is not None
        adapter = service.discord.adapter
        await eventually(lambda: adapter.bot.is_ready())
        return service

    return DiscordDriver(fake, start, workspace)


def matrix_accounts(homeserver: Homeserver) -> Accounts:
    tag = uuid.uuid4().hex[:8]
    people = [homeserver.register(f"{who}{tag}") for who in ("bot", "owner", "alice", "bob")]
    return Accounts(*people)


def matrix_driver(
    config: Callable[[], AppConfig],
    models: ModelRegistry,
    workspace: Path,
    accounts: Accounts,
) -> MatrixDriver:
    """The service with only Matrix configured, unpaced, on the session's Synapse; start
    returns once it syncs."""

    async def start() -> Service:
        service = Service(
            config(), models=models, http=False, matrix_pacing=FAST, matrix_sync_timeout_ms=2000
        )
        await service.start()
        matrix = service.matrix
        assert matrix is not None
        await eventually(lambda: matrix.state() == "ok", 15)
        return service

    return MatrixDriver(accounts, start, workspace)


def slack_driver(
    config: Callable[[], AppConfig],
    models: ModelRegistry,
    workspace: Path,
    fake: FakeSlackServer,
) -> SlackDriver:
    """The service with only Slack configured (Socket Mode), unpaced, over the fake Slack;
    start returns once the socket is open."""

    async def start() -> Service:
        connections = fake.ready_connections
        service = Service(
            config(), models=models, http=False, slack_pacing=FAST, slack_ping_interval_s=0.5
        )
        await service.start()
        await eventually(lambda: fake.ready_connections > connections or None)
        return service

    return SlackDriver(fake, start, workspace)


@pytest.fixture
def slack_fake() -> Iterator[FakeSlackServer]:
    """The fake Slack with Alice (and its owner)."""
    with FakeSlackServer(ack_timeout=1.0, retry_delays=(0.0, 0.2, 0.5)) as server:
        server.add_user(SLACK_ALICE, "alice", "Alice")
        yield server


@pytest.fixture
def discord_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDiscordServer]:
    """The fake Discord with Alice and the owner; discord.py's base URLs restored after."""
    with FakeDiscordServer(token=DISCORD_TOKEN) as server:
        server.add_user(DISCORD_ALICE, username="alice", global_name="Alice")
        server.add_user(DISCORD_OWNER, username="owner", global_name="Owner")
        monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
        monkeypatch.setattr(DiscordWebSocket, "DEFAULT_GATEWAY", DiscordWebSocket.DEFAULT_GATEWAY)
        yield server


@pytest.fixture
async def driver(make_driver: MakeDriver) -> PlatformDriver:
    return await make_driver()


# -- scenarios that are not (yet) on every platform ------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "only_on(*platforms): the scenario runs on these platforms only"
    )
    config.addinivalue_line(
        "markers",
        "fails_on(*platforms, reason): a known gap there (a strict xfail on those platforms)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``only_on``: the other platforms' items are deselected. ``fails_on``: a strict xfail
    on those platforms, so passing there fails the run and the mark goes as soon as the gap
    is closed."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        platform = callspec.params.get("platform") if callspec is not None else None
        only = item.get_closest_marker("only_on")
        if platform is not None and only is not None and platform not in only.args:
            dropped.append(item)
            continue
        gap = item.get_closest_marker("fails_on")
        if gap is not None and platform in gap.args:
            item.add_marker(pytest.mark.xfail(strict=True, reason=gap.kwargs["reason"]))
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
