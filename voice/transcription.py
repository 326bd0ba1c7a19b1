"""What a voice note says: ``POST /v1/audio/transcriptions`` on an OpenAI-compatible server.

``Transcription`` says which endpoint transcribes now (``voice/endpoints.py``: a provider
serving ``transcription``, else ``TRANSCRIBE_MODEL`` at ``TRANSCRIBE_BASE_URL`` or
``LLM_BASE_URL``), following the SystemEventBus, so the next voice note uses a provider
added meanwhile.
``Transcriber`` makes the call: the audio as a multipart upload, the text back. Every
failure is a ``TranscriptionError`` whose text is one plain sentence; the details go to
the log, and a key never appears in either.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from engine.text import clean_text
from providers import UNSENDABLE, Endpoint, ProviderRegistry
from voice.endpoints import AudioChoice, failure_of

__all__ = ["Transcriber", "Transcription", "TranscriptionError"]

log = logging.getLogger(__name__)

#: The longest transcript kept (a runaway server's answer is cut).
MAX_TRANSCRIPT = 20_000


class TranscriptionError(Exception):
    """A transcription failed; ``str()`` is one sentence a person may read."""


class Transcription(AudioChoice):
    """Which endpoint transcribes now (``None``: voice notes cannot be transcribed)."""

    def __init__(self, settings: Any, registry: ProviderRegistry | None = None) -> None:
        super().__init__("transcription", settings, registry, prefix="transcribe")


class Transcriber:
    def __init__(self, http: httpx.AsyncClient, *, timeout_s: float = 60.0) -> None:
        self._http = http
        self._timeout_s = timeout_s

    async def transcribe(
        self, endpoint: Endpoint, audio: bytes, filename: str, mime_type: str
    ) -> str:
        """The text of ``audio`` (may be empty: silence)."""
        if not audio:
            raise TranscriptionError("the voice message is empty")
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        url = f"{endpoint.base_url}/audio/transcriptions"
        try:
            # A deadline for the whole answer: httpx's timeout is per read, and a server
            # that sent a byte now and then held the note far past it (found by review).
            async with asyncio.timeout(self._timeout_s):
                answer = await self._http.post(
                    url,
                    data={"model": endpoint.model, "response_format": "json"},
                    files={"file": (filename, audio, mime_type)},
                    headers=headers,
                    timeout=self._timeout_s,
                )
        except (httpx.TimeoutException, TimeoutError):
            log.warning("transcription at %s timed out", endpoint.base_url)
            raise TranscriptionError(
                f"the transcription server did not answer within {self._timeout_s:g} s"
            ) from None
        except UNSENDABLE as exc:
            log.warning("transcription at %s: %s", endpoint.base_url, type(exc).__name__)
            raise TranscriptionError(
                "the transcription server's address or key cannot be used; check its settings"
            ) from None
        except httpx.HTTPError as exc:
            log.warning("transcription at %s failed: %s", endpoint.base_url, type(exc).__name__)
            raise TranscriptionError("the transcription server cannot be reached") from None
        return _text_of(answer, endpoint)


def _text_of(answer: httpx.Response, endpoint: Endpoint) -> str:
    failed = failure_of(answer, endpoint, "the transcription server")
    if failed is not None:
        raise TranscriptionError(failed)
    try:
        data = answer.json()
    except (ValueError, RecursionError):  # not JSON, or nested past Python's depth
        data = None
    text = data.get("text") if isinstance(data, dict) else None
    if not isinstance(text, str):
        log.warning("transcription at %s: no text in %r", endpoint.base_url, answer.text[:300])
        raise TranscriptionError("the transcription server's answer holds no text")
    # A lone surrogate or a NUL in what was heard failed the turn, and the voice note
    # was lost behind "something went wrong" (until 2026-12-06; found by review).
    return clean_text(text).strip()[:MAX_TRANSCRIPT]
