"""kill -9 while a Discord card waits: after the restart the old button works, once."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.bot.discord.conftest import ALICE, TOKEN
from tests.bot.process import service_env, wait_for
from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.openai_server import FakeOpenAIServer


def serve(tmp_path: Path, fake: FakeDiscordServer, model: FakeOpenAIServer) -> subprocess.Popen:
    env = service_env(
        tmp_path,
        model.base_url,
        DISCORD_BOT_TOKEN=TOKEN,
        DISCORD_API_URL=fake.base_url,
        DISCORD_ALLOWED_USER_IDS=str(ALICE),
        MEMORY_ENABLED="false",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "serve"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "serve.log").open("a"),
        env=env,
        cwd=tmp_path,
    )


def recorded(db: Path, message_id: str) -> bool:
    with sqlite3.connect(db) as conn:
        query = "SELECT count(*) FROM platform_cards WHERE platform = 'discord' AND message_id = ?"
        return conn.execute(query, (message_id,)).fetchone()[0] == 1


def test_an_old_button_works_once_after_kill_9(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    with FakeDiscordServer(token=TOKEN) as fake:
        fake.add_user(ALICE, username="alice", global_name="Alice")
        fake_openai.reply_tool_calls(("call_1", "execute_cmd", {"command": "echo ran >> runs.log"}))
        fake_openai.reply_text("It ran.")
        first = serve(tmp_path, fake, fake_openai)
        try:
            wait_for(lambda: fake.session is not None and fake.identify_count == 1)
            channel = fake.dm(ALICE, "run it")["channel_id"]
            card = wait_for(
                lambda: next(
                    (m for m in fake.messages(channel) if "Approval needed" in m.content), None
                )
            )
            # Killed once the card's row names its message (before that a restart shows
            # the card again, as a crash between Discord's answer and the record must).
            wait_for(lambda: recorded(tmp_path / "chathub.db", card.id))
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            first.kill()
        second = serve(tmp_path, fake, fake_openai)
        try:
            wait_for(lambda: fake.identify_count == 2 and fake.session is not None)
            approve = next(c for c in card.custom_ids if c.endswith(":approve"))
            fake.click(channel, card.id, ALICE, approve)
            wait_for(lambda: any(m.content == "It ran." for m in fake.messages(channel)))
            assert (tmp_path / "workspace" / "runs.log").read_text() == "ran\n"
            wait_for(lambda: "Approved" in fake.message(channel, card.id).content)
            assert fake.message(channel, card.id).components == []
            cards = [m for m in fake.messages(channel) if "Approval needed" in m.content]
            assert len(cards) == 1  # the same card, not shown again
            assert [r.type for r in fake.interaction_responses] == [6]
            assert [m.content for m in fake.messages(channel)].count("It ran.") == 1
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(15)
