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

__all__ = ["CUT_NOTE", "MAX_TRANSCRIPT", "Transcriber", "Transcription", "TranscriptionError"]

log = logging.getLogger(__name__)

#: The longest transcript kept (a runaway server's answer, a long recording when
#: ``VOICE_MAX_SECONDS`` is raised): a longer one is cut on a word, and says so.
MAX_TRANSCRIPT = 20_000
#: What ends a cut transcript: the model reads it, the person sees it in the quote.
CUT_NOTE = f" … [transcript cut at {MAX_TRANSCRIPT:,} characters]"


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
    return _kept(clean_text(text).strip())


def _kept(text: str) -> str:
    """``text``, or when too long its words up to ``MAX_TRANSCRIPT`` and ``CUT_NOTE``
    (until 2026-12-07 it was cut there mid-word, and neither the person nor the model was
    told: the agent summarised half a talk as if whole; found by review). A text without
    a space near the end (a language written without them) is cut at the limit."""
    if len(text) <= MAX_TRANSCRIPT:
        return text
    space = max(text.rfind(c, 0, MAX_TRANSCRIPT + 1) for c in " \n\t")
    end = space if space > MAX_TRANSCRIPT // 2 else MAX_TRANSCRIPT
    log.info("a transcript of %d characters was cut at %d", len(text), end)
    return text[:end].rstrip() + CUT_NOTE
