"""What a voice note says: ``POST /v1/audio/transcriptions`` on an OpenAI-compatible server.

``Transcription`` says which endpoint transcribes now: the oldest registered provider
that serves ``transcription`` (``chathub providers add``), else the one the settings name
(``TRANSCRIBE_MODEL`` at ``TRANSCRIBE_BASE_URL``, else at ``LLM_BASE_URL``), or none. It
follows the SystemEventBus: on ``ProviderRegistered`` / ``ProviderUnregistered`` it reloads
its choice from the registry, so the next voice note uses a provider added meanwhile.
``Transcriber`` makes the call: the audio as a multipart upload, the text back. Every
failure is a ``TranscriptionError`` whose text is one plain sentence; the details go to
the log, and a key never appears in either.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx

from engine.bus import Lagged, ProviderRegistered, ProviderUnregistered, SystemEventBus
from providers import ProviderRegistry

__all__ = ["AudioEndpoint", "Transcriber", "Transcription", "TranscriptionError"]

log = logging.getLogger(__name__)

#: The longest transcript kept (a runaway server's answer is cut).
MAX_TRANSCRIPT = 20_000


@dataclass(frozen=True, slots=True)
class AudioEndpoint:
    """An OpenAI-compatible server and the model it is asked with."""

    base_url: str
    api_key: str
    model: str
    #: Where it came from, for messages ("TRANSCRIBE_MODEL", a provider's name).
    origin: str = "settings"

    def __repr__(self) -> str:  # the key never lands in a log line or a traceback
        return f"AudioEndpoint({self.base_url!r}, model={self.model!r}, origin={self.origin!r})"


class TranscriptionError(Exception):
    """A transcription failed; ``str()`` is one sentence a person may read."""


class Transcription:
    """Which endpoint transcribes now (``None``: voice notes cannot be transcribed)."""

    def __init__(self, settings: Any, registry: ProviderRegistry | None = None) -> None:
        self._settings = settings
        self._registry = registry
        self._chosen = self._choose()

    def endpoint(self) -> AudioEndpoint | None:
        return self._chosen

    async def follow(self, bus: SystemEventBus) -> None:
        """Until cancelled: the choice made again whenever the providers change (a lagging
        subscriber reloads too: it may have missed one)."""
        async with bus.subscribe() as events:
            async for event in events:
                match event:
                    case ProviderRegistered() | ProviderUnregistered() | Lagged():
                        self._chosen = self._choose()
                        log.info("transcription now: %r", self._chosen)
                    case _:
                        pass

    def _choose(self) -> AudioEndpoint | None:
        settings = self._settings
        wanted = settings.transcribe_model
        for provider in self._registry.current if self._registry is not None else ():
            if "transcription" not in provider.serves:
                continue
            model = (
                wanted if wanted and (wanted in provider.models or not provider.models) else None
            )
            model = model or (provider.models[0] if provider.models else None)
            if model:
                return AudioEndpoint(provider.base_url, provider.api_key, model, provider.name)
        if not wanted:
            return None
        base_url = settings.transcribe_base_url or settings.llm_base_url
        key = settings.transcribe_api_key
        if key is None:  # the LLM's key only for the LLM's server
            key = settings.llm_api_key if base_url == settings.llm_base_url else ""
        return AudioEndpoint(base_url.rstrip("/"), key, wanted, "TRANSCRIBE_MODEL")


class Transcriber:
    def __init__(self, http: httpx.AsyncClient, *, timeout_s: float = 60.0) -> None:
        self._http = http
        self._timeout_s = timeout_s

    async def transcribe(
        self, endpoint: AudioEndpoint, audio: bytes, filename: str, mime_type: str
    ) -> str:
        """The text of ``audio`` (may be empty: silence)."""
        if not audio:
            raise TranscriptionError("the voice message is empty")
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        url = f"{endpoint.base_url}/audio/transcriptions"
        try:
            answer = await self._http.post(
                url,
                data={"model": endpoint.model, "response_format": "json"},
                files={"file": (filename, audio, mime_type)},
                headers=headers,
                timeout=self._timeout_s,
            )
        except httpx.TimeoutException:
            log.warning("transcription at %s timed out", endpoint.base_url)
            raise TranscriptionError(
                f"the transcription server did not answer within {self._timeout_s:g} s"
            ) from None
        except httpx.HTTPError as exc:
            log.warning("transcription at %s failed: %s", endpoint.base_url, type(exc).__name__)
            raise TranscriptionError("the transcription server cannot be reached") from None
        return _text_of(answer, endpoint)


def _text_of(answer: httpx.Response, endpoint: AudioEndpoint) -> str:
    if answer.status_code in (401, 403):
        raise TranscriptionError(
            f"the transcription server refused its key (HTTP {answer.status_code})"
        )
    if answer.status_code == 404:
        raise TranscriptionError(
            f"the transcription server has no model {endpoint.model!r} or no transcription API"
        )
    if answer.status_code == 429:
        raise TranscriptionError("the transcription server asks to slow down (HTTP 429)")
    if answer.status_code >= 400:
        log.warning(
            "transcription at %s answered %s: %s",
            endpoint.base_url,
            answer.status_code,
            answer.text[:300],
        )
        raise TranscriptionError(f"the transcription server failed (HTTP {answer.status_code})")
    try:
        data = answer.json()
    except ValueError:
        data = None
    text = data.get("text") if isinstance(data, dict) else None
    if not isinstance(text, str):
        log.warning("transcription at %s: no text in %r", endpoint.base_url, answer.text[:300])
        raise TranscriptionError("the transcription server's answer holds no text")
    return text.strip()[:MAX_TRANSCRIPT]
