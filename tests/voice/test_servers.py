"""The transcription and speech clients against servers that cannot be called or take
their time: an address or a key no request can carry is one sentence, never an exception
of httpx's (a voice note was lost with it, and a voice reply sent nothing), and the
timeout holds for the whole answer (all found by review)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from providers import Endpoint
from tests.fakes.background import BackgroundServer
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply
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


async def _drip(request: Request) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(20):  # a byte now and then: no read waits long
            yield b" "
            await asyncio.sleep(0.2)
        yield b'{"text": "late"}'

    return StreamingResponse(body(), media_type="application/json")


@pytest.fixture(scope="module")
def dripping() -> Iterator[str]:
    server = BackgroundServer(
        Starlette(routes=[Route("/v1/audio/{job}", _drip, methods=["POST"])]), "drip"
    )
    server.start()
    yield f"http://127.0.0.1:{server.port}/v1"
    server.stop()


async def test_the_timeout_is_a_deadline_for_the_whole_answer(
    http: httpx.AsyncClient, dripping: str
) -> None:
    """httpx's timeout is per read: a server sending a byte now and then held a voice
    note for as long as it liked (found by review)."""
    with pytest.raises(TranscriptionError, match=r"did not answer within 0\.5 s"):
        await Transcriber(http, timeout_s=0.5).transcribe(
            Endpoint(dripping, "", "whisper-1"), b"OggS....", "voice.ogg", "audio/ogg"
        )
    with pytest.raises(SpeechError, match=r"did not answer within 0\.5 s"):
        await Speaker(http, timeout_s=0.5).speak(Endpoint(dripping, "", "tts-1"), "hi", "alloy")


@pytest.mark.parametrize(
    ("body", "heard"),
    [
        (b'{"text": "book a table \\ud83d"}', "book a table \ufffd"),  # a token cut an emoji
        (b'{"text": "book\\u0000 a table"}', "book\ufffd a table"),
    ],
    ids=["lone-surrogate", "nul"],
)
async def test_what_was_heard_is_text_every_encoder_takes(
    http: httpx.AsyncClient, fake_openai: FakeOpenAIServer, body: bytes, heard: str
) -> None:
    """A lone surrogate in the transcript failed the turn (no UTF-8 encoder takes it) and
    the voice note was lost behind "something went wrong" (found by review)."""
    fake_openai.transcription_failures.append(ScriptedReply("raw", status=200, body=body))
    text = await Transcriber(http, timeout_s=5).transcribe(
        Endpoint(fake_openai.base_url, "", "whisper-1"), b"OggS....", "voice.ogg", "audio/ogg"
    )
    assert text == heard
    text.encode("utf-8")


async def test_an_answer_nested_past_pythons_depth_is_one_sentence(
    http: httpx.AsyncClient, fake_openai: FakeOpenAIServer
) -> None:
    """It escaped as a RecursionError (found by review)."""
    deep = b"[" * 100_000 + b"]" * 100_000
    fake_openai.transcription_failures.append(ScriptedReply("raw", status=200, body=deep))
    with pytest.raises(TranscriptionError, match="holds no text"):
        await Transcriber(http, timeout_s=5).transcribe(
            Endpoint(fake_openai.base_url, "", "whisper-1"), b"OggS....", "voice.ogg", "audio/ogg"
        )
