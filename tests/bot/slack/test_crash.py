"""kill -9 while a Slack card waits: after the restart the old button works, once."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.bot.process import service_env, wait_for
from tests.bot.slack.conftest import ALICE
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_server import FakeSlackServer, Message


def serve(tmp_path: Path, fake: FakeSlackServer, model: FakeOpenAIServer) -> subprocess.Popen:
    env = service_env(
        tmp_path,
        model.base_url,
        SLACK_BOT_TOKEN=fake.bot_token,
        SLACK_APP_TOKEN=fake.app_token,
        SLACK_API_URL=fake.api_url,
        SLACK_ALLOWED_USER_IDS=ALICE,
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


def recorded(db: Path, ts: str) -> bool:
    with sqlite3.connect(db) as conn:
        query = "SELECT count(*) FROM platform_cards WHERE platform = 'slack' AND message_id = ?"
        return conn.execute(query, (ts,)).fetchone()[0] == 1


def card_in(fake: FakeSlackServer, channel: str) -> Message | None:
    return next((m for m in fake.messages(channel) if m.buttons), None)


def test_an_old_button_works_once_after_kill_9(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    with FakeSlackServer(ack_timeout=1.0, retry_delays=(0.0, 0.5, 1.0)) as fake:
        fake.add_user(ALICE, "alice", "Alice")
        fake_openai.reply_tool_calls(("call_1", "execute_cmd", {"command": "echo ran >> runs.log"}))
        fake_openai.reply_text("It ran.")
        first = serve(tmp_path, fake, fake_openai)
        dm = fake.dm_channel(ALICE)
        try:
            wait_for(lambda: fake.ready_connections == 1)
            fake.dm(ALICE, "run it")
            card = wait_for(lambda: card_in(fake, dm))
            # Killed once the card's row names its message (before that a restart shows
            # the card again, as a crash between Slack's answer and the record must).
            wait_for(lambda: recorded(tmp_path / "chathub.db", card.ts))
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            first.kill()
        second = serve(tmp_path, fake, fake_openai)
        try:
            wait_for(lambda: fake.ready_connections == 1 and len(fake.connections) == 2)
            approve = next(a for a in card.action_ids if a.endswith(":approve"))
            click = fake.click(card, ALICE, approve)
            wait_for(lambda: any(m.text == "It ran." for m in fake.messages(dm)))
            assert click.acked
            assert (tmp_path / "workspace" / "runs.log").read_text() == "ran\n"
            wait_for(lambda: fake.message(dm, card.ts).buttons == [])
            assert "Approved" in str(fake.message(dm, card.ts).blocks)
            assert len([m for m in fake.messages(dm) if "Approval needed" in str(m.blocks)]) == 1
            assert [m.text for m in fake.messages(dm)].count("It ran.") == 1
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(15)
