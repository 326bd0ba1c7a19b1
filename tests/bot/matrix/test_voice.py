"""Voice messages on Matrix (``m.audio``), heard through the fake transcription server."""

from __future__ import annotations

from tests.bot.matrix.conftest import bodies, direct_room, joined, until
from tests.fakes.openai_server import FakeOpenAIServer

OGG = b"OggS\x00\x02" + bytes(range(120))


def voice_message(person, room: str, *, seconds: int = 3, size: int | None = None) -> str:
    url = person.upload(OGG, "audio/ogg", "voice.ogg")
    info = {"mimetype": "audio/ogg", "duration": seconds * 1000, "size": size or len(OGG)}
    content = {
        "msgtype": "m.audio",
        "body": "Voice message",
        "url": url,
        "info": info,
        "org.matrix.msc3245.voice": {},
    }
    return person.send(room, content)


async def test_a_voice_message_is_heard_said_back_and_answered(
    make_service, accounts, fake_openai: FakeOpenAIServer
):
    await make_service(transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url)
    room = direct_room(accounts)
    await until(lambda: joined(accounts.alice, room, accounts.bot.user_id))
    fake_openai.transcribe("what is on my calendar")
    voice_message(accounts.alice, room)

    said = await until(
        lambda: (b := bodies(accounts.alice, room, accounts.bot.user_id)) and len(b) >= 2 and b
    )
    assert said[0] == "🎤 “what is on my calendar”"
    assert said[1].startswith("echo: what is on my calendar")
    assert fake_openai.transcription_requests[0]["audio"] == OGG


async def test_without_transcription_a_voice_message_says_how(make_service, accounts):
    await make_service()
    room = direct_room(accounts)
    await until(lambda: joined(accounts.alice, room, accounts.bot.user_id))
    voice_message(accounts.alice, room)
    said = await until(lambda: bodies(accounts.alice, room, accounts.bot.user_id))
    assert "no transcription is set up" in said[0]


async def test_a_voice_message_too_long_is_refused_before_download(
    make_service, accounts, fake_openai: FakeOpenAIServer
):
    await make_service(
        transcribe_model="whisper-1",
        transcribe_base_url=fake_openai.base_url,
        voice_max_seconds=60,
    )
    room = direct_room(accounts)
    await until(lambda: joined(accounts.alice, room, accounts.bot.user_id))
    voice_message(accounts.alice, room, seconds=900)
    said = await until(lambda: bodies(accounts.alice, room, accounts.bot.user_id))
    assert "900 s long; I transcribe at most 60 s" in said[0]
    assert fake_openai.transcription_requests == []
