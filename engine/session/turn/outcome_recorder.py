"""Persist a tool call's outcome, keep the transcript in step, and tell the adapter."""

from __future__ import annotations

from collections.abc import Sequence

from engine.bus.chat import ToolCallEvent
from engine.session.context.transcript import FrameTranscript
from engine.session.turn.emitter import TurnEmitter
from engine.store.history import History
from engine.store.rows import ToolCallRow, ToolStatus

CANCELLED_NOTE = "Tool call cancelled by the user (/stop) before it finished."
NOT_RUN_NOTE = "Not run: the turn was stopped by the user before this call started."


def interrupted_note(tool_name: str) -> str:
    """What the model reads (after ``Error: ``) for a started call a restart cut short."""
    what = "command" if tool_name == "execute_cmd" else "tool call"
    return (
        f"the service restarted while this {what} was running; it may or may not have "
        "completed. Check before retrying."
    )


class OutcomeRecorder:
    """Every terminal transition of a tool call goes through here."""

    __slots__ = ("_emitter", "_history", "_transcript")

    def __init__(self, history: History, transcript: FrameTranscript, emitter: TurnEmitter):
        self._history = history
        self._transcript = transcript
        self._emitter = emitter

    async def completed(self, call: ToolCallRow, result: str) -> ToolCallEvent:
        await self._store(call, "done", result)
        self._emitter.tool_done(call.id, call.name, result)
        return ToolCallEvent(call.name, call.arguments, result, "done")

    async def failed(self, call: ToolCallRow, error: str) -> ToolCallEvent:
        await self._store(call, "failed", error)
        self._emitter.tool_error(call.id, call.name, error)
        return ToolCallEvent(call.name, call.arguments, error, "failed")

    async def cancelled(self, call: ToolCallRow, note: str = CANCELLED_NOTE) -> None:
        await self._store(call, "cancelled", note)
        self._emitter.tool_cancelled(call.id, call.name)

    async def not_run(self, calls: Sequence[ToolCallRow]) -> None:
        """Calls a stopped turn never started: cancelled, so no resume runs them (the
        ones among ``calls`` that already ended keep their outcome)."""
        for call in calls:
            if call.status in ("running", "pending"):
                await self.cancelled(call, NOT_RUN_NOTE)

    async def rejected(self, call: ToolCallRow, reason: str) -> ToolCallEvent:
        await self._store(call, "rejected", reason)
        self._emitter.tool_rejected(call.id, call.name, reason)
        return ToolCallEvent(call.name, call.arguments, reason, "failed")

    async def pending(self, call: ToolCallRow) -> None:
        await self._store(call, "pending", None)

    async def launched(self, call: ToolCallRow) -> None:
        """The call's effect starts now: from here a crash reports it, never re-runs it."""
        call.launched_at = await self._history.mark_launched(call.id)

    async def interrupted(self, call: ToolCallRow) -> ToolCallEvent:
        """A crash cut a started call short: the model is told, the call is not re-run."""
        self._emitter.tool_start(call.id, call.name, call.arguments or "")
        return await self.failed(call, interrupted_note(call.name))

    async def _store(self, call: ToolCallRow, status: ToolStatus, result: str | None) -> None:
        await self._history.set_tool_status(call.id, status, result)
        call.status = status
        call.result = result
        self._transcript.tool_call_changed(call)
