"""Which OpenAI-compatible server does a job now: ``ServiceChoice``, for any job a provider
serves (``transcription``, ``speech``, ``embeddings``).

The oldest registered provider serving the job wins, asked with the configured model when
it lists it (or lists none), else with its first model (a provider listing none, with no
model configured, is passed over); without one, the settings' endpoint (``fallback``);
else nobody. The choice is made again whenever the providers change (``follow``:
``ProviderRegistered`` / ``ProviderUnregistered`` on the SystemEventBus, or a lag that may
have hidden one), never per call; ``on_change`` listeners hear of a new choice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from engine.bus import SystemEventBus
from providers.registry import ProviderRegistry, follow_providers

__all__ = ["Endpoint", "ServiceChoice"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An OpenAI-compatible server and the model it is asked with."""

    base_url: str
    api_key: str
    model: str
    #: Where it came from, for messages (a variable's name, a provider's name).
    origin: str = "settings"

    def __repr__(self) -> str:  # the key never lands in a log line or a traceback
        return f"Endpoint({self.base_url!r}, model={self.model!r}, origin={self.origin!r})"


class ServiceChoice:
    def __init__(
        self,
        service: str,
        registry: ProviderRegistry | None,
        *,
        model: str | None,
        fallback: Endpoint | None,
    ) -> None:
        """``service``: what a provider must serve; ``model``: the configured model (a
        provider is asked with it when it lists it or lists none); ``fallback``: the
        settings' endpoint, when no provider serves the job (``None``: nobody)."""
        self.service = service
        self._registry = registry
        self._model = model or None
        self._fallback = fallback
        self._listeners: list[Callable[[], None]] = []
        self._chosen = self._choose()

    def endpoint(self) -> Endpoint | None:
        """The endpoint doing the job now (``None``: the job cannot be done)."""
        return self._chosen

    def on_change(self, listener: Callable[[], None]) -> None:
        """``listener()`` after each choice that differs from the one before."""
        self._listeners.append(listener)

    async def follow(self, bus: SystemEventBus) -> None:
        """Until cancelled: the choice made again whenever the providers change."""
        await follow_providers(bus, self.choose_again)

    def choose_again(self) -> None:
        """Choose from the registry's snapshot now (``follow`` calls it)."""
        before, self._chosen = self._chosen, self._choose()
        log.info("%s now: %r", self.service, self._chosen)
        if self._chosen != before:
            for listener in list(self._listeners):
                try:
                    listener()
                except Exception:  # one listener's fault is not the choice's
                    log.exception("%s: a listener of the choice failed", self.service)

    def _choose(self) -> Endpoint | None:
        wanted = self._model
        for provider in self._registry.current if self._registry is not None else ():
            if self.service not in provider.serves:
                continue
            listed, fits = provider.models, provider.models_for(self.service)
            model = wanted if wanted and (wanted in listed or not listed) else None
            model = model or (fits[0] if fits else None)
            if model:
                return Endpoint(provider.base_url, provider.api_key, model, provider.name)
        return self._fallback
