"""The agent behind OpenAI's chat completions API (``/v1``; docs/openai-api.md).

Its face: ``CompletionsApi`` (the routes), ``ExchangeLimits`` (how long a request waits
for a human's decision, how often a waiting stream is kept alive), ``talkable_agents``,
and the models the OpenAPI document describes the routes with.
"""

from __future__ import annotations

from bot.completions.exchange import ExchangeLimits
from bot.completions.layer import SOURCE_PREFIX
from bot.completions.protocol import ChatCompletion, CompletionRequest, ModelList, OpenAIErrorBody
from bot.completions.routes import CompletionsApi
from engine.agents.catalog import AgentCatalog

__all__ = [
    "SOURCE_PREFIX",
    "ChatCompletion",
    "CompletionRequest",
    "CompletionsApi",
    "ExchangeLimits",
    "ModelList",
    "OpenAIErrorBody",
    "talkable_agents",
]


def talkable_agents(catalog: AgentCatalog) -> list[str]:
    """The agents a client may name as ``model``: the chat agents (``main`` first)."""
    chat = [agent for agent in catalog.ids if catalog[agent].kind == "chat"]
    return sorted(chat, key=lambda agent: (agent != "main", agent))
