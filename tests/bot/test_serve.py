"""``chathub serve`` as it runs in production: a process with Telegram and a model over HTTP."""

from __future__ import annotations

import signal
import sqlite3
import time

import httpx

from tests.bot.process import ALICE, free_port, wait_for
from tests.fakes.telegram_server import FakeTelegramServer


def replies(telegram: FakeTelegramServer) -> list[str]:
    return [m.text or "" for m in telegram.messages(ALICE)]


def test_serve_answers_and_stops_on_sigterm_within_ten_seconds(serve, telegram, fake_openai):
    fake_openai.reply_text("Hello from chathub.")
    child = serve()
    telegram.user_message(ALICE, ALICE, "hi")
    wait_for(lambda: "Hello from chathub." in replies(telegram))

    started = time.monotonic()
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=15)
    assert time.monotonic() - started < 10
    assert child.returncode == 0, child.stderr.read() if child.stderr else ""


def test_a_message_accepted_before_sigterm_is_answered_after_the_restart(
    serve, telegram, fake_openai, tmp_path
):
    fake_openai.reply_hang()
    child = serve()
    telegram.user_message(ALICE, ALICE, "are you there?")
    wait_for(lambda: fake_openai.requests)  # accepted and in the model's hands
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=15)

    fake_openai.reply_text("Yes, still here.")
    serve()
    wait_for(lambda: "Yes, still here." in replies(telegram))
    with sqlite3.connect(tmp_path / "chathub.db") as db:
        users = db.execute("SELECT content, status FROM chat_history WHERE role='user'").fetchall()
    assert users == [("are you there?", "ok")]


def test_an_update_stored_but_not_handled_is_handled_after_kill_9(serve, telegram, fake_openai):
    child = serve(CHATHUB_FAILPOINTS="after_updates_stored")
    telegram.user_message(ALICE, ALICE, "do not lose me")
    child.wait(timeout=20)
    assert child.returncode == -signal.SIGKILL
    assert not any("do not lose me" in str(r) for r in fake_openai.requests)

    fake_openai.reply_text("Got it.")
    serve()
    wait_for(lambda: "Got it." in replies(telegram))
    assert replies(telegram).count("Got it.") == 1


def test_an_update_fetched_but_not_yet_stored_is_fetched_again_after_kill_9(
    serve, telegram, fake_openai
):
    child = serve(CHATHUB_FAILPOINTS="after_updates_fetched")
    telegram.user_message(ALICE, ALICE, "ask me again")
    child.wait(timeout=20)
    assert child.returncode == -signal.SIGKILL  # nothing stored, the offset never moved

    fake_openai.reply_text("Asked again, answered once.")
    serve()
    wait_for(lambda: "Asked again, answered once." in replies(telegram))
    assert replies(telegram).count("Asked again, answered once.") == 1
    assert len(fake_openai.requests) == 1


def test_an_answer_stored_but_never_sent_is_delivered_after_kill_9(serve, telegram, fake_openai):
    fake_openai.reply_text("The answer you almost lost.")
    child = serve(CHATHUB_FAILPOINTS="after_final_row")
    telegram.user_message(ALICE, ALICE, "question")
    child.wait(timeout=20)
    assert child.returncode == -signal.SIGKILL
    assert "The answer you almost lost." not in replies(telegram)

    serve()
    wait_for(lambda: "The answer you almost lost." in replies(telegram))
    assert replies(telegram).count("The answer you almost lost.") == 1
    assert len(fake_openai.requests) == 1  # not asked again


def test_a_command_killed_before_its_update_was_marked_acts_once_after_kill_9(
    serve, telegram, fake_openai, tmp_path
):
    """/new made its fresh session, then the process died before the update was marked
    handled: the restart finds it marked in that commit and makes no second one (it was
    handed over again, and the chat had two new conversations)."""
    child = serve(CHATHUB_FAILPOINTS="before_event_marked")
    telegram.user_message(ALICE, ALICE, "/new")
    child.wait(timeout=20)
    assert child.returncode == -signal.SIGKILL

    fake_openai.reply_text("Fresh start.")
    serve()
    telegram.user_message(ALICE, ALICE, "hello")  # behind any /new handed over again
    wait_for(lambda: "Fresh start." in replies(telegram))
    with sqlite3.connect(tmp_path / "chathub.db") as db:
        sessions = db.execute("SELECT count(*) FROM chat_sessions WHERE source LIKE 'telegram:%'")
        assert sessions.fetchone() == (2,)  # the first, and the one /new made


def test_without_a_bot_token_serve_prints_the_web_chats_address(serve, fake_openai):
    port = free_port()
    child = serve(TELEGRAM_BOT_TOKEN="", HTTP_PORT=str(port), CHATHUB_API_TOKEN="t" * 32)
    assert child.stderr is not None
    line = child.stderr.readline()  # the first line it writes once it is up
    assert line.strip() == f"chathub: web chat at http://127.0.0.1:{port}/chat"
    page = httpx.get(f"http://127.0.0.1:{port}/chat", follow_redirects=False, timeout=5)
    assert page.status_code in (200, 302, 303)  # the page, or its sign-in first
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=15)


def offered_tools(fake_openai) -> set[str]:
    return {tool["function"]["name"] for tool in fake_openai.requests[0].get("tools", [])}


def test_memory_offers_search_sessions_unless_turned_off(serve, telegram, fake_openai):
    fake_openai.reply_text("On.")
    child = serve()
    telegram.user_message(ALICE, ALICE, "hi")
    wait_for(lambda: "On." in replies(telegram))
    assert "search_sessions" in offered_tools(fake_openai)
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=15)

    fake_openai.reset()
    fake_openai.reply_text("Off.")
    child = serve(MEMORY_ENABLED="false")
    telegram.user_message(ALICE, ALICE, "hi again")
    wait_for(lambda: "Off." in replies(telegram))
    assert "search_sessions" not in offered_tools(fake_openai)
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=15)
