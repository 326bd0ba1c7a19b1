"""An in-process model that answers from a script: for tests, benchmarks and dry runs."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

from engine.llm.types import (
    DeltaCallback,
    LlmError,
    LlmResponse,
    Message,
    ToolCallRequest,
    ToolSchema,
    Usage,
)

Script = LlmResponse | LlmError | Callable[[Sequence[Message]], LlmResponse]


def text(content: str, **usage: int) -> LlmResponse:
    return LlmResponse(content=content, usage=Usage(**usage))


def tool_call(
    name: str, arguments: str = "{}", call_id: str = "", content: str = ""
) -> LlmResponse:
    return LlmResponse(content=content, tool_calls=(ToolCallRequest(call_id, name, arguments),))


class ScriptedModel:
    """Pops one scripted reply per call; records what it was sent. Zero latency."""

    def __init__(
        self,
        replies: Iterable[Script] = (),
        *,
        name: str = "scripted",
        cache_hints: bool = False,
        record: bool = True,
    ) -> None:
        self._replies: deque[Script] = deque(replies)
        self._name = name
        self._cache_hints = cache_hints
        self._record = record
        self.requests: list[tuple[list[Message], list[ToolSchema]]] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def cache_hints(self) -> bool:
        return self._cache_hints

    def add(self, *replies: Script) -> None:
        self._replies.extend(replies)

    @property
    def pending(self) -> int:
        return len(self._replies)

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> LlmResponse:
        if self._record:
            self.requests.append((list(messages), list(tools)))
        if not self._replies:
            raise LlmError(f"{self._name}: no scripted reply left", model=self._name)
        reply = self._replies.popleft()
        if isinstance(reply, LlmError):
            raise reply
        if callable(reply):
            reply = reply(messages)
        if on_delta is not None and reply.content:
            on_delta(reply.content)
        return LlmResponse(
            content=reply.content,
            tool_calls=reply.tool_calls,
            reasoning_content=reply.reasoning_content,
            usage=reply.usage,
            model=self._name,
            finish_reason=reply.finish_reason,
        )
