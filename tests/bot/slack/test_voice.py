"""Audio clips and audio files on Slack, downloaded with the bot token from the fake's
``url_private`` and heard through the fake transcription server; replies spoken through
the fake speech server and uploaded as audio files (the external upload flow)."""

from __future__ import annotations

import asyncio
from typing import Any

from bot.serve import Service
from bot.slack.messages import FILES_NOT_READ
from engine.approval import RuleStore
from engine.llm.scripted import text as reply
from engine.llm.scripted import tool_call
from tests.bot.delivery.fakes import outbox_rows
from tests.bot.slack.conftest import ALICE, GENERAL, MakeService, texts, until
from tests.engine.hub.conftest import EchoModel
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply
from tests.fakes.slack_server import FakeSlackServer, Message, Upload

CLIP = b"\x1aE\xdf\xa3" + bytes(400)  # a webm header, as Slack records clips


def said(fake: FakeSlackServer) -> list[str]:
    return [m.text for m in fake.messages(fake.dm_channel(ALICE), include_deleted=False)]


async def test_an_audio_clip_is_heard_said_back_and_answered(
    fake: FakeSlackServer, make_service, fake_openai: FakeOpenAIServer
) -> None:
    await make_service(transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url)
    fake_openai.transcribe("order more coffee")
    fake.dm(ALICE, "", files=[("audio_message.webm", CLIP, "audio/webm", 3200)])
    await until(lambda: len(said(fake)) >= 2)
    assert said(fake)[0] == "🎤 “order more coffee”"
    assert said(fake)[1].startswith("echo: order more coffee")
    assert fake_openai.transcription_requests[0]["audio"] == CLIP


async def test_a_clip_larger_than_one_network_read_is_heard_whole(
    fake: FakeSlackServer, make_service, fake_openai: FakeOpenAIServer
) -> None:
    """Until 2026-12-06 the download kept what one read gave: a 2 MB clip reached the
    transcriber as its first 32 KB (found by review)."""
    await make_service(transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url)
    fake_openai.transcribe("order more coffee")
    big = CLIP + bytes(range(256)) * 8000
    fake.dm(ALICE, "", files=[("audio_message.webm", big, "audio/webm", 3200)])
    await until(lambda: fake_openai.transcription_requests)
    assert fake_openai.transcription_requests[0]["audio"] == big


