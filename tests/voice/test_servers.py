"""The transcription and speech clients against servers that cannot be called: an
address or a key no request can carry is one sentence, never an exception of httpx's
(a voice note was lost with it, and a voice reply sent nothing; found by review)."""

from __future__ import annotations

import httpx
import pytest

from providers import Endpoint
from tests.fakes.openai_server import FakeOpenAIServer
from voice import Speaker, SpeechError, Transcriber, TranscriptionError

UNSENDABLE = [
    ("http://localhost:80a0/v1", ""),  # a port that is no number
    ("http://[::1/v1", ""),  # an open bracket
    ("http://127.0.0.1:99999/v1", ""),  # a port out of range
]
#: A key pasted with a typographic dash (U+2010): no header carries it.
DASHED_KEY = "sk\u2010live0123456789abcdefghij"


@pytest.fixture
async def http() -> httpx.AsyncClient:
    async with httpx.AsyncClient() as client:
        yield client


@pytest.mark.parametrize(("base_url", "key"), [*UNSENDABLE, ("{fake}", DASHED_KEY)])
async def test_a_server_that_cannot_be_called_is_one_sentence(
    http: httpx.AsyncClient, fake_openai: FakeOpenAIServer, base_url: str, key: str
) -> None:
    base_url = base_url.format(fake=fake_openai.base_url)
    with pytest.raises(TranscriptionError, match=r"cannot|address or key"):
        await Transcriber(http, timeout_s=2).transcribe(
            Endpoint(base_url, key, "whisper-1"), b"OggS....", "voice.ogg", "audio/ogg"
        )
    with pytest.raises(SpeechError, match=r"cannot|address or key"):
        await Speaker(http, timeout_s=2).speak(Endpoint(base_url, key, "tts-1"), "hello", "alloy")
