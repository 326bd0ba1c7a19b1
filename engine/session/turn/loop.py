"""``run_agent_turn``: the round orchestrator. Each step is a named collaborator."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from engine.bus.chat import ToolCallEvent
from engine.failpoints import failpoint
from engine.llm.types import LlmResponse, Message
from engine.session.context.elision import ContextFit
from engine.session.outcomes import Cancelled, Exhausted, Final, TurnOutcome
from engine.session.protocols import PendingUserInput
from engine.session.turn.cancel import TurnCancelled
from engine.session.turn.llm_round import RoundResult, call_llm_round
from engine.session.turn.subagents import is_batch, run_batch
from engine.session.turn.tool_call import CallFlow, end_round, handle_tool_call
from engine.session.turn.turn_env import TurnEnv
from engine.store.rows import AssistantRecord, MessageRow, NewToolCall

RequestBuilder = Callable[[TurnEnv, bool], list[Message]]

#: A final answer's metadata when the model's token limit cut it (``finish_reason``
#: ``length``): a request sent again is told so too (the OpenAI-compatible API).
TRUNCATED_KEY = "truncated"


async def run_agent_turn(
    env: TurnEnv,
    build_request: RequestBuilder,
    pending_input: PendingUserInput | None = None,
) -> TurnOutcome:
    collected: list[ToolCallEvent] = []
    fit: ContextFit | None = None  # what is left out once the turn outgrew the window
    for _ in range(env.limits.max_tool_rounds):
        if env.scope.cancelled:
            return Cancelled()
        if pending_input is not None:
            await inject_pending_input(env, pending_input)
        if env.refresh_tools is not None:  # activate_tools in round N shows in round N+1
            try:  # a granted MCP server starting: /stop does not wait for its handshake
                await env.scope.run(env.refresh_tools(env))
            except TurnCancelled:
                return Cancelled()
        try:
            round_ = await call_llm_round(
                env.models,
                lambda hints: build_request(env, hints),
                env.tool_schemas,
                env.scope,
                env.emitter,
                fit,
            )
            fit = round_.fit
        except TurnCancelled:
            return Cancelled()
        response = round_.response
        if not response.tool_calls:
            return await _finish(env, round_, collected)
        row = await _record_tool_round(env, round_)
        if await _run_calls(env, row, collected) is CallFlow.CANCELLED:
            return Cancelled()
    return Exhausted(env.limits.max_tool_rounds)


async def inject_pending_input(env: TurnEnv, pending: PendingUserInput) -> None:
    """Messages sent during the turn become user rows at this round boundary."""
    for queued in pending.drain_user():
        row = await env.store.history.append_message(
            env.frame.id, "user", queued.text, metadata=queued.metadata, consumes=queued.queued_id
        )
        env.transcript.add(row, within_turn=True)
        env.emitter.user_message(row.id, row.content, attachments_of(queued.metadata))


async def _finish(env: TurnEnv, round_: RoundResult, collected: list[ToolCallEvent]) -> Final:
    response = round_.response
    also = env.emitter.answer_unit(response.content or "")
    record = _assistant_record(round_)
    if response.finish_reason == "length":  # kept: a request sent again is told so too
        record = replace(record, metadata={TRUNCATED_KEY: True})
    row = await env.store.history.append_assistant(env.frame.id, record, also=also)
    failpoint("after_final_row")
    env.transcript.add(row)
    return Final(
        content=row.content,
        message_id=row.id,
        input_tokens=response.usage.input_tokens,
        output_tokens=response.usage.output_tokens,
        truncated=response.finish_reason == "length",
        tool_calls=tuple(collected),
    )


async def _record_tool_round(env: TurnEnv, round_: RoundResult) -> MessageRow:
    """Persist the assistant message with its calls (``running``) before any of them runs."""
    calls = [
        NewToolCall(call_id, call.name, call.arguments)
        for call_id, call in zip(
            _unique_call_ids(round_.response), round_.response.tool_calls, strict=True
        )
    ]
    row = await env.store.history.append_assistant(env.frame.id, _assistant_record(round_), calls)
    failpoint("after_tool_rows")
    env.transcript.add(row)
    if row.content or row.reasoning_content:
        env.emitter.thinking(row.content, row.reasoning_content)
    return row


async def _run_calls(env: TurnEnv, row: MessageRow, collected: list[ToolCallEvent]) -> CallFlow:
    if is_batch(env, row.tool_calls):
        return (
            CallFlow.CONTINUE
            if await run_batch(env, row.tool_calls, collected)
            else CallFlow.CANCELLED
        )
    for index, call in enumerate(row.tool_calls):
        if env.scope.cancelled:
            await env.recorder.not_run(row.tool_calls[index:])
            return CallFlow.CANCELLED
        if await handle_tool_call(env, call, collected) is CallFlow.CANCELLED:
            await end_round(env, call, row.tool_calls[index + 1 :])
            return CallFlow.CANCELLED
    return CallFlow.CONTINUE


def _assistant_record(round_: RoundResult) -> AssistantRecord:
    response: LlmResponse = round_.response
    return AssistantRecord(
        content=response.content or "",
        reasoning_content=response.reasoning_content,
        model=round_.model,
        input_tokens=response.usage.input_tokens,
        output_tokens=response.usage.output_tokens,
        cost=response.usage.cost,
        duration_ms=round_.duration_ms,
    )


def _unique_call_ids(response: LlmResponse) -> list[str]:
    # Some servers repeat or omit ids; results are matched to calls by id, so make them unique.
    seen: set[str] = set()
    ids = []
    for call in response.tool_calls:
        call_id = call.id
        if not call_id or call_id in seen:
            call_id = f"call_{uuid.uuid4().hex[:12]}"
        seen.add(call_id)
        ids.append(call_id)
    return ids


def attachments_of(metadata: dict[str, Any] | None) -> tuple[dict[str, Any], ...]:
    """The attachments a message's metadata carries, for the UserMessage echo."""
    return tuple((metadata or {}).get("attachments") or ())
