"""Per-call handling: ToolStart → arguments → approval gate → dispatch → record.

Shared by the live loop and by ``resume_pending_tools``, so a resumed call is gated and
executed exactly as a live one ("re-run from intent"). The gate itself is ``gate.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from enum import Enum
from typing import Any

from engine.bus.chat import ToolCallEvent
from engine.session.turn.clarify import ask_user
from engine.session.turn.dispatch import (
    Completed,
    DispatchResult,
    Failed,
    Interrupted,
    Suspended,
    check_call,
    execute_tool_call,
)
from engine.session.turn.gate import GateOutcome, run_approval_gate
from engine.session.turn.subagents import sub_agent_request
from engine.session.turn.turn_env import TurnEnv
from engine.store.history import History
from engine.store.inbox import ASK_USER_TOOL
from engine.store.rows import ToolCallRow
from engine.tools.base import ToolError, rerun_safe


class CallFlow(Enum):
    CONTINUE = "continue"
    CANCELLED = "cancelled"


async def handle_tool_call(
    env: TurnEnv,
    call: ToolCallRow,
    collected: list[ToolCallEvent] | None,
    *,
    resumed: bool = False,
) -> CallFlow:
    """Handle one persisted call end to end; ``collected`` gathers events for the bus;
    ``resumed``: a call left open (``run_approval_gate``)."""
    env.emitter.tool_start(call.id, call.name, call.arguments or "")
    try:
        args = check_call(env.tools, call.name, call.arguments)
    except ToolError as exc:
        _collect(collected, await env.recorder.failed(call, str(exc)))
        return CallFlow.CONTINUE
    gate = await run_approval_gate(env, call, args, collected, resumed=resumed)
    if gate is GateOutcome.CHANNEL_CLOSED:
        return CallFlow.CANCELLED
    if gate is GateOutcome.REJECTED:
        return CallFlow.CONTINUE
    if call.name == ASK_USER_TOOL:
        answered = await ask_user(env, call, args)
        if answered is None:
            return CallFlow.CANCELLED
        _collect(collected, answered)
        return CallFlow.CONTINUE
    request = sub_agent_request(call.name, args)
    if request is not None and env.sub_agents is not None:
        result = await env.sub_agents.run_sub_agent(env, call, request.agent_id, request.prompt)
    else:
        result = await _dispatch(env, call, args)
    match result:
        case Completed(text):
            _collect(collected, await env.recorder.completed(call, text))
        case Failed(error):
            _collect(collected, await env.recorder.failed(call, error))
        case Interrupted():
            await env.recorder.cancelled(call)
            return CallFlow.CANCELLED
        case Suspended():  # the call stays open, its child frame with it, for the resume
            return CallFlow.CANCELLED
    return CallFlow.CONTINUE


async def end_round(env: TurnEnv, call: ToolCallRow, later: Sequence[ToolCallRow]) -> None:
    """The round's ``later`` calls once ``call`` came back ``CANCELLED``: not run after a
    stop, or after a call that ended; left open when ``call`` itself still waits because
    its waiting channel closed (the terminal's input ended, a fleet handed the chat
    over): the resume runs them once it is decided. Until 2026-12-06 they were closed as
    "stopped by the user" and never ran, and a stop during a resume left them open for
    the next message to run (both found by review)."""
    if env.scope.cancelled or call.status not in ("running", "pending"):
        await env.recorder.not_run(later)


async def _dispatch(env: TurnEnv, call: ToolCallRow, args: dict[str, Any]) -> DispatchResult:
    """Run an approved call; one not safe to repeat is marked launched before it starts."""
    ctx = replace(env.tool_ctx, asked_in=call.message_id)
    tool = env.tools.get(call.name)
    if tool is not None and not rerun_safe(tool):
        await env.recorder.launched(call)
        ctx = replace(ctx, processes=_CallProcesses(env.store.history, call.id))
    return await execute_tool_call(
        env.tools,
        call.name,
        args,
        ctx,
        env.scope,
        max_output_chars=env.limits.max_tool_output_chars,
    )


class _CallProcesses:
    """``ProcessLog`` of one call: its command's process group goes on its row."""

    __slots__ = ("_call_id", "_history")

    def __init__(self, history: History, call_id: int) -> None:
        self._history, self._call_id = history, call_id

    async def started(self, process_group: int, process_start: str | None) -> None:
        await self._history.record_process(self._call_id, process_group, process_start)


def _collect(collected: list[ToolCallEvent] | None, event: ToolCallEvent) -> None:
    if collected is not None:
        collected.append(event)
