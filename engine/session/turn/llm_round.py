"""One LLM round: call the preferred model, fall back to the next on retriable errors."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from engine.llm.protocols import ChatModel
from engine.llm.types import (
    DeltaCallback,
    LlmContextOverflow,
    LlmError,
    LlmRateLimited,
    LlmResponse,
    Message,
    ToolSchema,
)
from engine.session.context.elision import ContextFit
from engine.session.turn.cancel import CancelScope, TurnCancelled
from engine.session.turn.emitter import TurnEmitter

log = logging.getLogger(__name__)


class TurnFailed(Exception):
    """The turn cannot go on; the message is what the user is shown. ``away``: no model
    could be asked (unreachable, busy), so the same request may well work later."""

    def __init__(self, message: str, *, away: bool = False) -> None:
        super().__init__(message)
        self.away = away


@dataclass(frozen=True, slots=True)
class RoundResult:
    response: LlmResponse
    model: str
    duration_ms: int
    #: What the turn leaves out of its requests from here on (``None``: nothing; a turn
    #: that never overflows never makes one).
    fit: ContextFit | None = None


MessagesFor = Callable[[bool], list[Message]]
"""Builds the request messages; the flag says whether the model wants cache hints."""


#: What a user is told when even the smallest request does not fit.
OUTGROWN = (
    "The conversation has outgrown the model's context window, even with older tool "
    "output left out; start a new conversation."
)


async def call_llm_round(
    candidates: Sequence[ChatModel],
    messages_for: MessagesFor,
    tools: Sequence[ToolSchema],
    scope: CancelScope,
    emitter: TurnEmitter,
    fit: ContextFit | None = None,
) -> RoundResult:
    """Ask the candidates; a request over the model's context window is asked again
    with older tool output left out (``fit``: what the turn leaves out so far; the
    result carries it on)."""
    while True:
        asked = messages_for if fit is None else _fitted(messages_for, fit)
        try:
            result = await _ask_candidates(candidates, asked, tools, scope, emitter)
        except LlmContextOverflow as exc:
            fit = fit if fit is not None else ContextFit()
            if not fit.tighten(messages_for(False)):
                raise TurnFailed(OUTGROWN) from exc
            log.warning("the request outgrew %s's context window: level %d", exc.model, fit.level)
            continue
        return result if fit is None else replace(result, fit=fit)


#: The longest ``Retry-After`` the last model left is waited out once before the turn
#: gives up (a one-model install met every brief rate limit as a failed turn until
#: 2026-12-07; found by review); a model with a fallback moves on at once.
RATE_LIMIT_WAIT_S = 10.0


async def _complete(
    model: ChatModel,
    messages: list[Message],
    tools: Sequence[ToolSchema],
    scope: CancelScope,
    on_delta: DeltaCallback | None,
    last: bool,
) -> LlmResponse:
    try:
        return await scope.run(model.complete(messages, tools, on_delta=on_delta))
    except LlmRateLimited as exc:
        wait = exc.retry_after
        if not last or wait is None or wait > RATE_LIMIT_WAIT_S:
            raise
        log.info("model %s is rate limited: asked again in %g s", model.name, wait)
        await scope.run(asyncio.sleep(wait))  # /stop ends the wait
        return await scope.run(model.complete(messages, tools, on_delta=on_delta))


def _fitted(messages_for: MessagesFor, fit: ContextFit) -> MessagesFor:
    return lambda hints: fit.apply(messages_for(hints))


async def _ask_candidates(
    candidates: Sequence[ChatModel],
    messages_for: MessagesFor,
    tools: Sequence[ToolSchema],
    scope: CancelScope,
    emitter: TurnEmitter,
) -> RoundResult:
    """Ask each candidate in turn until one answers usefully.

    Retriable failures (timeout, connection, 429, 5xx, malformed or empty answers, a
    model client's own bug, a context window too small) move on to the next model; a
    request error (other 4xx) ends
    the turn at once, since another model would get the same wrong request. The
    ``TurnFailed`` message is shown to the user: the models' plain reasons, no exception
    texts (those are in the log).
    """
    if not candidates:
        raise TurnFailed("No model is configured: set LLM_MODEL.")
    failures: list[str] = []
    every_away = True  # every model unreachable or busy: nothing was the request's doing
    overflow: LlmContextOverflow | None = None
    messages: list[Message] | None = None
    hints: bool | None = None
    on_delta = emitter.text_delta if emitter.streams else None
    for index, model in enumerate(candidates):
        if messages is None or hints != model.cache_hints:
            hints = model.cache_hints
            messages = messages_for(hints)
        started = time.perf_counter()
        last = index + 1 == len(candidates)
        try:
            response = await _complete(model, messages, tools, scope, on_delta, last)
        except LlmError as exc:
            detail = f" [{exc.detail}]" if exc.detail else ""
            log.warning("model %s failed: %s%s", model.name, exc, detail)
            every_away = every_away and exc.away
            if isinstance(exc, LlmContextOverflow):
                # The next model's window may be bigger (until 2026-12-06 none was asked;
                # found by review); when none takes it, ``call_llm_round`` leaves
                # output out and asks them all again.
                overflow = overflow or exc
            elif not exc.retriable and overflow is None:
                raise TurnFailed(f"The model rejected the request: {exc}") from exc
            reason = str(exc)
        except TurnCancelled:
            raise
        except Exception:
            # A bug in a model client must not end the turn with its exception's text:
            # the traceback goes to the log under an id, the next model is tried.
            error_id = uuid.uuid4().hex[:6]
            log.exception("model %s failed unexpectedly (error %s)", model.name, error_id)
            reason = f"{model.name}: the model call failed unexpectedly (error {error_id})"
            every_away = False
        else:
            if response.content or response.tool_calls:
                elapsed = int((time.perf_counter() - started) * 1000)
                return RoundResult(response, model.name, elapsed)
            reason = f"{model.name}: the model returned an empty response (no text, no tool call)"
            every_away = False
            log.warning("model %s failed: %s", model.name, reason)
        failures.append(reason)
        if index + 1 < len(candidates):
            emitter.model_fallback(model.name, candidates[index + 1].name, reason)
    if overflow is not None:
        raise overflow
    raise TurnFailed("Every model failed: " + "; ".join(failures), away=every_away)
