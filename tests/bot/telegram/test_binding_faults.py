"""Both bindings under the fake Bot API's faults: what each answer becomes in the core.

The libraries disagree on the odd answers (aiogram ignores a 429 whose ``retry_after`` is
0 and cannot parse one that is not an integer; python-telegram-bot takes any number as
given and reports a non-JSON answer as a bare ``TelegramError``): every one of them must
come out as the same core error, with a sane wait.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from bot.delivery.errors import RETRY_AFTER_DEFAULT_S, RETRY_AFTER_MAX_S, RETRY_AFTER_MIN_S
from bot.telegram.sending.api import BotApi, NetworkError, RetryAfter, ServerError
from bot.telegram.sending.errors import NotFound, Unauthorized
from tests.fakes.telegram_server import OMIT, FakeTelegramServer

TOKEN = "123456:TEST-token"
CHAT = 42


@pytest.mark.parametrize(
    ("sent", "seconds"),
    [
        (0, RETRY_AFTER_MIN_S),  # "now": still not a hammering loop
        (-5, RETRY_AFTER_MIN_S),
        (10**9, RETRY_AFTER_MAX_S),  # capped
        ("soon", RETRY_AFTER_DEFAULT_S),  # not a number
        ([3], RETRY_AFTER_DEFAULT_S),
        (True, RETRY_AFTER_DEFAULT_S),
        (OMIT, RETRY_AFTER_DEFAULT_S),  # a 429 that names no wait
        ("12", 12.0),  # a number in a string is still that number
        (1.5, 1.5),
    ],
    ids=["zero", "negative", "huge", "word", "list", "bool", "missing", "string", "fraction"],
)
async def test_a_429s_retry_after_becomes_a_sane_wait(
    api: BotApi, fake: FakeTelegramServer, sent: Any, seconds: float
) -> None:
    fake.fail_next("sendMessage", retry_after=sent)
    with pytest.raises(RetryAfter) as caught:
        await api.send_message(CHAT, "hi")
    assert caught.value.seconds == seconds
    await api.send_message(CHAT, "hi")  # the fault was one call
    assert [m.text for m in fake.messages(CHAT)] == ["hi"]


async def test_a_429_on_get_updates_is_clamped_too(api: BotApi, fake: FakeTelegramServer) -> None:
    fake.fail_next("getUpdates", retry_after=-1)
    with pytest.raises(RetryAfter) as caught:
        await api.get_updates(None, timeout=0)
    assert caught.value.seconds == RETRY_AFTER_MIN_S


@pytest.mark.parametrize(("status", "error"), [(401, Unauthorized), (404, NotFound)])
async def test_definitive_answers_have_their_own_errors(
    api: BotApi, fake: FakeTelegramServer, status: int, error: type[Exception]
) -> None:
    fake.fail_next("getMe", status=status)
    with pytest.raises(error):
        await api.get_me()
    assert (await api.get_me())["username"] == fake.bot_username


@pytest.mark.parametrize("status", [200, 502])
async def test_an_answer_that_is_not_json_is_a_server_error(
    api: BotApi, fake: FakeTelegramServer, status: int
) -> None:
    fake.garbage_next("getUpdates", status=status)
    with pytest.raises(ServerError):
        await api.get_updates(None, timeout=0)
    fake.user_message(CHAT, CHAT, "after the garbage")
    [update] = await api.get_updates(None, timeout=0)
    assert update["message"]["text"] == "after the garbage"


async def test_a_dropped_connection_is_a_network_error(
    api: BotApi, fake: FakeTelegramServer
) -> None:
    fake.drop_next("getMe")
    with pytest.raises(NetworkError):
        await api.get_me()
    assert (await api.get_me())["username"] == fake.bot_username
    assert len(fake.calls_to("getMe")) == 2


async def test_a_dropped_send_sends_nothing(api: BotApi, fake: FakeTelegramServer) -> None:
    fake.drop_next("sendMessage")
    with pytest.raises(NetworkError):
        await api.send_message(CHAT, "lost")
    assert fake.messages(CHAT) == []


async def test_a_hang_answers_late_and_has_its_effect(
    api: BotApi, fake: FakeTelegramServer
) -> None:
    fake.hang_next("sendMessage", seconds=0.3)
    started = time.monotonic()
    sent = await api.send_message(CHAT, "slow")
    assert time.monotonic() - started >= 0.3
    assert sent["text"] == "slow"
    first, *_ = fake.calls_to("sendMessage")
    assert fake.messages(CHAT)[0].text == "slow"
    assert first.params["text"] == "slow"


async def test_a_poll_that_never_answers_is_a_network_error_at_the_clients_timeout(
    request: pytest.FixtureRequest,
    api: BotApi,
    fake: FakeTelegramServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hang past the client's timeout (getUpdates: its long-poll seconds plus a margin,
    shortened here from 10 s) is a lost connection, and the next poll works."""
    library = request.node.callspec.params["api"]
    monkeypatch.setattr(f"bot.telegram.bindings.{library}._LONG_POLL_MARGIN", 0.5)
    fake.hang_next("getUpdates")  # never answers (until the fake stops)
    with pytest.raises(NetworkError):
        await api.get_updates(None, timeout=0)
    fake.user_message(CHAT, CHAT, "after the hang")
    [update] = await api.get_updates(None, timeout=0)
    assert update["message"]["text"] == "after the hang"
