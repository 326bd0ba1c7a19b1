"""Voice notes on Telegram, on both bindings: heard through a transcription server (the
fake OpenAI-compatible one, real multipart over HTTP), said back, and given to the model."""

from __future__ import annotations

import json
import logging

import pytest

from bot.telegram.rendering.cards import format_callback
from engine.llm.scripted import text, tool_call
from tests.bot.platform_contract.scripts import tool_results
from tests.bot.telegram_contract.conftest import ALICE, eventually, find, stop, texts
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


async def test_without_transcription_a_long_audio_file_is_kept_as_a_file(
    start_service, telegram, model
):
    """A sound file nothing would transcribe is any file (found by review on 2026-12-07:
    a 30-minute lecture was refused as too long to transcribe and never downloaded)."""
    await start_service()
    telegram.add_file("a1", b"ID3" + bytes(100))
    audio = {
        "file_id": "a1",
        "file_unique_id": "a1u",
        "duration": 1800,
        "file_name": "lecture.mp3",
        "mime_type": "audio/mpeg",
        "file_size": 103,
    }
    private(telegram, audio=audio, caption="summarise the attached lecture")
    await eventually(lambda: any(t.startswith("echo:") for t in texts(telegram, ALICE)))
    assert telegram.calls_to("getFile")
    assert "lecture.mp3" in received_last(model)
    assert not any("🎤" in t for t in texts(telegram, ALICE))


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


async def test_a_voice_note_that_gave_no_size_is_measured_once_downloaded(
    start_service, telegram, model, fake_openai
):
    """The Bot API's file_size is optional: a 100 KB note that gave none went to the
    transcription server past VOICE_MAX_BYTES (found by review)."""
    service = await start_service(
        transcribe_model="whisper-1",
        transcribe_base_url=fake_openai.base_url,
        voice_max_bytes=4096,
    )
    telegram.add_file("v1", OGG + bytes(100_000))
    private(telegram, voice=voice())
    reply = await only_reply(telegram)
    assert "too large to transcribe" in reply
    assert fake_openai.transcription_requests == []
    assert not list((service.hub.workspace_root / "uploads").rglob("*.ogg"))  # not kept


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


async def test_a_provider_added_while_running_is_used_by_the_next_note_and_removed_after(
    start_service, telegram, model, fake_openai, tmp_path, make_config
):
    """``chathub providers add`` in a shell while the service runs: no restart."""
    service = await start_service()
    service_config = make_config()
    url = service_config.settings.database_url
    telegram.add_file("v1", OGG)
    private(telegram, voice=voice())
    assert "no transcription is set up" in await only_reply(telegram)

    args = ["providers", "add", "local", "--base-url", fake_openai.base_url]
    args += ["--serves", "transcription", "--models", "whisper-small", "--key-env", "VOICE_KEY"]
    out = await shell(url, args, VOICE_KEY="sk-provider-key-999")
    assert "Added local" in out and "sk-provider-key-999" not in out
    await eventually(lambda: service.voice.endpoint_origin() == "local", within_s=5)

    fake_openai.transcribe("now I am heard")
    telegram.add_file("v2", OGG)
    private(telegram, voice=voice("v2"))
    await eventually(lambda: answered(telegram, "echo: now I am heard"))
    upload = fake_openai.transcription_requests[-1]
    assert upload["model"] == "whisper-small"
    assert upload["authorization"] == "Bearer sk-provider-key-999"

    assert "Removed local." in await shell(url, ["providers", "remove", "local"])
    await eventually(lambda: service.voice.endpoint_origin() is None, within_s=5)
    telegram.add_file("v3", OGG)
    private(telegram, voice=voice("v3"))
    await eventually(
        lambda: sum("no transcription is set up" in t for t in texts(telegram, ALICE)) == 2
    )


async def shell(database_url: str, argv: list[str], **env: str) -> str:
    """``chathub <argv>`` as the shell runs it (its own database connection)."""
    import argparse
    import io
    import os

    from bot.providers_cli import add_providers_parser, run_providers_command

    parser = argparse.ArgumentParser()
    add_providers_parser(parser.add_subparsers(dest="command"))
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        status = await run_providers_command(
            parser.parse_args(argv), database_url, out=out, err=err
        )
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert status == 0, err.getvalue()
    return out.getvalue()


