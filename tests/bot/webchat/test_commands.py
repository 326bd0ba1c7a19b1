"""Commands, resume, a plain message answering a question, and our own failures."""

from __future__ import annotations

import re

import pytest

from bot.webchat.protocol import LaggedFrame
from bot.webchat.transport import WebChat
from engine.bus.broadcast import Lagged
from tests.bot.webchat.conftest import ChatServer
from tests.fakes.openai_server import FakeOpenAIServer


async def test_the_shared_commands_work_as_everywhere(server: ChatServer):
    client = await server.client()
    await client.send(type="message", text="/models", ref="c")
    notice = await client.recv()
    assert notice["type"] == "notice" and notice["ref"] == "c" and "fake-model" in notice["text"]
    await client.send(type="message", text="/model 1")
    assert (await client.recv())["text"] == "Model: fake-model."
    await client.send(type="message", text="/nonsense")
    notice = await client.recv()
    assert notice["text"].startswith("Unknown command /nonsense.") and "/compact" in notice["text"]
    await client.send(type="message", text="/compact")
    assert (await client.recv())["type"] == "notice"
    await client.send(type="message", text="/stop")
    assert (await client.recv())["text"] == "Nothing to stop."
    before = await server.hub.session_id("web:c1")
    await client.send(type="message", text="/new")
    fresh = await client.until("new_session")
    assert fresh[-1]["session_id"] != before
    assert await server.hub.session_id("web:c1") == fresh[-1]["session_id"]


@pytest.mark.parametrize(
    "text", ["/etc/hosts: what is this file for?", "/home/alice/project", "/", "/ hello"]
)
async def test_a_message_starting_with_a_path_or_a_slash_is_a_message(
    server: ChatServer, fake_openai: FakeOpenAIServer, text: str
):
    """As on every front end (``COMMAND``): until 2026-12-07 it was "Unknown command",
    nothing reached the model, and the page dropped the draft (found by review)."""
    fake_openai.reply_text("It maps names to addresses.")
    client = await server.client()
    await client.send(type="message", text=text, ref="m1")
    frames = await client.until("done")
    assert not any(f["type"] == "notice" for f in frames), frames
    assert any(f["type"] == "user_message" and f["text"] == text for f in frames), frames


async def test_resume_with_nothing_interrupted_says_so(server: ChatServer):
    client = await server.client()
    await client.send(type="resume", ref="r")
    assert await client.recv() == {"type": "notice", "text": "Nothing to resume.", "ref": "r"}


async def test_a_plain_message_answers_the_open_question(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which size?"}))
    fake_openai.reply_text("Large it is.")
    client = await server.client()
    await client.send(type="message", text="order a coffee")
    question = (await client.until("agent_question"))[-1]
    await client.send(type="message", text="large")
    frames = await client.until("done")
    answered = next(f for f in frames if f["type"] == "question_answered")
    assert answered["request_id"] == question["request_id"] and answered["answer"] == "large"
    assert "accepted" not in [f["type"] for f in frames]  # an answer, not a new message


async def test_a_failure_of_ours_is_one_sentence_with_an_id(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    async def broken(*_args, **_kwargs):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(server.hub, "send_message", broken)
    client = await server.client()
    await client.send(type="message", text="hello", ref="m")
    error = await client.recv()
    assert error["type"] == "error" and error["code"] == "internal" and error["ref"] == "m"
    assert "secret" not in error["message"] and "RuntimeError" not in error["message"]
    error_id = re.search(r"\(error ([0-9a-f]{6})\)", error["message"])
    assert error_id is not None
    assert f"(error {error_id.group(1)})" in caplog.text  # the log line carries the traceback
    await client.send(type="ping")
    assert (await client.recv())["type"] == "pong"  # the socket goes on


class _Recorder:
    def __init__(self) -> None:
        self.frames: list = []
        self.gone = False

    async def send(self, frame) -> None:
        self.frames.append(frame)


class _Events:
    def __init__(self, items) -> None:
        self._items = list(items)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self._items:
            raise StopAsyncIteration
        return self._items.pop(0)


async def test_a_socket_that_fell_behind_is_told_to_reload(server: ChatServer):
    webchat: WebChat = server.webchat
    recorder = _Recorder()
    await webchat._pump(_Events([Lagged(7)]), recorder)  # type: ignore[arg-type]
    assert recorder.frames == [LaggedFrame(missed=7)]
