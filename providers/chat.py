"""The providers' chat models in the engine's model registry, without a restart.

``ChatModels.follow`` listens on the SystemEventBus; whenever the providers change (or
its subscription lagged) it offers the model registry one model per name a provider
serving ``chat`` lists, at that provider's URL with its key. Offered models are chosen
by name (``/model``); the configured ones (``LLM_*``, chathub.toml) stay first, stay the
fallbacks, and are never shadowed by a provider's model of the same name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

from engine.bus import SystemEventBus
from engine.llm import ChatModel, ModelRegistry, OpenAICompatModel, with_tool_schemas
from providers.registry import ProviderRegistry, follow_providers

__all__ = ["ChatModels"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Settings:
    """``engine.llm``'s ``ModelSettings`` for one provider's model."""

    name: str
    base_url: str
    api_key: str
    cache_hints: bool = False
    timeout_s: float = 120.0
    stream: bool = True
    strict_tool_schemas: bool = True

    def __repr__(self) -> str:  # never the key
        return f"_Settings({self.name!r}, {self.base_url!r})"


class ChatModels:
    def __init__(
        self, registry: ProviderRegistry, models: ModelRegistry, http: httpx.AsyncClient
    ) -> None:
        self._registry = registry
        self._models = models
        self._http = http
        self.offer()

    def offer(self) -> None:
        offered = [
            self._model(_Settings(name, provider.base_url, provider.api_key))
            for provider in self._registry.current
            if "chat" in provider.serves
            for name in provider.models_for("chat")
        ]
        self._models.offer(offered)

    def _model(self, settings: _Settings) -> ChatModel:
        """With portable tool schemas, as a configured model (``ModelRegistry``): an MCP
        tool's $defs/$ref made a provider's Gemini or llama.cpp model answer 400."""
        model = OpenAICompatModel(settings, self._http)
        return with_tool_schemas(model, strict=settings.strict_tool_schemas)

    async def follow(self, bus: SystemEventBus) -> None:
        await follow_providers(bus, self._offer_again)

    def _offer_again(self) -> None:
        self.offer()
        log.info("models now: %s", ", ".join(self._models.names))
