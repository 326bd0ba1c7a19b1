"""``/voice on|off`` across a fleet: the process preparing a chat's replies follows it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.platform.voice_mode import VoiceMode
from engine.store import AppSettings, SqliteDatabase, connect, notifier_for
from tests.bot.platform.conftest import stop_watching, until
from tests.pg import database_url, migrated_sqlite, postgres_url

CHAT = "telegram:42"


class Speech:
    """Speech set up (an endpoint to speak with)."""

    def endpoint(self) -> object:
        return object()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_voice_on_in_one_process_reaches_the_one_that_replies(
    backend: str, tmp_path: Path
) -> None:
    """The receiver takes /voice on, another process owns the chat and prepares its
    replies: it speaks them from then on, and stops at /voice off (it went on as it was
    until it restarted; found by review)."""
    url = postgres_url() if backend == "postgresql" else "sqlite:///unused.db"
    if url is None:
        pytest.skip("CHATHUB_TEST_POSTGRES_URL is not set")
    database = migrated_sqlite(tmp_path / "chathub.db").split("///", 1)[1]
    db = SqliteDatabase(database)  # the fleet's one database
    notifiers = [notifier_for(url, "p1"), notifier_for(url, "p2")]
    if backend == "sqlite":  # one process's notices stand in for the database's
        notifiers[1] = notifiers[0]
    modes = [VoiceMode(AppSettings(db), Speech(), n) for n in notifiers]  # type: ignore[arg-type]
    watches = []
    try:
        for notifier in dict.fromkeys(notifiers):
            await notifier.start()
        for mode in modes:
            await mode.load()
            watches.append(asyncio.create_task(mode.watch()))
        await asyncio.sleep(0.2)  # both listen
        receiver, owner = modes
        await receiver.set(CHAT, True)
        await until(lambda: owner.is_on(CHAT))
        await receiver.set(CHAT, False)
        await until(lambda: not owner.is_on(CHAT))
    finally:
        await stop_watching(watches, notifiers)
        await db.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_two_chats_turning_voice_on_at_once_both_have_it(
    backend: str, tmp_path: Path
) -> None:
    """Each read the list, then wrote it with its own chat added: the second write lost
    the first chat, told "voice on" all the same (found by review on 2026-12-06)."""
    if backend == "postgresql":
        url = postgres_url()
        if url is None:
            pytest.skip("CHATHUB_TEST_POSTGRES_URL is not set")
    async with database_url(backend, tmp_path, migrated=True) as url:
        dbs = [connect(url), connect(url)]  # two processes' connections
        try:
            modes = [VoiceMode(AppSettings(db), Speech()) for db in dbs]  # type: ignore[arg-type]
            chats = [f"telegram:{n}" for n in range(8)]
            await asyncio.gather(*(modes[n % 2].set(chat, True) for n, chat in enumerate(chats)))
            fresh = VoiceMode(AppSettings(dbs[0]), Speech())  # type: ignore[arg-type]
            await fresh.load()
            assert all(fresh.is_on(chat) for chat in chats)
        finally:
            for db in dbs:
                await db.close()