# -- voice out: /voice on, replies as voice messages ------------------------------------


@pytest.fixture
async def speaking(start_service, fake_openai: FakeOpenAIServer):
    """The service with speech at the fake OpenAI server."""
    return await start_service(
        speech_model="tts-1", speech_base_url=fake_openai.base_url, speech_voice="nova"
    )


def voices(telegram) -> list:
    return [m for m in telegram.messages(ALICE) if m.voice is not None and not m.deleted]


async def test_voice_on_turns_replies_into_voice_messages_and_off_back(
    speaking, telegram, model, fake_openai
):
    private(telegram, text="/voice on")
    await eventually(lambda: any("now come as voice messages" in t for t in texts(telegram, ALICE)))
    private(telegram, text="hello there")

    await eventually(lambda: voices(telegram))
    audio = voices(telegram)[0].voice.data
    assert audio.startswith(b"OggS") and b"OpusHead" in audio
    assert fake_openai.speech_requests[0] == {
        "model": "tts-1",
        "input": "echo: hello there",
        "voice": "nova",
        "response_format": "opus",
    }
    assert not any(t.startswith("echo: hello there") for t in texts(telegram, ALICE))

    private(telegram, text="/voice off")
    await eventually(lambda: any("now come as text" in t for t in texts(telegram, ALICE)))
    private(telegram, text="and now?")
    await eventually(lambda: "echo: and now?" in texts(telegram, ALICE))
    assert len(voices(telegram)) == 1


async def test_a_spoken_reply_keeps_its_links_in_a_message_after_it(
    speaking, telegram, model, fake_openai
):
    """No one can follow an address heard: a bare one is said as its host, and every link
    comes written after the voice message (the spoken form dropped their targets, and
    the links were lost)."""
    from engine.llm.scripted import text as reply

    model.add(reply("Read [the docs](https://docs.example/start) and https://b.example/y."))
    private(telegram, text="/voice on")
    await eventually(lambda: any("voice messages" in t for t in texts(telegram, ALICE)))
    private(telegram, text="where do I start?")
    await eventually(lambda: any(t.startswith("🔗") for t in texts(telegram, ALICE)))
    assert [r["input"] for r in fake_openai.speech_requests] == ["Read the docs and b.example."]
    [shown] = [m for m in telegram.messages(ALICE) if m.text and m.text.startswith("🔗")]
    assert shown.text == "🔗 the docs\n🔗 https://b.example/y"
    assert {"type": "text_link", "url": "https://docs.example/start"}.items() <= next(
        e for e in shown.entities or [] if e["type"] == "text_link"
    ).items()
    sent = [m for m in telegram.messages(ALICE) if m.voice is not None or m is shown]
    assert sent[-1] is shown and sent[-2].voice is not None  # the links after the voice


async def test_a_speech_failure_sends_the_text_instead(speaking, telegram, model, fake_openai):
    private(telegram, text="/voice on")
    await eventually(lambda: any("voice messages" in t for t in texts(telegram, ALICE)))
    fake_openai.speech_failures.append(ScriptedReply("error", status=500, body=b"{}"))
    private(telegram, text="say it")
    await eventually(lambda: "echo: say it" in texts(telegram, ALICE))
    assert voices(telegram) == []


async def test_a_speech_failure_sends_the_replys_own_words(speaking, telegram, model, fake_openai):
    """The text sent was the spoken form cut between sentences: a code block's lines and
    indentation and a list's items ran together on one line (found by review on
    2026-12-07)."""
    from engine.llm.scripted import text as reply

    answer = (
        "Steps:\n1. Install it.\n2. Run it.\n\n"
        "```python\nfor x in items:\n    if x:\n        print(x)\n```"
    )
    model.add(reply(answer))
    private(telegram, text="/voice on")
    await eventually(lambda: any("voice messages" in t for t in texts(telegram, ALICE)))
    for _ in range(5):
        fake_openai.speech_failures.append(ScriptedReply("error", status=500, body=b"{}"))
    private(telegram, text="how?")
    await eventually(lambda: any("print(x)" in t for t in texts(telegram, ALICE)))
    [sent] = [m for m in telegram.messages(ALICE) if m.text and "print(x)" in m.text]
    assert voices(telegram) == []
    assert "1. Install it.\n2. Run it." in sent.text
    assert "for x in items:\n    if x:\n        print(x)" in sent.text
    assert any(e["type"] == "pre" for e in sent.entities or [])


