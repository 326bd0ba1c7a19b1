"""Which OpenAI-compatible server does an audio job now: ``AudioChoice``.

``providers.ServiceChoice`` for ``transcription`` and ``speech``: the oldest provider
serving the job wins (asked with the configured model when it lists it or lists none,
else with its first model), followed on the SystemEventBus. What is audio's own is the
settings' endpoint it falls back to: the settings' model at the settings' server (else
``LLM_BASE_URL``, with ``LLM_API_KEY`` only for that server); without a model, nobody.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from providers import Endpoint, ProviderRegistry, ServiceChoice

__all__ = ["AudioChoice", "failure_of"]

log = logging.getLogger(__name__)


class AudioChoice(ServiceChoice):
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
        wanted = getattr(settings, f"{prefix}_model")
        super().__init__(
            service, registry, model=wanted, fallback=_configured(settings, prefix, wanted)
        )


def _configured(settings: Any, prefix: str, wanted: str | None) -> Endpoint | None:
    """The settings' endpoint for the job, or ``None`` without a model."""
    if not wanted:
        return None
    base_url = getattr(settings, f"{prefix}_base_url") or settings.llm_base_url
    key = getattr(settings, f"{prefix}_api_key")
    if key is None:  # the LLM's key only for the LLM's server
        key = settings.llm_api_key if base_url == settings.llm_base_url else ""
    return Endpoint(base_url.rstrip("/"), key, wanted, f"{prefix.upper()}_MODEL")


def failure_of(answer: httpx.Response, endpoint: Endpoint, server: str) -> str | None:
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
