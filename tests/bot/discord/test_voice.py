"""Voice messages and audio attachments on Discord, heard through the fake transcription
server (discord.py unpatched against the fake Discord)."""

from __future__ import annotations

from tests.bot.discord.conftest import ALICE, MakeService, texts, until
from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.openai_server import FakeOpenAIServer

OGG = b"OggS" + bytes(300)


async def test_a_voice_message_is_heard_said_back_and_answered(
    fake: FakeDiscordServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    await make_service(transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url)
    fake_openai.transcribe("book the meeting room")
    pushed = fake.dm(
        ALICE, "", attachments=[("voice-message.ogg", OGG, "audio/ogg")], voice_seconds=4.2
    )
    channel = pushed["channel_id"]
    await until(lambda: len(texts(fake, channel)) >= 2)
    said = texts(fake, channel)
    assert said[0] == "🎤 “book the meeting room”"
    assert said[1].startswith("echo: book the meeting room")
    upload = fake_openai.transcription_requests[0]
    assert upload["audio"] == OGG and upload["content_type"] == "audio/ogg"


async def test_a_voice_message_too_long_is_refused_before_download(
    fake: FakeDiscordServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    await make_service(
        transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url, voice_max_seconds=30
    )
    pushed = fake.dm(
        ALICE, "", attachments=[("voice-message.ogg", OGG, "audio/ogg")], voice_seconds=95
    )
    channel = pushed["channel_id"]
    await until(lambda: texts(fake, channel))
    assert "95 s long; I transcribe at most 30 s" in texts(fake, channel)[0]
    assert fake_openai.transcription_requests == []


async def test_without_transcription_a_voice_message_says_how(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    pushed = fake.dm(
        ALICE, "", attachments=[("voice-message.ogg", OGG, "audio/ogg")], voice_seconds=2
    )
    channel = pushed["channel_id"]
    await until(lambda: texts(fake, channel))
    assert "no transcription is set up" in texts(fake, channel)[0]
