"""kill -9 while a Matrix card waits: after the restart a reaction on the old card works,
once; a message sent while the bot was dead is answered, once."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.bot.matrix.conftest import bodies, bot_messages, joined
from tests.bot.matrix.homeserver import Homeserver
from tests.bot.process import service_env, wait_for
from tests.fakes.openai_server import FakeOpenAIServer


def serve(
    tmp_path: Path, homeserver: Homeserver, bot, alice, model, **extra: str
) -> subprocess.Popen:
    env = service_env(
        tmp_path,
        model.base_url,
        MATRIX_HOMESERVER=homeserver.url,
        MATRIX_USER_ID=bot.user_id,
        MATRIX_PASSWORD="secret",  # logged in with once, the token kept
        MATRIX_ALLOWED_USER_IDS=alice.user_id,
        MEMORY_ENABLED="false",
        **extra,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "serve"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "serve.log").open("a"),
        env=env,
        cwd=tmp_path,
    )


def recorded(db: Path, event_id: str) -> bool:
    with sqlite3.connect(db) as conn:
        query = "SELECT count(*) FROM platform_cards WHERE platform = 'matrix' AND message_id = ?"
        return conn.execute(query, (event_id,)).fetchone()[0] == 1


def bot_message(person, room: str, bot: str, needle: str) -> dict | None:
    """The bot's first message in ``room`` holding ``needle``, as ``person`` sees it."""
    return next(
        (m for m in bot_messages(person, room, bot) if needle in m["content"]["body"]), None
    )


def shown_after(tmp_path: Path, alice, room: str, bot, said: str, card) -> dict:
    """Alice says ``said`` once the bot joined; the ``card`` it shows, recorded."""
    wait_for(lambda: joined(alice, room, bot.user_id), 30)
    alice.say(room, said)
    shown = wait_for(card, 30)
    wait_for(lambda: recorded(tmp_path / "chathub.db", shown["event_id"]))
    return shown


def card_state(db: Path, event_id: str) -> str:
    with sqlite3.connect(db) as conn:
        query = "SELECT state FROM platform_cards WHERE platform = 'matrix' AND message_id = ?"
        return conn.execute(query, (event_id,)).fetchone()[0]


def asked_last(model: FakeOpenAIServer) -> str | None:
    """What the user said last in the model's newest request."""
    if not model.requests:
        return None
    said = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"]
    return said[-1] if said else None


def test_an_old_card_works_once_after_kill_9_and_nothing_said_meanwhile_is_lost(
    tmp_path: Path, fake_openai: FakeOpenAIServer, homeserver: Homeserver
) -> None:
    tag = uuid.uuid4().hex[:8]
    bot, alice = homeserver.register(f"crashbot{tag}"), homeserver.register(f"crashalice{tag}")
    fake_openai.reply_tool_calls(("call_1", "execute_cmd", {"command": "echo ran >> runs.log"}))
    fake_openai.reply_text("It ran.")
    first = serve(tmp_path, homeserver, bot, alice, fake_openai)
    room = alice.create_room(invite=[bot.user_id], direct=True)

    def card():
        return bot_message(alice, room, bot.user_id, "Approval needed")

    try:
        shown = shown_after(tmp_path, alice, room, bot, "run it", card)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    alice.react(room, shown["event_id"], "✅")  # while the bot is dead
    alice.react(room, shown["event_id"], "✅\ufe0f")  # twice (Synapse refuses one key twice)
    fake_openai.reply_text("And hello.")
    alice.say(room, "hello while you were away")

    second = serve(tmp_path, homeserver, bot, alice, fake_openai)
    try:
        wait_for(lambda: "It ran." in bodies(alice, room, bot.user_id), 30)
        wait_for(lambda: "And hello." in bodies(alice, room, bot.user_id), 30)
        said = bodies(alice, room, bot.user_id)
        assert said.count("It ran.") == 1 and said.count("And hello.") == 1
        assert (tmp_path / "workspace" / "runs.log").read_text() == "ran\n"
        assert sum("Approval needed" in b for b in said) == 1
        wait_for(lambda: "✅ Approved" in card()["content"]["body"], 10)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(15)


@pytest.mark.parametrize(
    ("call", "card", "reply", "answer"),
    [
        (
            ("call_q", "ask_user_clarification", {"question": "Which city?"}),
            "❓ Question",
            "Rome",
            "Booking Rome.",
        ),
        (
            ("call_1", "execute_cmd", {"command": "rm -rf data"}),
            "Approval needed",
            "keep the data",
            "Left it.",
        ),
    ],
    ids=["a-question's-answer", "a-rejection's-reason"],
)
def test_a_reply_to_a_card_is_not_a_new_message_after_kill_9_before_its_mark(
    tmp_path: Path,
    fake_openai: FakeOpenAIServer,
    homeserver: Homeserver,
    call: tuple[str, str, dict[str, str]],
    card: str,
    reply: str,
    answer: str,
) -> None:
    """A reply to the card answered the question (or rejected the call with its reason),
    but the event was marked handled in a commit of its own after: killed between the
    two, the restart handed the same reply over again as a new message to the agent
    (found by review on 2026-12-06: the answer; the reason, later that day)."""
    tag = uuid.uuid4().hex[:8]
    bot, alice = homeserver.register(f"askbot{tag}"), homeserver.register(f"askalice{tag}")
    fake_openai.reply_tool_calls(call)
    first = serve(tmp_path, homeserver, bot, alice, fake_openai)
    room = alice.create_room(invite=[bot.user_id], direct=True)

    def shown_card():
        return bot_message(alice, room, bot.user_id, card)

    try:
        shown = shown_after(tmp_path, alice, room, bot, "do it", shown_card)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(15)

    # Twice each: the killed process may have asked the model already, its answer lost.
    for said in (answer, answer, "You're welcome.", "You're welcome."):
        fake_openai.reply_text(said)
    second = serve(
        tmp_path, homeserver, bot, alice, fake_openai, CHATHUB_FAILPOINTS="before_event_marked"
    )
    try:
        alice.reply(room, shown["event_id"], reply)
        assert second.wait(30) == -signal.SIGKILL
    finally:
        second.kill()
    assert card_state(tmp_path / "chathub.db", shown["event_id"]) != "open"  # decided

    third = serve(tmp_path, homeserver, bot, alice, fake_openai)
    try:
        wait_for(lambda: answer in bodies(alice, room, bot.user_id), 30)
        alice.say(room, "thanks")  # in order behind the reply, were it handed over again
        wait_for(lambda: asked_last(fake_openai) == "thanks", 30)
        user_turns = [
            m["content"]
            for request in fake_openai.requests
            for m in request["messages"]
            if m["role"] == "user"
        ]
        assert reply not in user_turns, "the reply came again as a new message"
    finally:
        third.send_signal(signal.SIGTERM)
        third.wait(15)
