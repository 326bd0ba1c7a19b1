"""Audio clips and audio files on Slack, downloaded with the bot token from the fake's
``url_private`` and heard through the fake transcription server."""

from __future__ import annotations

from tests.bot.slack.conftest import ALICE, until
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_server import FakeSlackServer

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


async def test_other_files_are_still_not_read(fake: FakeSlackServer, make_service) -> None:
    await make_service()
    fake.dm(ALICE, "", files=[("notes.pdf", b"%PDF-1.4", "application/pdf", None)])
    await until(lambda: said(fake))
    assert "cannot read files sent on Slack" in said(fake)[0]
