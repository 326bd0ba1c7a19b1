"""Voice in the web chat: a voice note (the page's microphone button uploads it with
``voice=1&seconds=``) or an audio file, heard through the platforms' ``VoiceNotes`` at the
fake transcription server, over the real socket and HTTP routes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.platform.voice_notes import NOT_SET_UP
from tests.bot.webchat.conftest import TOKEN, ChatServer, Client
from tests.fakes.ogg import opus_silence
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply

BEARER = {"Authorization": f"Bearer {TOKEN}"}
OCTETS = {"content-type": "application/octet-stream"}
OGG = opus_silence()  # half a second of real Ogg/Opus, as Firefox records
WEBM = b"\x1aE\xdf\xa3" + bytes(400)  # an EBML header, as Chromium records (audio/webm)


@pytest.fixture
async def http(make_server) -> AsyncIterator[Callable[..., Any]]:
    """A server with stored conversations (and ``voice``), and a client of its routes."""
    clients: list[httpx.AsyncClient] = []

    async def start(**kwargs: Any) -> tuple[ChatServer, httpx.AsyncClient]:
        server = await make_server(stored=True, **kwargs)
        client = httpx.AsyncClient(base_url=server.http, headers=BEARER)
        clients.append(client)
        return server, client

    yield start
    for client in clients:
        await client.aclose()


async def _conversation(http: httpx.AsyncClient) -> str:
    return (await http.post("/chat/conversations", json={})).json()["id"]


async def _upload(
    http: httpx.AsyncClient,
    conversation: str,
    name: str,
    body: Any,
    *,
    voice: bool = True,
    seconds: float | None = 0.5,
) -> httpx.Response:
    params: dict[str, Any] = {"name": name}
    if voice:
        params["voice"] = "1"
        if seconds is not None:
            params["seconds"] = str(seconds)
    return await http.post(
        f"/chat/conversations/{conversation}/files", params=params, content=body, headers=OCTETS
    )


def _folder(server: ChatServer, conversation: str) -> Path:
    return server.hub.engine.workspace.root / "uploads" / "web" / conversation


def _asked(fake_openai: FakeOpenAIServer) -> str:
    return [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]


async def _nothing_sent(client: Client, fake_openai: FakeOpenAIServer) -> None:
    """The socket still answers, and no message was stored or sent to the model."""
    await client.send(type="ping", ref="after")
    frames = await client.until("pong", ref="after")
    assert not [f for f in client.seen if f["type"] in ("user_message", "accepted")], frames
    assert fake_openai.requests == []


@pytest.mark.parametrize(
    ("name", "audio", "mime_type"),
    [("voice-message.ogg", OGG, "audio/ogg"), ("voice-message.webm", WEBM, "audio/webm")],
    ids=["ogg-opus", "webm-opus"],
)
async def test_a_voice_note_is_heard_shown_in_every_tab_and_answered(
    http, voice_notes, fake_openai: FakeOpenAIServer, name: str, audio: bytes, mime_type: str
):
    server, client_http = await http(voice=voice_notes())
    conversation = await _conversation(client_http)
    uploaded = await _upload(client_http, conversation, name, audio, seconds=2.4)
    assert uploaded.status_code == 201, uploaded.text
    note = uploaded.json()
    assert note["name"] == name and note["size"] == len(audio)
    fake_openai.echo = True
    fake_openai.transcribe("order more coffee")
    client = await server.client(conversation)
    hello = client.seen[0]
    assert hello["limits"]["max_voice_seconds"] == 600
    assert hello["limits"]["max_voice_bytes"] == 20 * 1024 * 1024
    other_tab = await server.client(conversation)

    await client.send(type="message", text="", attachments=[note["id"]], ref="v1")
    frames = await client.until("done")
    kinds = [f["type"] for f in frames]
    heard = frames[kinds.index("notice")]
    assert heard == {"type": "notice", "text": "🎤 “order more coffee”", "ref": None}
    assert kinds.index("notice") < kinds.index("user_message") < kinds.index("done")
    assert next(f for f in frames if f["type"] == "accepted")["ref"] == "v1"
    assert not [f for f in frames if f["type"] == "error"]
    path = f"uploads/web/{conversation}/{note['id']}"
    shown = next(f for f in frames if f["type"] == "user_message")
    assert shown["text"] == "order more coffee"
    assert shown["attachments"] == [
        {"path": path, "name": name, "kind": "voice", "mime_type": mime_type, "size": len(audio)}
    ]
    assert frames[-1]["content"].startswith("echo: order more coffee")
    in_other_tab = await other_tab.until("user_message")
    assert [f["text"] for f in in_other_tab if f["type"] == "notice"] == ["🎤 “order more coffee”"]

    # The transcription server got the audio as it was recorded, named and typed so.
    [request] = fake_openai.transcription_requests
    assert request["audio"] == audio and request["model"] == "whisper-1"
    assert request["filename"] == name and request["content_type"] == mime_type
    # The model reads the transcript as the turn's text, the audio as an attachment.
    asked = _asked(fake_openai)
    assert asked.startswith("order more coffee\n\n[SYSTEM INFO] The user attached files")
    assert f"- {path} ({mime_type}, 3 s, {len(audio)})" in asked
    assert (_folder(server, conversation) / note["id"]).read_bytes() == audio
    history = (await client_http.get(f"/chat/conversations/{conversation}/messages")).json()
    [user] = [m for m in history["messages"] if m["role"] == "user"]
    assert user["text"] == "order more coffee" and user["attachments"][0]["kind"] == "voice"
    await client.close()
    await other_tab.close()


async def test_an_audio_file_with_text_is_heard_after_the_text(
    http, voice_notes, fake_openai: FakeOpenAIServer
):
    """Chosen with the paperclip, not recorded: an audio file is heard too, after the text."""
    server, client_http = await http(voice=voice_notes())
    conversation = await _conversation(client_http)
    memo = await _upload(client_http, conversation, "memo.mp3", b"ID3" + bytes(200), voice=False)
    assert memo.status_code == 201
    fake_openai.echo = True
    fake_openai.transcribe("the meeting moved to Friday")
    client = await server.client(conversation)
    await client.send(type="message", text="From the call:", attachments=[memo.json()["id"]])
    frames = await client.until("done")
    shown = next(f for f in frames if f["type"] == "user_message")
    assert shown["text"] == "From the call:\nthe meeting moved to Friday"
    assert shown["attachments"][0]["kind"] == "audio"
    assert shown["attachments"][0]["mime_type"] == "audio/mpeg"
    assert fake_openai.transcription_requests[0]["filename"] == "memo.mp3"
    assert _asked(fake_openai).startswith("From the call:\nthe meeting moved to Friday\n\n")
    await client.close()


@pytest.mark.parametrize("given", ["not set up", "not given"])
async def test_no_transcription_says_how_and_sends_nothing(
    http, voice_notes, fake_openai: FakeOpenAIServer, given: str
):
    """``TRANSCRIBE_MODEL`` unset, or a web chat given no ``VoiceNotes`` at all: the
    platforms' one line; the voice note is dropped, an audio file stays a file."""
    voice = voice_notes(transcribe=False) if given == "not set up" else None
    server, client_http = await http(voice=voice)
    conversation = await _conversation(client_http)
    note = (await _upload(client_http, conversation, "voice-message.ogg", OGG)).json()
    client = await server.client(conversation)
    assert client.seen[0]["limits"]["max_voice_seconds"] == (600 if voice else None)
    await client.send(type="message", text="", attachments=[note["id"]], ref="v1")
    error = (await client.until("error"))[-1]
    assert error == {"type": "error", "code": "voice", "message": f"⚠️ {NOT_SET_UP}", "ref": "v1"}
    assert "TRANSCRIBE_MODEL" in error["message"]
    await _nothing_sent(client, fake_openai)
    assert fake_openai.transcription_requests == []

    fake_openai.reply_text("A recording, then.")
    song = (await _upload(client_http, conversation, "song.ogg", OGG, voice=False)).json()
    await client.send(type="message", text="", attachments=[song["id"]], ref="a1")
    frames = await client.until("done")
    assert not [f for f in frames if f["type"] in ("notice", "error")]
    shown = next(f for f in frames if f["type"] == "user_message")
    assert shown["text"] == "" and shown["attachments"][0]["kind"] == "audio"
    assert _asked(fake_openai).startswith("[SYSTEM INFO] The user attached files")
    await client.close()


