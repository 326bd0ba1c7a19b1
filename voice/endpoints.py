"""Which OpenAI-compatible server does an audio job now: ``AudioChoice``.

The oldest registered provider serving the job (``transcription``, ``speech``) wins, asked
with the configured model when it lists it (or lists none), else with its first model;
without one, the settings' model at the settings' server (else ``LLM_BASE_URL``, with
``LLM_API_KEY`` only for that server); else nobody. The choice is made again whenever
the providers change (``follow``: ``ProviderRegistered`` / ``ProviderUnregistered`` on the
SystemEventBus, or a lag that may have hidden one), never per call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx

from engine.bus import SystemEventBus
from providers import ProviderRegistry, follow_providers

__all__ = ["AudioChoice", "AudioEndpoint", "failure_of"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AudioEndpoint:
    """An OpenAI-compatible server and the model it is asked with."""

    base_url: str
    api_key: str
    model: str
    #: Where it came from, for messages (a variable's name, a provider's name).
    origin: str = "settings"

    def __repr__(self) -> str:  # the key never lands in a log line or a traceback
        return f"AudioEndpoint({self.base_url!r}, model={self.model!r}, origin={self.origin!r})"


class AudioChoice:
    def __init__(
        self,
        service: str,
        settings: Any,
        registry: ProviderRegistry | None,
        *,
        prefix: str,
    ) -> None:
        """``prefix``: the settings' variables, ``<prefix>_model``, ``_base_url``,
        ``_api_key`` (``transcribe``, ``speech``)."""
        self._service = service
        self._settings = settings
        self._registry = registry
        self._prefix = prefix
        self._chosen = self._choose()

    def endpoint(self) -> AudioEndpoint | None:
        return self._chosen

    async def follow(self, bus: SystemEventBus) -> None:
        """Until cancelled: the choice made again whenever the providers change."""
        await follow_providers(bus, self._choose_again)

    def _choose_again(self) -> None:
        self._chosen = self._choose()
        log.info("%s now: %r", self._service, self._chosen)

    def _choose(self) -> AudioEndpoint | None:
        settings, prefix = self._settings, self._prefix
        wanted = getattr(settings, f"{prefix}_model")
        for provider in self._registry.current if self._registry is not None else ():
            if self._service not in provider.serves:
                continue
            model = (
                wanted if wanted and (wanted in provider.models or not provider.models) else None
            )
            model = model or (provider.models[0] if provider.models else None)
            if model:
                return AudioEndpoint(provider.base_url, provider.api_key, model, provider.name)
        if not wanted:
            return None
        base_url = getattr(settings, f"{prefix}_base_url") or settings.llm_base_url
        key = getattr(settings, f"{prefix}_api_key")
        if key is None:  # the LLM's key only for the LLM's server
            key = settings.llm_api_key if base_url == settings.llm_base_url else ""
        return AudioEndpoint(base_url.rstrip("/"), key, wanted, f"{prefix.upper()}_MODEL")


def failure_of(answer: httpx.Response, endpoint: AudioEndpoint, server: str) -> str | None:
    """One sentence for an answer that failed (``server``: "the transcription server"),
    or ``None`` for a success; the body goes to the log, never the key."""
    status = answer.status_code
    if status < 400:
        return None
    if status in (401, 403):
        return f"{server} refused its key (HTTP {status})"
    if status == 404:
        return f"{server} has no model {endpoint.model!r} or not this API"
    if status == 429:
        return f"{server} asks to slow down (HTTP 429)"
    log.warning("%s at %s answered %s: %s", server, endpoint.base_url, status, answer.text[:300])
    return f"{server} failed (HTTP {status})"
