"""The approval gate: one decision point shared by the live loop, a sub-agent batch and
resume, so a resumed call is gated exactly as a live one.

Its contract with the approval package (``ApprovalPolicy``, ``HumanApprovals`` and the
data they exchange) is in ``engine.session.protocols``.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum
from typing import Any

from engine.bus.chat import ToolCallEvent
from engine.session.protocols import ApprovalPolicy, Decision, GateRequest, Verdict
from engine.session.turn.cancel import TurnCancelled
from engine.session.turn.turn_env import TurnEnv
from engine.store.rows import ToolCallRow
from engine.tools.preview import preview_call

__all__ = [
    "AUTO_DENIED",
    "AllowAll",
    "GateOutcome",
    "denies_reading",
    "rejection_message",
    "run_approval_gate",
]


class AllowAll:
    """A policy for tests and trusted embeddings: every call runs without asking."""

    async def check(self, request: GateRequest) -> Verdict:
        return Verdict(Decision.ALLOW)


class GateOutcome(StrEnum):
    PROCEED = "proceed"
    REJECTED = "rejected"
    CHANNEL_CLOSED = "channel_closed"


AUTO_DENIED = (
    "Tool call rejected automatically: it needs a human's approval and this session "
    "runs unattended."
)


def rejection_message(note: str) -> str:
    """The one wording of a rejection the model sees."""
    note = note.strip()
    return (
        f"User rejected this tool call. Reason: {note}" if note else "User rejected this tool call."
    )


async def run_approval_gate(
    env: TurnEnv,
    call: ToolCallRow,
    args: dict[str, Any],
    collected: list[ToolCallEvent] | None = None,
    *,
    resumed: bool = False,
) -> GateOutcome:
    """Allow → proceed; deny → ``rejected``; require → a human decides (or auto-deny).

    ``resumed``: a call a crash or a closed channel left open; a human may have decided it
    meanwhile. Their rejection stands whatever the rules say now (until 2026-12-06 a bypass
    or an allow rule granted since ran a call the human had rejected; found by review); a
    deny rule still beats their approval."""
    recorded = await env.approvals.recorded(call.id) if resumed else None
    if recorded is not None and recorded.decision is not Decision.ALLOW:
        _collect(collected, await env.recorder.rejected(call, rejection_message(recorded.reason)))
        return GateOutcome.REJECTED
    request = GateRequest(
        session_id=env.session.id,
        agent_id=env.frame.agent_id,
        source=env.session.source,
        call=call,
        args=args,
        run_context=await _run_context(env),
        working_directory=env.tool_ctx.working_directory,
    )
    verdict = await env.policy.check(request)
    if verdict.decision is Decision.ALLOW:
        return GateOutcome.PROCEED
    if verdict.decision is Decision.DENY:
        reason = "Tool call denied by the approval rules" + (
            f": {verdict.reason}" if verdict.reason else "."
        )
        _collect(collected, await env.recorder.rejected(call, reason))
        return GateOutcome.REJECTED
    if env.session.auto_deny_approvals:
        _collect(collected, await env.recorder.rejected(call, AUTO_DENIED))
        return GateOutcome.REJECTED
    readable = call.name not in _WRITES or not await denies_reading(env.policy, request)
    try:
        decided = await env.scope.run(
            env.approvals.wait_for_approval(request, lambda: _announce(env, call, args, readable))
        )
    except TurnCancelled:
        await env.recorder.cancelled(call)
        return GateOutcome.CHANNEL_CLOSED
    if decided is None:  # nobody can answer now: stays pending, asked again on resume
        await env.recorder.pending(call)
        return GateOutcome.CHANNEL_CLOSED
    if decided.decision is Decision.ALLOW:
        return GateOutcome.PROCEED
    _collect(collected, await env.recorder.rejected(call, rejection_message(decided.reason)))
    return GateOutcome.REJECTED


async def denies_reading(policy: ApprovalPolicy, request: GateRequest) -> bool:
    """Whether the rules deny reading the file the call names: a write's card then shows
    none of its content (until 2026-12-07 ``write_file`` on a file ``read_file`` may not
    read showed all of it on the card, to a group and the API's stream, before anyone
    decided; found by review)."""
    reading = replace(request, call=replace(request.call, name="read_file"))
    return (await policy.check(reading)).decision is Decision.DENY


#: The calls whose card shows the file as it is (``preview_call``).
_WRITES = frozenset({"write_file", "edit_file"})


def _announce(env: TurnEnv, call: ToolCallRow, args: dict[str, Any], readable: bool) -> None:
    env.emitter.approval_required(
        call.id,
        call.name,
        args,
        session_id=env.session.id,
        agent_id=env.frame.agent_id,
        preview=preview_call(
            env.workspace,
            call.name,
            args,
            env.tool_ctx.working_directory,
            env.tools.get(call.name),
            readable=readable,
        ),
    )


def _collect(collected: list[ToolCallEvent] | None, event: ToolCallEvent) -> None:
    if collected is not None:
        collected.append(event)


async def _run_context(env: TurnEnv) -> dict[str, Any] | None:
    """The session's grants as they are now: a scheduled job's may be narrowed or revoked
    while its run goes on (its owner's 🔒), and the run read a revoked file unasked
    (found by review), or widened ("🔄 Session" on its card: until 2026-12-06 a run begun
    without grants asked again). A chat's session without grants reads none (it has
    none to change)."""
    if env.session.run_context is None and env.session.is_interactive:
        return None
    row = await env.store.sessions.get(env.session.id)
    return row.run_context if row is not None else None
