"""The configured models in fallback order.

The registry only orders candidates; the turn's LLM round walks them and moves on
to the next one when an error is ``retriable``.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from engine.llm.client import OpenAICompatModel
from engine.llm.protocols import ChatModel, ModelSettings
from engine.llm.tool_schemas import with_tool_schemas
from engine.tls import shared_tls_context

# Per-request timeouts come from model's settings; these only size the shared pool.
_DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


class ModelRegistry:
    """Models by name, in configured order: the first is the default, the rest fallbacks.

    Models a registered provider offers (``offer``) are chosen by name (``/model``) but
    never stand in as fallbacks, and never shadow a configured model of the same name."""

    def __init__(
        self, models: Sequence[ChatModel], *, owned_http: httpx.AsyncClient | None = None
    ) -> None:
        """``owned_http``, when given, is closed by ``aclose()``."""
        self._models: dict[str, ChatModel] = {}
        for model in models:
            if model.name in self._models:
                raise ValueError(f"model {model.name!r} is configured twice")
            self._models[model.name] = model
        self._owned_http = owned_http
        self._configured = tuple(self._models)

    def offer(self, models: Sequence[ChatModel]) -> None:
        """The providers' models now (replacing the ones offered before)."""
        kept = {name: self._models[name] for name in self._configured}
        for model in models:
            kept.setdefault(model.name, model)
        self._models = kept

    @classmethod
    def from_config(
        cls, models: Sequence[ModelSettings], http: httpx.AsyncClient | None = None
    ) -> ModelRegistry:
        """HTTP models sharing ``http``; without one the registry creates and owns a client.

        A model configured with ``strict_tool_schemas`` (the default) is offered portable
        tool schemas (``engine.llm.tool_schemas``).
        """
        owned = None
        if http is None:
            http = owned = httpx.AsyncClient(limits=_DEFAULT_LIMITS, verify=shared_tls_context())
        built = [
            with_tool_schemas(OpenAICompatModel(config, http), strict=config.strict_tool_schemas)
            for config in models
        ]
        return cls(built, owned_http=owned)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._models)

    def get(self, name: str) -> ChatModel | None:
        return self._models.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._models

    def __len__(self) -> int:
        return len(self._models)

    def candidates(self, preferred: str | None = None) -> list[ChatModel]:
        """Models to try in order: ``preferred`` first when configured, then the rest.

        An unknown ``preferred`` (an agent naming a model this install lacks) is ignored.
        """
        configured = [self._models[name] for name in self._configured]
        first = self._models.get(preferred) if preferred else None
        if first is None:
            return configured
        return [first, *(m for m in configured if m is not first)]

    async def aclose(self) -> None:
        """Close the HTTP client if the registry created it; a passed-in client stays open."""
        if self._owned_http is not None:
            await self._owned_http.aclose()
            self._owned_http = None
