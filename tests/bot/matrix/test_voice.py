"""Voice messages on Matrix (``m.audio``), heard through the fake transcription server."""

from __future__ import annotations

from tests.bot.matrix.conftest import bodies, bot_messages, direct_room, joined, until
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


async def test_a_voice_file_larger_than_it_says_is_read_no_further_than_the_limit(
    make_service, accounts, fake_openai: FakeOpenAIServer
):
    """A voice message giving no size, whose file is 8 MB for a 1 MB limit: matrix-nio
    read it whole into memory before it was measured (found by review on 2026-12-07)."""
    service = await make_service(
        transcribe_model="whisper-1",
        transcribe_base_url=fake_openai.base_url,
        voice_max_bytes=1024 * 1024,
    )
    messages = service.matrix.adapter.messages
    real_media, read = messages._media, []

    async def measured(url: str) -> bytes:
        data = await real_media(url)
        read.append(len(data))
        return data

    messages._media = measured
    room = direct_room(accounts)
    await until(lambda: joined(accounts.alice, room, accounts.bot.user_id))
    url = accounts.alice.upload(b"OggS" + bytes(8 * 1024 * 1024), "audio/ogg", "voice.ogg")
    content = {
        "msgtype": "m.audio",
        "body": "Voice message",
        "url": url,
        "info": {"mimetype": "audio/ogg", "duration": 3000},  # no size
        "org.matrix.msc3245.voice": {},
    }
    accounts.alice.send(room, content)
    said = await until(lambda: bodies(accounts.alice, room, accounts.bot.user_id))
    assert "too large to transcribe (the limit is 1 MB)" in said[0]
    assert read == [1024 * 1024 + 1]
    assert fake_openai.transcription_requests == []


async def test_voice_on_makes_replies_voice_messages(
    make_service, accounts, fake_openai: FakeOpenAIServer
):
    await make_service(speech_model="tts-1", speech_base_url=fake_openai.base_url)
    room = direct_room(accounts)
    await until(lambda: joined(accounts.alice, room, accounts.bot.user_id))
    accounts.alice.say(room, "/voice on")
    await until(
        lambda: any(
            "voice messages" in b for b in bodies(accounts.alice, room, accounts.bot.user_id)
        )
    )
    accounts.alice.say(room, "hello aloud")

    def audio():
        for m in bot_messages(accounts.alice, room, accounts.bot.user_id):
            if m["content"].get("msgtype") == "m.audio":
                return m["content"]
        return None

    content = await until(audio)
    assert "org.matrix.msc3245.voice" in content
    server, media = content["url"].removeprefix("mxc://").split("/", 1)
    downloaded = accounts.alice.download(server, media)
    assert downloaded.startswith(b"OggS") and b"OpusHead" in downloaded
    assert fake_openai.speech_requests[-1]["input"] == "echo: hello aloud"


async def test_a_speech_failure_sends_the_text(
    make_service, accounts, fake_openai: FakeOpenAIServer
):
    from tests.fakes.openai_server import ScriptedReply

    await make_service(speech_model="tts-1", speech_base_url=fake_openai.base_url)
    room = direct_room(accounts)
    await until(lambda: joined(accounts.alice, room, accounts.bot.user_id))
    accounts.alice.say(room, "/voice on")
    await until(
        lambda: any(
            "voice messages" in b for b in bodies(accounts.alice, room, accounts.bot.user_id)
        )
    )
    fake_openai.speech_failures.append(ScriptedReply("error", status=500, body=b"{}"))
    accounts.alice.say(room, "say it")
    await until(lambda: "echo: say it" in bodies(accounts.alice, room, accounts.bot.user_id))


async def test_the_caption_of_an_audio_message_reaches_the_model_with_its_transcript(
    make_service, accounts, fake_openai: FakeOpenAIServer
):
    """A captioned m.audio (MSC2530: ``filename`` the file, ``body`` the caption, as
    Element X sends it) lost its caption: the model got the transcript alone, and the
    person's instruction was dropped (found by review on 2026-12-07)."""
    await make_service(transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url)
    room = direct_room(accounts)
    await until(lambda: joined(accounts.alice, room, accounts.bot.user_id))
    fake_openai.transcribe("we agreed to ship on Tuesday")
    url = accounts.alice.upload(OGG, "audio/ogg", "standup.ogg")
    accounts.alice.send(
        room,
        {
            "msgtype": "m.audio",
            "body": "Translate this into French",
            "filename": "standup.ogg",
            "url": url,
            "info": {"mimetype": "audio/ogg", "duration": 3000, "size": len(OGG)},
        },
    )
    said = await until(
        lambda: (b := bodies(accounts.alice, room, accounts.bot.user_id)) and len(b) >= 2 and b
    )
    assert said[0] == "🎤 “we agreed to ship on Tuesday”"
    assert said[1].startswith("echo: Translate this into French\nwe agreed to ship on Tuesday")
