"""A scripted model that answers by looking at each request (the scheduler's scenarios)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from engine.llm.scripted import ScriptedModel
from engine.llm.types import LlmResponse, Message

__all__ = ["RoutedModel", "last_tool", "last_user", "system_text"]


class RoutedModel(ScriptedModel):
    """Answers by looking at the request: each scenario routes its own replies."""

    def __init__(self, route: Callable[[Sequence[Message]], LlmResponse]) -> None:
        super().__init__(name="primary")
        self.route = route

    async def complete(self, messages, tools, *, on_delta=None):  # type: ignore[override]
        self.add(self.route(messages))
        return await super().complete(messages, tools, on_delta=on_delta)


def last_user(messages: Sequence[Message]) -> str:
    return next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")


def last_tool(messages: Sequence[Message]) -> str | None:
    """The tool result this request ends with (before the tail system messages), if any."""
    for message in reversed(messages):
        if message["role"] == "system":
            continue
        return message["content"] if message["role"] == "tool" else None
    return None


def system_text(messages: Sequence[Message]) -> str:
    first = messages[0]["content"]
    return first if isinstance(first, str) else json.dumps(first)
