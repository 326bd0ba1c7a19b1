"""One fake Bot API server per module, reset around each test; each binding over it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from bot.telegram.bindings.factory import make_bot_api
from bot.telegram.sending.api import BotApi
from tests.fakes.telegram_server import FakeTelegramServer

TOKEN = "123456:TEST-token"


@pytest.fixture(scope="module")
def _server() -> Iterator[FakeTelegramServer]:
    with FakeTelegramServer() as server:
        yield server


@pytest.fixture
def fake(_server: FakeTelegramServer) -> Iterator[FakeTelegramServer]:
    _server.reset()
    yield _server
    _server.reset()


@pytest.fixture(params=["ptb", "aiogram"])
async def api(request: pytest.FixtureRequest, fake: FakeTelegramServer) -> AsyncIterator[BotApi]:
    bot_api = make_bot_api(request.param, TOKEN, fake.base_url)
    try:
        yield bot_api
    finally:
        await bot_api.close()
