"""Voice notes on Telegram, on both bindings: heard through a transcription server (the
fake OpenAI-compatible one, real multipart over HTTP), said back, and given to the model."""

from __future__ import annotations

import logging

import pytest

from tests.bot.telegram_contract.conftest import ALICE, eventually, texts
from tests.bot.telegram_contract.test_message_kinds import only_reply, private
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply

OGG = b"OggS\x00\x02" + bytes(range(200))  # the bytes the fake Bot API serves for the note


def voice(file_id: str = "v1", duration: int = 3, size: int | None = None) -> dict:
    note = {"file_id": file_id, "file_unique_id": f"{file_id}u", "duration": duration}
    note["mime_type"] = "audio/ogg"
    if size is not None:
        note["file_size"] = size
    return note


@pytest.fixture
async def heard(start_service, fake_openai: FakeOpenAIServer):
    """The service with transcription at the fake OpenAI server (its own key)."""
    return await start_service(
        transcribe_model="whisper-1",
        transcribe_base_url=fake_openai.base_url,
        transcribe_api_key="sk-voice-secret-123",
    )


async def test_a_voice_note_is_heard_said_back_and_answered(heard, telegram, model, fake_openai):
    telegram.add_file("v1", OGG)
    fake_openai.transcribe("Remind me to buy milk")
    private(telegram, voice=voice())

    await eventually(lambda: answered(telegram, "echo: Remind me to buy milk"))

    said = texts(telegram, ALICE)
    assert said[0] == "🎤 “Remind me to buy milk”"
    upload = fake_openai.transcription_requests[0]
    assert upload["model"] == "whisper-1" and upload["audio"] == OGG
    assert upload["content_type"] == "audio/ogg" and upload["filename"].endswith(".ogg")
    assert upload["authorization"] == "Bearer sk-voice-secret-123"
    assert "Remind me to buy milk" in received_last(model)
    assert "uploads/telegram/" in received_last(model)  # the audio kept as its reference


def answered(telegram, start: str) -> bool:
    return any(t.startswith(start) for t in texts(telegram, ALICE))


def received_last(model) -> str:
    messages = model.requests[-1][0]
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


async def test_an_audio_file_is_heard_too(heard, telegram, model, fake_openai):
    telegram.add_file("a1", b"ID3" + bytes(100))
    fake_openai.transcribe("Chapter one")
    audio = {"file_id": "a1", "file_unique_id": "a1u", "duration": 5, "file_name": "talk.mp3"}
    private(telegram, audio=audio)
    await eventually(lambda: answered(telegram, "echo: Chapter one"))
    assert fake_openai.transcription_requests[0]["filename"] == "talk.mp3"


async def test_without_transcription_one_line_says_how_to_set_it_up(start_service, telegram, model):
    await start_service()
    telegram.add_file("v1", OGG)
    private(telegram, voice=voice())
    reply = await only_reply(telegram)
    assert "no transcription is set up" in reply and "TRANSCRIBE_MODEL" in reply
    assert len(model.requests) == 1  # the ping alone


async def test_a_voice_note_too_long_is_refused_before_download(
    start_service, telegram, model, fake_openai
):
    await start_service(
        transcribe_model="whisper-1",
        transcribe_base_url=fake_openai.base_url,
        voice_max_seconds=60,
    )
    telegram.add_file("v1", OGG)
    private(telegram, voice=voice(duration=3600))
    reply = await only_reply(telegram)
    assert "3600 s long; I transcribe at most 60 s" in reply
    assert telegram.calls_to("getFile") == []
    assert fake_openai.transcription_requests == []


async def test_a_50_mb_audio_file_is_refused_before_download(heard, telegram, fake_openai):
    audio = {"file_id": "big", "file_unique_id": "bigu", "file_size": 50 * 1024 * 1024}
    private(telegram, audio=audio)
    reply = await only_reply(telegram)
    assert "too large to transcribe (the limit is 20 MB)" in reply
    assert telegram.calls_to("getFile") == []


async def test_an_empty_voice_note_gets_a_clear_line(heard, telegram, model, fake_openai):
    telegram.add_file("v0", b"")
    private(telegram, voice=voice("v0"))
    reply = await only_reply(telegram)
    assert "I could not transcribe" in reply and "empty" in reply
    assert fake_openai.transcription_requests == []


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (ScriptedReply("error", status=500, body=b'{"error": "boom"}'), "failed (HTTP 500)"),
        (ScriptedReply("raw", body=b"<html>not json</html>"), "holds no text"),
        (
            ScriptedReply("error", status=400, body=b'{"error": "Invalid file format"}'),
            "failed (HTTP 400)",
        ),
        (ScriptedReply("error", status=401, body=b"{}"), "refused its key (HTTP 401)"),
    ],
    ids=["500", "not-json", "corrupted-ogg", "bad-key"],
)
async def test_a_failing_transcription_server_is_one_sentence_and_never_the_key(
    heard, telegram, model, fake_openai, caplog, failure, said
):
    caplog.set_level(logging.DEBUG)
    fake_openai.transcription_failures.append(failure)
    telegram.add_file("v1", OGG)
    private(telegram, voice=voice())
    reply = await only_reply(telegram)
    assert said in reply and reply.startswith("⚠️ 🎤 I could not transcribe")
    assert "Traceback" not in reply and "Error" not in reply
    assert "sk-voice-secret-123" not in caplog.text
    assert len(model.requests) == 1  # nothing half-heard reached the model


async def test_a_voice_note_with_a_caption_keeps_both(heard, telegram, model, fake_openai):
    telegram.add_file("v1", OGG)
    fake_openai.transcribe("and the eggs")
    private(telegram, voice=voice(), caption="Shopping:")
    await eventually(lambda: any("and the eggs" in t for t in texts(telegram, ALICE)[1:]))
    assert "Shopping:" in received_last(model) and "and the eggs" in received_last(model)
