"""The model seams: what a chat model is, and the settings an HTTP model is built from.

A model plugs in by having the ``ChatModel`` shape (the HTTP client, the portable-schema
wrapper, scripted and test models); ``engine.config.ModelConfig`` has the
``ModelSettings`` shape, so this package reads settings without importing them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engine.llm.types import DeltaCallback, LlmResponse, Message, ToolSchema

__all__ = ["ChatModel", "ModelSettings"]


class ChatModel(Protocol):
    """One configured model. Implementations: the HTTP client and test doubles."""

    @property
    def name(self) -> str: ...

    @property
    def cache_hints(self) -> bool:
        """Whether the static system block should carry ``cache_control: ephemeral``."""
        ...

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> LlmResponse: ...


class ModelSettings(Protocol):
    """One model's settings, as ``OpenAICompatModel`` and ``ModelRegistry`` read them."""

    @property
    def name(self) -> str: ...

    @property
    def base_url(self) -> str: ...

    @property
    def api_key(self) -> str: ...

    @property
    def cache_hints(self) -> bool: ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def stream(self) -> bool: ...

    @property
    def strict_tool_schemas(self) -> bool:
        """Offer tools with portable schemas (``engine.llm.tool_schemas``)."""
        ...