async def test_an_empty_voice_note_is_one_sentence_and_reaches_nobody(
    http, voice_notes, fake_openai: FakeOpenAIServer
):
    server, client_http = await http(voice=voice_notes())
    conversation = await _conversation(client_http)
    empty = await _upload(client_http, conversation, "voice-message.ogg", b"", seconds=0)
    assert empty.status_code == 201 and empty.json()["size"] == 0
    client = await server.client(conversation)
    await client.send(type="message", text="", attachments=[empty.json()["id"]], ref="v0")
    error = (await client.until("error"))[-1]
    assert error["code"] == "voice" and error["ref"] == "v0"
    assert error["message"] == (
        "⚠️ 🎤 I could not transcribe voice-message.ogg: the voice message is empty."
    )
    await _nothing_sent(client, fake_openai)
    assert fake_openai.transcription_requests == []
    await client.close()


async def test_a_voice_note_over_the_limits_is_refused_before_it_is_stored(
    http, voice_notes, fake_openai: FakeOpenAIServer
):
    server, client_http = await http(voice=voice_notes(max_bytes=2000, max_seconds=5))
    conversation = await _conversation(client_http)
    folder = _folder(server, conversation)

    too_long = await _upload(client_http, conversation, "voice-message.ogg", OGG, seconds=90.2)
    assert too_long.status_code == 413
    assert too_long.json() == {
        "error": "⚠️ 🎤 voice-message.ogg is 91 s long; I transcribe at most 5 s."
    }
    declared = await _upload(client_http, conversation, "voice-message.ogg", bytes(2001))
    assert declared.status_code == 413
    too_large = "⚠️ 🎤 voice-message.ogg is too large to transcribe (the limit is 0.00190735 MB)."
    assert declared.json() == {"error": too_large}
    song = await _upload(client_http, conversation, "song.mp3", bytes(2001), voice=False)
    assert song.status_code == 413 and "song.mp3 is too large to transcribe" in song.text
    assert not folder.exists()  # refused before a byte was stored

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        for _ in range(3):
            yield bytes(1000)

    streamed = await _upload(client_http, conversation, "voice-message.ogg", chunks())
    assert streamed.status_code == 413 and streamed.json() == {"error": too_large}
    assert list(folder.iterdir()) == []  # nothing kept: no part, no mark
    exactly = await _upload(client_http, conversation, "voice-message.ogg", bytes(2000), seconds=5)
    assert exactly.status_code == 201
    assert sorted(p.name for p in folder.iterdir()) == [
        f".{exactly.json()['id']}.voice",
        exactly.json()["id"],
    ]
    assert fake_openai.transcription_requests == [] and fake_openai.requests == []


