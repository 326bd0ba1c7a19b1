"""``chathub serve`` as a process while the fake Bot API fails its start-up calls.

One error at start-up must never kill the service: getMe, deleteWebhook and setWebhook
are retried until they succeed (one log line per failure, no traceback), setMyCommands
never holds up polling, and only a definitive answer (401, 404) stops it — with one
line and exit status 1. ``/healthz`` is served meanwhile and says how Telegram is doing.
The bar: polling within 10 s of a fault clearing.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.bot.process import ALICE, free_port, wait_for
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeTelegramServer

#: A fault that lasts until the test clears it.
OUTAGE = 100_000


def replies(telegram: FakeTelegramServer) -> list[str]:
    return [m.text or "" for m in telegram.messages(ALICE)]


def stop(child: subprocess.Popen[str]) -> str:
    """SIGTERM, a clean exit, and everything the process wrote to stderr."""
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=20)
    assert child.returncode == 0, err
    return err


def health(port: int) -> dict[str, Any] | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()
    except httpx.TransportError:
        return None


def answers_a_message(telegram: FakeTelegramServer, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply_text("Still here.")
    telegram.user_message(ALICE, ALICE, "are you up?")
    wait_for(lambda: "Still here." in replies(telegram))


def assert_quiet_failures(stderr: str, call: str, count: int) -> None:
    """``count`` warnings about ``call``, one line each, and no traceback anywhere."""
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if f"Telegram {call} failed" in line]
    assert len(lines) == count, stderr


@pytest.mark.parametrize("library", ["ptb", "aiogram"])
@pytest.mark.parametrize(
    "arm",
    [
        lambda t: t.fail_next("getMe", status=500),
        lambda t: t.drop_next("getMe"),
    ],
    ids=["500", "dropped"],
)
def test_one_failed_get_me_does_not_kill_the_service(
    serve, telegram, fake_openai, library: str, arm: Callable[[FakeTelegramServer], None]
):
    arm(telegram)
    child = serve(TELEGRAM_LIBRARY=library)
    answers_a_message(telegram, fake_openai)
    assert len(telegram.calls_to("getMe")) >= 2
    assert_quiet_failures(stop(child), "getMe", 1)


def test_a_429_on_get_me_waits_its_retry_after(serve, telegram, fake_openai):
    telegram.fail_next("getMe", retry_after=1)
    child = serve()
    answers_a_message(telegram, fake_openai)
    first, second = telegram.calls_to("getMe")[:2]
    assert second.time - first.time >= 0.95
    assert_quiet_failures(stop(child), "getMe", 1)


def test_a_slow_get_me_is_waited_for(serve, telegram, fake_openai):
    telegram.hang_next("getMe", seconds=2)
    child = serve(TELEGRAM_LIBRARY="aiogram")
    answers_a_message(telegram, fake_openai)
    assert "Traceback" not in stop(child)


def test_a_429_on_set_my_commands_never_holds_up_polling(serve, telegram, fake_openai):
    telegram.fail_next("setMyCommands", retry_after=4)
    child = serve(TELEGRAM_LIBRARY="aiogram")
    answers_a_message(telegram, fake_openai)
    assert "default/" not in telegram.commands  # answered while the menu still waits
    wait_for(lambda: "default/" in telegram.commands)  # then the menu is set after all
    err = stop(child)
    assert "Traceback" not in err
    assert sum("setMyCommands failed" in line for line in err.splitlines()) == 1


def test_a_500_on_delete_webhook_is_retried_and_polling_starts(serve, telegram, fake_openai):
    """Today's bug: healthy by /healthz, but it never polled."""
    telegram.fail_next("deleteWebhook", status=500)
    child = serve()
    answers_a_message(telegram, fake_openai)
    assert_quiet_failures(stop(child), "deleteWebhook", 1)


@pytest.mark.parametrize(
    ("library", "status", "names"),
    [
        ("ptb", 401, "TELEGRAM_BOT_TOKEN"),
        ("aiogram", 401, "TELEGRAM_BOT_TOKEN"),
        ("aiogram", 404, "TELEGRAM_API_URL"),
    ],
)
def test_a_definitive_answer_stops_start_up_with_one_clear_line(
    serve, telegram, library: str, status: int, names: str
):
    telegram.fail_next("getMe", status=status)
    child = serve(TELEGRAM_LIBRARY=library)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 1
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("chathub: ") and names in lines[-1]
    assert "getMe" in lines[-1]
    assert sum("getMe" in line for line in lines) == 1, err  # one line, nothing else
    assert len(telegram.calls_to("getMe")) == 1  # a "no" is not asked again


@pytest.mark.parametrize(
    ("library", "method"),
    [("ptb", "getMe"), ("aiogram", "deleteWebhook"), ("ptb", "getUpdates")],
)
def test_health_tells_the_outage_and_polling_resumes_when_it_ends(
    serve, telegram, fake_openai, library: str, method: str
):
    """The process view of an outage; the 5 s backoff cap that keeps polling within 10 s
    of its end is checked with injected time (tests/bot/telegram_unit/test_startup.py)."""
    port = free_port()
    telegram.fail_next(method, OUTAGE, status=502)
    child = serve(TELEGRAM_LIBRARY=library, HTTP_PORT=str(port))
    # The HTTP app is up while Telegram start-up retries, and tells the truth about it.
    report = wait_for(lambda: (h := health(port)) is not None and h["telegram"] == "failing" and h)
    assert report["ok"] is True  # the process itself is fine: restarting it would not help
    assert report["telegram_error"].startswith(f"{method}:")
    wait_for(lambda: len(telegram.calls_to(method)) >= 2)  # retried, not given up

    telegram.clear_faults()
    cleared = time.monotonic()
    wait_for(lambda: any(c.time > cleared for c in telegram.calls_to("getUpdates")))
    to_polling = min(c.time for c in telegram.calls_to("getUpdates") if c.time > cleared) - cleared
    wait_for(lambda: (health(port) or {}).get("telegram") == "ok", within_s=10)
    answers_a_message(telegram, fake_openai)
    err = stop(child)
    assert "Traceback" not in err
    print(f"{library} {method}: polling {to_polling:.2f} s after the outage ended")


def test_webhook_mode_retries_set_webhook(serve, telegram, fake_openai):
    port = free_port()
    telegram.fail_next("setWebhook", 3, status=500)
    child = serve(
        HTTP_PORT=str(port),
        TELEGRAM_WEBHOOK_URL="https://bot.example.org/telegram/webhook",
        TELEGRAM_WEBHOOK_SECRET="s3cret",
        CHATHUB_API_TOKEN="webhook-mode-token",  # reached from outside: a token
    )
    wait_for(lambda: telegram.webhook.url == "https://bot.example.org/telegram/webhook")
    wait_for(lambda: (health(port) or {}).get("telegram") == "ok")
    assert_quiet_failures(stop(child), "setWebhook", 3)
