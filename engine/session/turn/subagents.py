"""Sub-agent calls: which calls spawn one, and a batch of them run in parallel.

A synchronous sub-agent call (``execute_subtask``, or ``execute_task`` with mode
``sync``) runs the child inline, one frame deeper, under the same lock and cancel scope
(``TurnEnv.sub_agents``). A response made only of two or more such calls runs them
concurrently: rows and ``ToolStart`` in call order, the gate in call order, the children
concurrently (at most ``max_parallel_subagents``), outcomes recorded in call order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from engine.bus.chat import ToolCallEvent
from engine.session.turn.dispatch import (
    Completed,
    DispatchResult,
    Failed,
    Interrupted,
    Suspended,
    check_call,
)
from engine.session.turn.gate import GateOutcome, run_approval_gate
from engine.session.turn.turn_env import TurnEnv
from engine.store.rows import ToolCallRow
from engine.tools.base import ToolError
from engine.tools.builtins.subagents import SUBTASK_TOOL

__all__ = ["SubAgentRequest", "is_batch", "run_batch", "sub_agent_request"]

TASK_TOOL = "execute_task"
DEFAULT_TASK_AGENT = "generalist"


@dataclass(frozen=True, slots=True)
class SubAgentRequest:
    agent_id: str
    prompt: str


def sub_agent_request(name: str, args: dict[str, Any]) -> SubAgentRequest | None:
    if name == SUBTASK_TOOL:
        return SubAgentRequest(str(args.get("agent_id") or ""), str(args.get("prompt") or ""))
    if name == TASK_TOOL and args.get("mode") == "sync":
        agent = str(args.get("agent_id") or DEFAULT_TASK_AGENT)
        return SubAgentRequest(agent, str(args.get("prompt") or ""))
    return None


def _request_of(env: TurnEnv, call: ToolCallRow) -> SubAgentRequest | None:
    try:
        args = check_call(env.tools, call.name, call.arguments)
    except ToolError:
        return None
    return sub_agent_request(call.name, args)


def is_batch(env: TurnEnv, calls: list[ToolCallRow]) -> bool:
    """Two or more calls, every one a synchronous sub-agent call."""
    return (
        env.sub_agents is not None
        and len(calls) >= 2
        and all(_request_of(env, call) is not None for call in calls)
    )


async def run_batch(env: TurnEnv, calls: list[ToolCallRow], collected: list[ToolCallEvent]) -> bool:
    """Run a batch; False when the turn must end as cancelled."""
    assert env.sub_agents is not None
    approved: list[tuple[ToolCallRow, SubAgentRequest]] = []
    for call in calls:  # call order: ToolStart, then the gate
        env.emitter.tool_start(call.id, call.name, call.arguments or "")
    for index, call in enumerate(calls):
        args = check_call(env.tools, call.name, call.arguments)
        gate = await run_approval_gate(env, call, args, collected)
        if gate is GateOutcome.CHANNEL_CLOSED:
            # Stopped at a later call's gate: the ones approved before it never ran, and
            # stay so (until 2026-12-06 they stayed "running", and the next message's
            # resume ran a sub-agent the user had stopped; found by review).
            await env.recorder.not_run([c for c, _ in approved] + calls[index + 1 :])
            return False
        if gate is GateOutcome.PROCEED:
            request = sub_agent_request(call.name, args)
            assert request is not None
            approved.append((call, request))

    slots = asyncio.Semaphore(max(env.limits.max_parallel_subagents, 1))
    runner = env.sub_agents

    async def one(call: ToolCallRow, request: SubAgentRequest) -> DispatchResult:
        async with slots:
            if env.scope.cancelled:
                return Interrupted()
            return await runner.run_sub_agent(env, call, request.agent_id, request.prompt)

    # One child raising cancels its siblings: with ``gather`` they ran on, orphans that
    # wrote rows and ran tools after the turn ended, out of /stop's reach (until
    # 2026-12-07; found by review).
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(call, request)) for call, request in approved]
    except BaseExceptionGroup as raised:  # the child's own error, not a sibling's cancel
        errors = [e for e in raised.exceptions if not isinstance(e, asyncio.CancelledError)]
        raise (errors or list(raised.exceptions))[0] from None
    results = [task.result() for task in tasks]
    cancelled = False
    for (call, _request), result in zip(approved, results, strict=True):  # call order
        match result:
            case Completed(text):
                collected.append(await env.recorder.completed(call, text))
            case Failed(error):
                collected.append(await env.recorder.failed(call, error))
            case Interrupted():
                await env.recorder.cancelled(call)
                cancelled = True
            case Suspended():  # left open: the resume reaps the batch's frames
                cancelled = True
    return not cancelled