async def test_a_clip_whose_download_breaks_off_is_said_and_the_words_still_answered(
    fake: FakeSlackServer, make_service, fake_openai: FakeOpenAIServer
) -> None:
    """The file's server closed the connection before its Content-Length: aiohttp's error
    went past the download's handling, and the message's words were lost behind "something
    went wrong" (found by review)."""

    async def breaking_off(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: audio/webm\r\nContent-Length: 5000")
        writer.write(b"\r\n\r\n" + CLIP[:100])
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(breaking_off, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await make_service(transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url)
    dm = fake.dm_channel(ALICE)
    clip = {
        "id": "F0CUT",
        "name": "audio_message.webm",
        "mimetype": "audio/webm",
        "size": 5000,
        "subtype": "slack_audio",
        "duration_ms": 3000,
        "url_private": f"http://127.0.0.1:{port}/files-pri/T1-F0CUT/audio_message.webm",
    }
    _clip_in_a_dm(fake, dm, clip, "1999999999.000100")
    try:
        await until(lambda: any(t.startswith("echo:") for t in said(fake)))
    finally:
        server.close()
    assert said(fake)[0] == "⚠️ I could not download audio_message.webm."
    assert said(fake)[1].startswith("echo: please summarise my clip")
    assert fake_openai.transcription_requests == []


async def test_a_clip_larger_than_its_message_said_is_told_too_large(
    fake: FakeSlackServer, make_service, fake_openai: FakeOpenAIServer
) -> None:
    """A clip whose message gave no size, found too large while downloading, was "I could
    not download" (found by review on 2026-12-07): it is told too large, as one whose
    size was given."""

    async def large(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: audio/webm\r\n")
        writer.write(b"Content-Length: 5000\r\n\r\n" + bytes(5000))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(large, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await make_service(
        transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url, voice_max_bytes=1024
    )
    clip = {
        "id": "F0BIG",
        "name": "audio_message.webm",
        "mimetype": "audio/webm",
        "subtype": "slack_audio",
        "url_private": f"http://127.0.0.1:{port}/files-pri/T1-F0BIG/audio_message.webm",
    }
    _clip_in_a_dm(fake, fake.dm_channel(ALICE), clip, "1999999999.000200")
    try:
        await until(lambda: any(t.startswith("echo:") for t in said(fake)))
    finally:
        server.close()
    assert "audio_message.webm is too large to transcribe" in said(fake)[0], said(fake)
    assert fake_openai.transcription_requests == []


async def test_a_clip_too_long_is_refused_before_download(
    fake: FakeSlackServer, make_service, fake_openai: FakeOpenAIServer
) -> None:
    await make_service(
        transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url, voice_max_seconds=5
    )
    fake.dm(ALICE, "", files=[("audio_message.webm", CLIP, "audio/webm", 90_000)])
    await until(lambda: said(fake))
    assert "90 s long; I transcribe at most 5 s" in said(fake)[0]
    assert fake_openai.transcription_requests == []


async def test_an_audio_file_alone_without_transcription_reaches_the_agent(
    fake: FakeSlackServer, make_service
) -> None:
    """Kept as a file, and then dropped without a word: it had no text (until 2026-12-07;
    found by review). The agent gets it, as on Telegram and Discord."""
    await make_service()
    fake.dm(ALICE, "", files=[("meeting.mp3", b"ID3" + bytes(400), "audio/mpeg", None)])
    await until(lambda: said(fake))
    assert "meeting.mp3" in said(fake)[-1]


async def test_other_files_are_still_not_read(fake: FakeSlackServer, make_service) -> None:
    await make_service()
    fake.dm(ALICE, "", files=[("notes.pdf", b"%PDF-1.4", "application/pdf", None)])
    await until(lambda: said(fake))
    assert "cannot read files sent on Slack" in said(fake)[0]


# -- voice out: /voice on, replies as audio files -----------------------------------------


def voice_files(fake: FakeSlackServer, channel: str, thread_ts: str | None = None) -> list[Message]:
    return [m for m in fake.messages(channel, thread_ts, include_deleted=False) if m.files]


def uploaded(fake: FakeSlackServer, message: Message) -> Upload:
    return fake.uploads[message.files[0]["id"]]


async def speaking(make_service: MakeService, fake_openai: FakeOpenAIServer) -> Service:
    return await make_service(speech_model="tts-1", speech_base_url=fake_openai.base_url)


async def voice_on(fake: FakeSlackServer) -> None:
    fake.slash(fake.dm_channel(ALICE), ALICE, "/chathub", "voice on")
    await until(lambda: any("now come as voice messages" in m.text for m in fake.ephemerals(ALICE)))


async def outbox_payloads(service: Service) -> list[dict[str, Any]]:
    assert service.engine is not None
    return [dict(row["payload"]) for row in await outbox_rows(service.engine.store, "slack")]


async def test_voice_on_makes_replies_audio_files_and_off_back(
    fake: FakeSlackServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    service = await speaking(make_service, fake_openai)
    await voice_on(fake)
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "hello aloud")

    await until(lambda: voice_files(fake, dm))
    message = voice_files(fake, dm)[0]
    assert message.text == "" and message.files[0]["name"] == "voice-message.ogg"
    assert message.files[0]["title"] == "Voice message"
    upload = uploaded(fake, message)
    assert upload.data is not None and upload.data.startswith(b"OggS")
    assert b"OpusHead" in upload.data and upload.shared_in == dm
    methods = [c.method for c in fake.calls if c.method.startswith("files.")]
    assert methods == ["files.getUploadURLExternal", "files.completeUploadExternal"]
    assert fake_openai.speech_requests[-1]["input"] == "echo: hello aloud"
    assert "echo: hello aloud" not in said(fake)
    rows = [p for p in await outbox_payloads(service) if p.get("voice")]
    assert rows == [{"text": "echo: hello aloud", "voice": "echo: hello aloud"}]

    fake.slash(dm, ALICE, "/chathub", "voice off")
    await until(lambda: any("now come as text" in m.text for m in fake.ephemerals(ALICE)))
    fake.dm(ALICE, "and now?")
    await until(lambda: "echo: and now?" in said(fake))
    assert len(voice_files(fake, dm)) == 1


async def test_a_speech_failure_or_a_refused_upload_sends_the_text_instead(
    fake: FakeSlackServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    await speaking(make_service, fake_openai)
    await voice_on(fake)
    fake_openai.speech_failures.append(ScriptedReply("error", status=500, body=b"{}"))
    fake.dm(ALICE, "say it")
    await until(lambda: "echo: say it" in said(fake))
    not_ogg = ScriptedReply("raw", body=b"ID3" + bytes(64), content_type="audio/mpeg")
    fake_openai.speech_failures.append(not_ogg)
    fake.dm(ALICE, "say it again")
    await until(lambda: "echo: say it again" in said(fake))
    fake.scopes = fake.scopes - {"files:write"}  # an app installed before voice replies
    fake.dm(ALICE, "and once more")
    await until(lambda: "echo: and once more" in said(fake))
    assert voice_files(fake, fake.dm_channel(ALICE)) == []
    assert len(fake_openai.speech_requests) == 3  # each spoken once, then the text


async def test_a_reply_in_a_thread_is_an_audio_file_in_that_thread(
    fake: FakeSlackServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    await speaking(make_service, fake_openai)
    asked = fake.mention(GENERAL, ALICE, "plan my week")
    await until(lambda: texts(fake, GENERAL, asked.ts) == ["echo: plan my week"])
    fake.thread_message(GENERAL, ALICE, " /voice on", asked.ts)  # Slack sends " /…" as text
    await until(lambda: any("voice messages" in t for t in texts(fake, GENERAL, asked.ts)))
    fake.thread_message(GENERAL, ALICE, "and monday?", asked.ts)
    await until(lambda: voice_files(fake, GENERAL, asked.ts))
    message = voice_files(fake, GENERAL, asked.ts)[0]
    assert message.thread_ts == asked.ts
    assert fake_openai.speech_requests[-1]["input"] == "echo: and monday?"
    complete = next(c for c in fake.calls if c.method == "files.completeUploadExternal")
    assert (complete.params["channel_id"], complete.params["thread_ts"]) == (GENERAL, asked.ts)


async def test_the_agent_sends_an_audio_file_with_its_tool(
    fake: FakeSlackServer,
    make_service: MakeService,
    fake_openai: FakeOpenAIServer,
    model: EchoModel,
) -> None:
    service = await speaking(make_service, fake_openai)
    assert service.engine is not None
    await RuleStore(service.engine.store.db).add_rule("send_voice_message", "allow")
    model.add(
        tool_call("send_voice_message", '{"text": "Good **morning**. It is sunny."}', "v1"),
        reply("I said it aloud."),
    )
    fake.dm(ALICE, "say good morning")
    await until(lambda: "I said it aloud." in said(fake))
    assert len(voice_files(fake, fake.dm_channel(ALICE))) == 1
    assert fake_openai.speech_requests[-1]["input"] == "Good morning. It is sunny."
    tool_result = [m for m in model.requests[-1][0] if m["role"] == "tool"][-1]["content"]
    assert "Sent as 1 voice message." in tool_result


async def test_a_long_answer_is_spoken_in_parts_cut_between_sentences(
    fake: FakeSlackServer,
    make_service: MakeService,
    fake_openai: FakeOpenAIServer,
    model: EchoModel,
) -> None:
    sentence = "This sentence is about forty characters. "
    model.add(reply(sentence * 120))  # about 5,000 characters
    await speaking(make_service, fake_openai)
    await voice_on(fake)
    fake.dm(ALICE, "tell me everything")
    await until(lambda: len(voice_files(fake, fake.dm_channel(ALICE))) == 3)
    inputs = [r["input"] for r in fake_openai.speech_requests]
    assert all(len(i) <= 2000 and i.endswith("characters.") for i in inputs)
    assert " ".join(inputs) == (sentence * 120).strip()


async def test_a_file_beside_an_audio_clip_is_said_to_be_unread(
    fake: FakeSlackServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    """The clip was heard and the PDF beside it dropped without a word (found by review on
    2026-12-07); alone it gets ``FILES_NOT_READ``."""
    await make_service(transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url)
    fake_openai.transcribe("summarise the attached notes")
    fake.dm(
        ALICE,
        "",
        files=[
            ("audio_message.webm", CLIP, "audio/webm", 3200),
            ("notes.pdf", b"%PDF-1.4", "application/pdf", None),
        ],
    )
    await until(lambda: any(t.startswith("echo:") for t in said(fake)))
    assert any(FILES_NOT_READ in t for t in said(fake)), said(fake)


def _clip_in_a_dm(fake: FakeSlackServer, dm: str, clip: dict[str, Any], ts: str) -> None:
    """Alice's DM asking about ``clip`` (a file whose server the test runs)."""
    fake.push_event(
        {
            "type": "message",
            "channel": dm,
            "channel_type": "im",
            "user": ALICE,
            "text": "please summarise my clip",
            "ts": ts,
            "event_ts": ts,
            "files": [clip],
        }
    )
