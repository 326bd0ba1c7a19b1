"""A turn failed by a malformed stream, then ``kill -9``: ``chathub serve`` as a process.

The user is told once, whether the process dies right after the failure's commit (the
notice is sent at the restart) or after the notice went out (it is not sent again); the
model is never asked about that message again, and the next message is answered.
"""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

from tests.bot.process import ALICE, wait_for
from tests.fakes.openai_server import FakeOpenAIServer, delta_chunk
from tests.fakes.telegram_server import FakeTelegramServer

MALFORMED = "the model sent a malformed response"


def replies(telegram: FakeTelegramServer) -> list[str]:
    return [m.text or "" for m in telegram.messages(ALICE)]


def notices(telegram: FakeTelegramServer) -> list[str]:
    return [text for text in replies(telegram) if text.startswith("⚠️")]


def script_malformed_stream(fake_openai: FakeOpenAIServer) -> None:
    """The number 12345 where the content's text belongs."""
    fake_openai.reply_chunks(delta_chunk({"role": "assistant", "content": 12345}))


def query(tmp_path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(tmp_path / "chathub.db") as db:
        return db.execute(sql).fetchall()


def user_messages_sent_to_model(fake_openai: FakeOpenAIServer) -> list[list[str]]:
    return [
        [m["content"] for m in request["messages"] if m["role"] == "user"]
        for request in fake_openai.requests
    ]


def assert_the_next_message_is_answered(
    serve, telegram: FakeTelegramServer, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.reply_text("Back to normal.")
    telegram.user_message(ALICE, ALICE, "and now?")
    wait_for(lambda: "Back to normal." in replies(telegram))
    assert user_messages_sent_to_model(fake_openai) == [["hi there"], ["and now?"]]
    assert len(notices(telegram)) == 1


def test_killed_right_after_the_failure_commit_the_notice_comes_once_at_restart(
    serve, telegram, fake_openai, tmp_path
):
    script_malformed_stream(fake_openai)
    child = serve(CHATHUB_FAILPOINTS="after_failed_turn")
    telegram.user_message(ALICE, ALICE, "hi there")
    child.wait(timeout=20)
    assert child.returncode == -signal.SIGKILL
    assert notices(telegram) == []  # the commit happened, the sending did not
    assert query(tmp_path, "SELECT status FROM chat_history WHERE role='user'") == [("failed",)]

    serve()
    wait_for(lambda: notices(telegram))
    [notice] = notices(telegram)
    assert MALFORMED in notice and "TypeError" not in notice
    assert len(fake_openai.requests) == 1  # the failed message was not resumed
    assert_the_next_message_is_answered(serve, telegram, fake_openai)


def test_killed_after_the_notice_went_out_nothing_is_repeated(
    serve, telegram, fake_openai, tmp_path
):
    script_malformed_stream(fake_openai)
    child = serve()
    telegram.user_message(ALICE, ALICE, "hi there")
    [notice] = wait_for(lambda: notices(telegram))
    assert MALFORMED in notice and "TypeError" not in notice
    # The outbox knows it was sent: a kill now must not send it again.
    sent = "SELECT status FROM platform_outbox WHERE dedupe_key LIKE 'failed:%'"
    wait_for(lambda: query(tmp_path, sent) == [("sent",)])
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)

    serve()
    assert_the_next_message_is_answered(serve, telegram, fake_openai)
    assert query(tmp_path, "SELECT content, status FROM chat_history WHERE role='user'") == [
        ("hi there", "failed"),
        ("and now?", "ok"),
    ]
