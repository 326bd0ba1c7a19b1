"""One LLM round: call the preferred model, fall back to the next on retriable errors."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.llm.types import ChatModel, LlmError, LlmResponse, Message, ToolSchema
from engine.session.cancel import CancelScope
from engine.session.emitter import TurnEmitter

log = logging.getLogger(__name__)


class TurnFailed(Exception):
    """The turn cannot go on; the message is what the user is shown."""


@dataclass(frozen=True, slots=True)
class RoundResult:
    response: LlmResponse
    model: str
    duration_ms: int


MessagesFor = Callable[[bool], list[Message]]
"""Builds the request messages; the flag says whether the model wants cache hints."""


async def call_llm_round(
    candidates: Sequence[ChatModel],
    messages_for: MessagesFor,
    tools: Sequence[ToolSchema],
    scope: CancelScope,
    emitter: TurnEmitter,
) -> RoundResult:
    """Ask each candidate in turn until one answers usefully.

    Retriable failures (timeout, connection, 429, 5xx, malformed or empty answers) move on
    to the next model; a request error (other 4xx) ends the turn at once, since another
    model would get the same wrong request.
    """
    if not candidates:
        raise TurnFailed("No model is configured: set LLM_MODEL.")
    failures: list[str] = []
    messages: list[Message] | None = None
    hints: bool | None = None
    on_delta = emitter.text_delta if emitter.streams else None
    for index, model in enumerate(candidates):
        if messages is None or hints != model.cache_hints:
            hints = model.cache_hints
            messages = messages_for(hints)
        started = time.perf_counter()
        try:
            response = await scope.run(model.complete(messages, tools, on_delta=on_delta))
        except LlmError as exc:
            if not exc.retriable:
                raise TurnFailed(f"The model rejected the request: {exc}") from exc
            reason = str(exc)
        else:
            if response.content or response.tool_calls:
                elapsed = int((time.perf_counter() - started) * 1000)
                return RoundResult(response, model.name, elapsed)
            reason = f"{model.name}: the model returned an empty response (no text, no tool call)"
        failures.append(reason)
        log.warning("model %s failed: %s", model.name, reason)
        if index + 1 < len(candidates):
            emitter.model_fallback(model.name, candidates[index + 1].name, reason)
    raise TurnFailed("Every model failed: " + "; ".join(failures))