async def test_a_part_longer_than_a_message_is_all_sent_when_speech_fails(
    speaking, telegram, model, fake_openai
):
    """A padded table renders a 2,000-character part into more than one Telegram message:
    when speech failed only the first was sent, the rest of the reply lost (found by
    review on 2026-12-06)."""
    from engine.llm.scripted import text as reply
    from voice import spoken

    rows = ["| name | description |", "|---|---|"]
    rows += [f"| row{i} | " + ("y" * 150 if i == 0 else "short") + " |" for i in range(60)]
    model.add(reply("\n".join(rows)), reply("\n".join(rows)))
    private(telegram, text="/voice on")
    await eventually(lambda: any("voice messages" in t for t in texts(telegram, ALICE)))
    for _ in range(10):
        fake_openai.speech_failures.append(ScriptedReply("error", status=500, body=b"{}"))
    private(telegram, text="the table")
    await eventually(lambda: "row59" in "".join(texts(telegram, ALICE)))
    shown = "".join(texts(telegram, ALICE))
    assert all(f"row{i} " in shown for i in range(60)) and voices(telegram) == []
    # Spoken, each clip reads a piece of what is said aloud, within the speech limit.
    fake_openai.speech_failures.clear()
    private(telegram, text="the table again")
    await eventually(lambda: len(voices(telegram)) >= 2)
    said = spoken("\n".join(rows))
    inputs = [r["input"] for r in fake_openai.speech_requests]
    assert inputs and all(len(i) <= 2000 and i in said for i in inputs)


async def test_a_long_answer_is_spoken_in_parts_cut_between_sentences(
    speaking, telegram, model, fake_openai
):
    from engine.llm.scripted import text as reply

    sentence = "This sentence is about forty characters. "
    model.add(reply(sentence * 120))  # about 5,000 characters
    private(telegram, text="/voice on")
    await eventually(lambda: any("voice messages" in t for t in texts(telegram, ALICE)))
    private(telegram, text="tell me everything")
    await eventually(lambda: len(voices(telegram)) == 3)
    inputs = [r["input"] for r in fake_openai.speech_requests]
    assert all(len(i) <= 2000 and i.endswith("characters.") for i in inputs)
    assert " ".join(inputs) == (sentence * 120).strip()


async def test_voice_on_without_speech_says_how_to_set_it_up(start_service, telegram):
    await start_service()
    private(telegram, text="/voice on")
    await eventually(lambda: any("Speech is not set up" in t for t in texts(telegram, ALICE)))


async def test_voice_mode_outlives_a_restart(start_service, telegram, fake_openai):
    settings = {"speech_model": "tts-1", "speech_base_url": fake_openai.base_url}
    first = await start_service(**settings)
    private(telegram, text="/voice on")
    await eventually(lambda: any("voice messages" in t for t in texts(telegram, ALICE)))
    await stop(first)
    await start_service(**settings)
    private(telegram, text="still speaking?")
    await eventually(lambda: voices(telegram))


# -- the providers' chat models ------------------------------------------------------------


async def test_a_chat_provider_added_while_running_is_a_model_to_choose(
    start_service, telegram, model, fake_openai
):
    from providers import Provider

    service = await start_service()
    provider = Provider.checked("local", fake_openai.base_url, "", "chat", "provider-model")
    await service.providers.add(provider)  # as POST /api/providers does
    private(telegram, text="/models")
    await eventually(lambda: any("provider-model" in t for t in texts(telegram, ALICE)))
    private(telegram, text="/model provider-model")
    await eventually(lambda: any("Model: provider-model" in t for t in texts(telegram, ALICE)))

    fake_openai.reply_text("answered by the provider", model="provider-model")
    private(telegram, text="who answers?")
    await eventually(lambda: "answered by the provider" in texts(telegram, ALICE))
    assert fake_openai.requests[-1]["model"] == "provider-model"

    await service.providers.remove("local")
    await eventually(lambda: "provider-model" not in service.engine.models.names)
    assert service.engine.models.names == ("primary",)


