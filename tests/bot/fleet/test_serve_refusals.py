"""``chathub serve`` refuses, in one sentence, what would make two bots of one database:
a second serve on one SQLite file, a token of another bot, a fleet on SQLite."""

from __future__ import annotations

import pytest

from tests.bot.process import wait_for
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeTelegramServer


def test_a_second_serve_on_one_sqlite_file_is_refused(
    serve,  # type: ignore[no-untyped-def]
    telegram: FakeTelegramServer,
    fake_openai: FakeOpenAIServer,
) -> None:
    first = serve()
    wait_for(lambda: telegram.calls_to("getUpdates"))  # up and polling
    second = serve()
    assert second.wait(timeout=30) != 0
    assert second.stderr is not None
    said = second.stderr.read()
    assert "Another chathub serve" in said and f"pid {first.pid}" in said
    assert "Traceback" not in said
    assert first.poll() is None  # the first goes on serving


def test_another_bots_token_on_the_database_is_refused(
    serve,  # type: ignore[no-untyped-def]
    telegram: FakeTelegramServer,
    fake_openai: FakeOpenAIServer,
) -> None:
    first = serve()
    wait_for(lambda: telegram.calls_to("getUpdates"))
    first.terminate()
    assert first.wait(timeout=30) == 0
    other = serve(TELEGRAM_BOT_TOKEN="999999:OTHER")
    assert other.wait(timeout=30) != 0
    assert other.stderr is not None
    said = other.stderr.read()
    assert "belongs to Telegram bot 123456" in said and "for bot 999999" in said
    assert "OTHER" not in said and "Traceback" not in said


def test_a_fleet_on_sqlite_is_refused(
    serve,  # type: ignore[no-untyped-def]
    telegram: FakeTelegramServer,
    fake_openai: FakeOpenAIServer,
) -> None:
    refused = serve(CHATHUB_FLEET="true")
    assert refused.wait(timeout=30) != 0
    assert refused.stderr is not None
    said = refused.stderr.read()
    assert "CHATHUB_FLEET=true needs a PostgreSQL DATABASE_URL" in said
    assert "Traceback" not in said
    assert not telegram.calls_to("getUpdates")  # refused before anything started


def test_bad_fleet_settings_are_refused_naming_the_variable() -> None:
    from bot.fleet.settings import FleetSettings

    for bad in (
        {"chathub_fleet_lease_seconds": 1},
        {"chathub_fleet_lease_seconds": 1000},
        {"chathub_process_id": ""},
        {"chathub_fleet": "perhaps"},
    ):
        with pytest.raises(ValueError):
            FleetSettings(_env_file=None, **bad)  # type: ignore[arg-type]