async def test_a_failing_transcription_server_is_the_warning_and_nothing_reaches_the_model(
    http, voice_notes, fake_openai: FakeOpenAIServer, caplog
):
    server, client_http = await http(voice=voice_notes())
    conversation = await _conversation(client_http)
    note = (await _upload(client_http, conversation, "voice-message.ogg", OGG)).json()
    fake_openai.transcription_failures.append(
        ScriptedReply("error", status=500, body=b'{"error": "Traceback: boom"}')
    )
    client = await server.client(conversation)
    await client.send(type="message", text="", attachments=[note["id"]], ref="v1")
    error = (await client.until("error"))[-1]
    assert error == {
        "type": "error",
        "code": "voice",
        "message": (
            "⚠️ 🎤 I could not transcribe voice-message.ogg: "
            "the transcription server failed (HTTP 500)."
        ),
        "ref": "v1",
    }
    await _nothing_sent(client, fake_openai)
    assert len(fake_openai.transcription_requests) == 1
    assert "boom" not in str(client.seen)

    # Typed text beside it still goes, with the warning: only what was heard is missing.
    fake_openai.transcription_failures.append(ScriptedReply("error", status=500, body=b"{}"))
    fake_openai.reply_text("Noted.")
    await client.send(type="message", text="and this", attachments=[note["id"]], ref="v2")
    frames = await client.until("done")
    warning = next(f for f in frames if f["type"] == "notice")
    assert warning["ref"] == "v2" and warning["text"].startswith("⚠️ 🎤 I could not transcribe")
    shown = next(f for f in frames if f["type"] == "user_message")
    assert shown["text"] == "and this" and shown["attachments"] == []
    assert _asked(fake_openai) == "and this"
    await client.close()


