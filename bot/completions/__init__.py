"""The agent behind OpenAI's chat completions API (``/v1``; docs/openai-api.md).

Its face: ``CompletionsApi`` (the routes), ``ExchangeLimits`` (how long a request waits
for a human's decision, how often a waiting stream is kept alive), ``talkable_agents``,
and the models the OpenAPI document describes the routes with. They load on first use:
the service reads ``layer.py`` (its migrations, its source prefix) before any of this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from bot.completions.layer import SOURCE_PREFIX
from engine.faces import lazy_attributes

if TYPE_CHECKING:
    from bot.completions.exchange import ExchangeLimits
    from bot.completions.protocol import (
        ChatCompletion,
        CompletionRequest,
        ModelItem,
        ModelList,
        OpenAIErrorBody,
    )
    from bot.completions.routes import CompletionsApi

__all__ = [
    "SOURCE_PREFIX",
    "ChatCompletion",
    "CompletionRequest",
    "CompletionsApi",
    "ExchangeLimits",
    "ModelItem",
    "ModelList",
    "OpenAIErrorBody",
    "talkable_agents",
]


class Agents(Protocol):
    """The engine's agent catalog, as far as the API reads it."""

    @property
    def ids(self) -> Sequence[str]: ...

    def __getitem__(self, agent_id: str) -> object: ...


def talkable_agents(catalog: Agents) -> list[str]:
    """The agents a client may name as ``model``: the chat agents (``main`` first)."""
    chat = [agent for agent in catalog.ids if getattr(catalog[agent], "kind", None) == "chat"]
    return sorted(chat, key=lambda agent: (agent != "main", agent))


__getattr__ = lazy_attributes(
    __name__,
    {
        "ChatCompletion": "bot.completions.protocol",
        "CompletionRequest": "bot.completions.protocol",
        "CompletionsApi": "bot.completions.routes",
        "ExchangeLimits": "bot.completions.exchange",
        "ModelItem": "bot.completions.protocol",
        "ModelList": "bot.completions.protocol",
        "OpenAIErrorBody": "bot.completions.protocol",
    },
)
