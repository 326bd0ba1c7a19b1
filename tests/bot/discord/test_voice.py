"""Voice messages and audio attachments on Discord, heard through the fake transcription
server, and replies spoken as Discord voice messages through the fake speech server
(discord.py unpatched against the fake Discord)."""

from __future__ import annotations

from typing import Any

from bot.serve import Service
from engine.approval import RuleStore
from engine.llm.scripted import text as reply
from engine.llm.scripted import tool_call
from tests.bot.delivery.fakes import outbox_rows
from tests.bot.discord.conftest import (
    ALICE,
    GENERAL,
    GUILD,
    MakeService,
    discord_of,
    texts,
    until,
)
from tests.bot.platform_contract.scripts import tool_results
from tests.engine.hub.conftest import EchoModel
from tests.fakes.discord_server import FakeDiscordServer, SentMessage
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply

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


# -- voice out: /voice on, replies as Discord voice messages ------------------------------


def voice_messages(fake: FakeDiscordServer, channel: int | str) -> list[SentMessage]:
    return [m for m in fake.messages(channel, include_deleted=False) if m.is_voice_message]


async def speaking(make_service: MakeService, fake_openai: FakeOpenAIServer) -> Service:
    return await make_service(speech_model="tts-1", speech_base_url=fake_openai.base_url)


async def voice_on(fake: FakeDiscordServer, channel: str) -> None:
    fake.dm(ALICE, "/voice on")
    await until(lambda: any("now come as voice messages" in t for t in texts(fake, channel)))


async def outbox_payloads(service: Service) -> list[dict[str, Any]]:
    assert service.engine is not None
    return [dict(row["payload"]) for row in await outbox_rows(service.engine.store, "discord")]