async def test_a_voice_mark_cannot_be_attached_or_forged(
    http, voice_notes, fake_openai: FakeOpenAIServer
):
    """The mark beside a voice note is hidden: no message names it."""
    server, client_http = await http(voice=voice_notes())
    conversation = await _conversation(client_http)
    note = (await _upload(client_http, conversation, "voice-message.ogg", OGG)).json()
    client = await server.client(conversation)
    await client.send(type="message", text="", attachments=[f".{note['id']}.voice"], ref="m")
    error = (await client.until("error"))[-1]
    assert error["code"] == "invalid" and error["ref"] == "m"
    await _nothing_sent(client, fake_openai)
    await client.close()


async def test_a_voice_message_answers_the_open_question(
    http,
    voice_notes,
    fake_openai: FakeOpenAIServer,
):
    """The agent asks "Which size?" and the person answers with the page's microphone:
    the voice note was heard, then queued as a new message behind the turn that waited
    for that very answer, which never came (found by review on 2026-12-07)."""
    server, client_http = await http(voice=voice_notes())
    conversation = await _conversation(client_http)
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which size?"}))
    fake_openai.reply_text("Large it is.")
    client = await server.client(conversation)
    await client.send(type="message", text="order a coffee")
    question = (await client.until("agent_question"))[-1]

    # The person answers with the page's microphone button: an upload, then a message.
    uploaded = await _upload(client_http, conversation, "voice-message.ogg", OGG, seconds=1.0)
    assert uploaded.status_code == 201, uploaded.text
    fake_openai.transcribe("large")
    await client.send(type="message", text="", attachments=[uploaded.json()["id"]], ref="v1")

    frames = await client.until("done")
    [answered] = [f for f in frames if f["type"] == "question_answered"]
    assert answered["request_id"] == question["request_id"] and "large" in answered["answer"]
    # Its ref answered too, as taken and not queued: the page's microphone leaves its
    # "Transcribing…" (found by review).
    assert [(f["type"], f.get("queued_id")) for f in frames if f.get("ref") == "v1"] == [
        ("accepted", None)
    ]
    assert frames[-1]["content"] == "Large it is."
    await client.close()


async def test_words_with_a_file_answering_the_question_are_acknowledged_by_their_ref(
    http,
    fake_openai: FakeOpenAIServer,
):
    """Words with a file answer the question; the page keeps the message's draft until
    something answers its ref (found by review on 2026-12-07)."""
    server, client_http = await http()
    conversation = await _conversation(client_http)
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which file?"}))
    fake_openai.reply_text("Got it.")
    client = await server.client(conversation)
    await client.send(type="message", text="read my notes")
    await client.until("agent_question")
    uploaded = await _upload(client_http, conversation, "notes.txt", b"milk", voice=False)
    assert uploaded.status_code == 201, uploaded.text
    await client.send(
        type="message", text="this one", attachments=[uploaded.json()["id"]], ref="m1"
    )
    await client.until("done")
    await client.send(type="ping", ref="after")
    await client.until("pong", ref="after")
    [answered] = [f for f in client.seen if f.get("type") == "question_answered"]
    assert "this one" in answered["answer"] and "notes.txt" in answered["answer"]
    assert [(f["type"], f.get("queued_id")) for f in client.seen if f.get("ref") == "m1"] == [
        ("accepted", None)
    ]
    await client.close()
