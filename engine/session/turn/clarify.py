"""``ask_user_clarification``: the call waits for the user's answer, which is its result.

The request id is the durable tool-call id. While waiting the row is ``pending``; if the
waiting channel closes, it stays ``pending`` so a resume asks again.
"""

from __future__ import annotations

from typing import Any

from engine.bus.chat import ToolCallEvent
from engine.session.turn.cancel import TurnCancelled
from engine.session.turn.turn_env import TurnEnv
from engine.store.rows import ToolCallRow


async def ask_user(env: TurnEnv, call: ToolCallRow, args: dict[str, Any]) -> ToolCallEvent | None:
    """The recorded outcome, or ``None`` when the turn ends here (cancelled or unanswerable)."""
    question = str(args.get("question") or "").strip()
    if not question:
        return await env.recorder.failed(call, "ask_user_clarification: 'question' is empty")
    # A resumed question is pending already: writing it again could wipe an answer stored
    # since the resume read the row (the answer's process then finds no question open).
    if call.status != "pending":
        await env.recorder.pending(call)
    try:
        answer = await env.scope.run(
            env.approvals.wait_for_answer(
                call,
                env.session.id,
                lambda: env.emitter.question(call.id, question, session_id=env.session.id),
            )
        )
    except TurnCancelled:
        await env.recorder.cancelled(call)
        return None
    if answer is None:
        return None
    return await env.recorder.completed(call, answer)