async def test_voice_on_makes_replies_voice_messages_and_off_back(
    fake: FakeDiscordServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    service = await speaking(make_service, fake_openai)
    channel = fake.dm_channel_id(ALICE)
    await voice_on(fake, channel)
    fake.dm(ALICE, "hello aloud")

    await until(lambda: voice_messages(fake, channel))
    sent = voice_messages(fake, channel)[0]
    assert sent.content == "" and sent.flags == 8192
    assert sent.voice is not None
    audio, seconds, waveform = sent.voice
    assert audio.startswith(b"OggS") and b"OpusHead" in audio
    assert seconds == 0.5 and len(waveform) == 5  # half a second: one sample a tenth
    upload = sent.files[0]
    assert (upload.field, upload.filename, upload.content_type) == (
        "files[0]",
        "voice-message.ogg",
        "audio/ogg",
    )
    assert sent.attachments[0]["filename"] == "voice-message.ogg"
    assert fake_openai.speech_requests[-1]["input"] == "echo: hello aloud"
    assert "echo: hello aloud" not in texts(fake, channel)
    rows = [p for p in await outbox_payloads(service) if p.get("voice")]
    assert [{k: v for k, v in row.items() if k != "nonce"} for row in rows] == [
        {"content": "echo: hello aloud", "voice": "echo: hello aloud"}
    ]
    assert rows[0]["nonce"]  # the row's, for every try (see the lost answer below)

    fake.dm(ALICE, "/voice off")
    await until(lambda: any("now come as text" in t for t in texts(fake, channel)))
    fake.dm(ALICE, "and now?")
    await until(lambda: "echo: and now?" in texts(fake, channel))
    assert len(voice_messages(fake, channel)) == 1


async def test_a_voice_message_whose_answer_was_lost_is_posted_once(
    fake: FakeDiscordServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    """Discord took the voice message and its answer was lost: it was posted again, with
    no nonce to tell it was the same (found by review)."""
    service = await speaking(make_service, fake_openai)
    channel = fake.dm_channel_id(ALICE)
    await voice_on(fake, channel)
    fake.lose_answer_next("POST /channels/{channel_id}/messages", matching='"flags": 8192')
    fake.dm(ALICE, "hello aloud")
    await until(lambda: voice_messages(fake, channel))
    await until(lambda: len(fake_openai.speech_requests) >= 2)  # spoken for the second try
    await discord_of(service).drain()
    assert len(voice_messages(fake, channel)) == 1


async def test_a_speech_failure_sends_the_text_instead(
    fake: FakeDiscordServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    await speaking(make_service, fake_openai)
    channel = fake.dm_channel_id(ALICE)
    await voice_on(fake, channel)
    fake_openai.speech_failures.append(ScriptedReply("error", status=500, body=b"{}"))
    fake.dm(ALICE, "say it")
    await until(lambda: "echo: say it" in texts(fake, channel))
    not_ogg = ScriptedReply("raw", body=b"ID3" + bytes(64), content_type="audio/mpeg")
    fake_openai.speech_failures.append(not_ogg)
    fake.dm(ALICE, "say it again")
    await until(lambda: "echo: say it again" in texts(fake, channel))
    assert voice_messages(fake, channel) == []
    assert len(fake_openai.speech_requests) == 2  # each spoken once, then the text


async def test_a_reply_in_a_thread_is_a_voice_message_in_that_thread(
    fake: FakeDiscordServer, make_service: MakeService, fake_openai: FakeOpenAIServer
) -> None:
    await make_service(
        speech_model="tts-1",
        speech_base_url=fake_openai.base_url,
        discord_thread_channel_ids=str(GENERAL),
    )
    thread = fake.channel_message(GUILD, GENERAL, ALICE, "plan my week", mentions_bot=True)["id"]
    await until(lambda: texts(fake, thread) == ["echo: plan my week"])
    await until(lambda: "voice" in {c["name"] for c in fake.commands})
    fake.slash(thread, ALICE, "voice", {"text": "on"})
    await until(lambda: any("voice messages" in m.content for m in fake.messages(thread)))
    fake.channel_message(GUILD, thread, ALICE, "and monday?", mentions_bot=True)
    await until(lambda: voice_messages(fake, thread))
    assert fake_openai.speech_requests[-1]["input"] == "echo: and monday?"
    assert voice_messages(fake, GENERAL) == []


async def test_the_agent_sends_a_voice_message_with_its_tool(
    fake: FakeDiscordServer,
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
    channel = fake.dm_channel_id(ALICE)
    fake.dm(ALICE, "say good morning")
    await until(lambda: "I said it aloud." in texts(fake, channel))
    assert len(voice_messages(fake, channel)) == 1
    assert fake_openai.speech_requests[-1]["input"] == "Good morning. It is sunny."
    tool_result = [m for m in model.requests[-1][0] if m["role"] == "tool"][-1]["content"]
    assert "Sent as 1 voice message." in tool_result


async def test_a_long_answer_is_spoken_in_parts_cut_between_sentences(
    fake: FakeDiscordServer,
    make_service: MakeService,
    fake_openai: FakeOpenAIServer,
    model: EchoModel,
) -> None:
    sentence = "This sentence is about forty characters. "
    model.add(reply(sentence * 120))  # about 5,000 characters
    await speaking(make_service, fake_openai)
    channel = fake.dm_channel_id(ALICE)
    await voice_on(fake, channel)
    fake.dm(ALICE, "tell me everything")
    await until(lambda: len(voice_messages(fake, channel)) == 3)
    inputs = [r["input"] for r in fake_openai.speech_requests]
    assert all(len(i) <= 2000 and i.endswith("characters.") for i in inputs)
    assert " ".join(inputs) == (sentence * 120).strip()


async def test_a_voice_message_answers_the_agents_question(
    fake: FakeDiscordServer,
    make_service: MakeService,
    fake_openai: FakeOpenAIServer,
    model: EchoModel,
) -> None:
    """The agent asks; Alice answers aloud. What was heard is the answer (it was taken
    as a new message behind the turn waiting for an answer, which never came)."""
    ask = tool_call("ask_user_clarification", '{"question": "Which room?"}', "q1")
    model.add(ask, reply("Booked the blue room."))
    await make_service(transcribe_model="whisper-1", transcribe_base_url=fake_openai.base_url)
    channel = fake.dm(ALICE, "book a room")["channel_id"]
    await until(lambda: any(t.startswith("**❓ Question**") for t in texts(fake, channel)))
    fake_openai.transcribe("the blue one")
    fake.dm(ALICE, "", attachments=[("voice-message.ogg", OGG, "audio/ogg")], voice_seconds=2.0)
    await until(lambda: "Booked the blue room." in texts(fake, channel))
    [answer] = tool_results(model)
    assert answer.startswith("the blue one\n\n[SYSTEM INFO] The user attached files")


async def test_a_file_sent_with_the_answer_to_a_question_is_named_in_it(
    fake: FakeDiscordServer, make_service: MakeService, model: EchoModel
) -> None:
    """Alice answers "this one" with the log attached: the file is kept in the workspace
    and the answer names it (it was neither saved nor told; found by review)."""
    ask = tool_call("ask_user_clarification", '{"question": "Which log?"}', "q1")
    model.add(ask, reply("Reading it."))
    await make_service()
    channel = fake.dm(ALICE, "look at my logs")["channel_id"]
    await until(lambda: any(t.startswith("**❓ Question**") for t in texts(fake, channel)))
    fake.dm(ALICE, "this one", attachments=[("app.log", b"ERROR disk full", "text/plain")])
    await until(lambda: "Reading it." in texts(fake, channel))
    [answer] = tool_results(model)
    assert answer.startswith("this one\n\n[SYSTEM INFO] The user attached files")
    assert f"uploads/discord/{channel}/" in answer and "app.log" in answer