# -- send_voice_message: the agent speaks when asked -----------------------------------


async def test_the_agent_sends_a_voice_message_with_its_tool(
    speaking, telegram, model, fake_openai
):
    from engine.approval import RuleStore
    from engine.llm.scripted import text as reply
    from engine.llm.scripted import tool_call

    await RuleStore(speaking.engine.store.db).add_rule("send_voice_message", "allow")
    model.add(
        tool_call("send_voice_message", '{"text": "Good **morning**. It is sunny."}', "v1"),
        reply("I said it aloud."),
    )
    private(telegram, text="say good morning")
    await eventually(lambda: "I said it aloud." in texts(telegram, ALICE))
    assert len(voices(telegram)) == 1
    assert fake_openai.speech_requests[-1]["input"] == "Good morning. It is sunny."
    tool_result = [m for m in model.requests[-1][0] if m["role"] == "tool"][-1]["content"]
    assert "Sent as 1 voice message." in tool_result


async def test_without_speech_the_tool_says_to_answer_in_text(start_service, telegram, model):
    from engine.approval import RuleStore
    from engine.llm.scripted import text as reply
    from engine.llm.scripted import tool_call

    service = await start_service()
    await RuleStore(service.engine.store.db).add_rule("send_voice_message", "allow")
    model.add(tool_call("send_voice_message", '{"text": "hi"}', "v1"), reply("In text then."))
    private(telegram, text="say hi")
    await eventually(lambda: "In text then." in texts(telegram, ALICE))
    tool_result = [m for m in model.requests[-1][0] if m["role"] == "tool"][-1]["content"]
    assert "speech is not set up" in tool_result and voices(telegram) == []


async def test_a_voice_note_answers_the_agents_question(heard, telegram, model, fake_openai):
    """The agent asks; Alice answers with a voice note. What was heard is the answer (the
    answer was the note's empty text, on both bindings)."""
    ask = tool_call("ask_user_clarification", '{"question": "Which city?"}', "q")
    model.add(ask, text("Booking Rome."))
    telegram.user_message(ALICE, ALICE, "book a hotel")
    await eventually(lambda: find(telegram, ALICE, "❓ Question"))
    telegram.add_file("v1", OGG)
    fake_openai.transcribe("Rome, please")
    private(telegram, voice=voice())
    await eventually(lambda: "Booking Rome." in texts(telegram, ALICE))
    [answer] = tool_results(model)
    assert answer.startswith("Rome, please\n\n[SYSTEM INFO] The user attached files")


async def test_a_reason_given_as_a_voice_note_is_heard_and_shown_on_the_rejected_card(
    heard, telegram, model, fake_openai
):
    """❌ on a card, then a voice note in reply: the call is rejected with what was heard
    as its reason (it was rejected with an empty one; found by review)."""
    model.add(
        tool_call("execute_cmd", json.dumps({"command": "rm -rf data"}), "c1"), text("Understood.")
    )
    telegram.user_message(ALICE, ALICE, "clean up")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    call_id = int(card.reply_markup["inline_keyboard"][0][0]["callback_data"].split(":")[1])
    telegram.callback(ALICE, ALICE, card.message_id, format_callback(call_id, "reject"))
    await eventually(lambda: "reason" in (telegram.message(ALICE, card.message_id).text or ""))
    telegram.add_file("v1", OGG)
    fake_openai.transcribe("keep the data")
    private(telegram, voice=voice(), reply_to_message=reply_to(card.message_id))
    await eventually(lambda: "Understood." in texts(telegram, ALICE))
    assert "keep the data" in telegram.message(ALICE, card.message_id).text


def reply_to(message_id: int) -> dict:
    return {"message_id": message_id, "chat": {"id": ALICE, "type": "private"}, "date": 0}
