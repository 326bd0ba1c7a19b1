"""The only way turn events leave a turn."""

from __future__ import annotations

import logging
from typing import Any

from engine.session.events import (
    AgentEnd,
    AgentStart,
    ApprovalRequired,
    Done,
    Error,
    ModelFallback,
    Question,
    TextDelta,
    Thinking,
    ToolCancelled,
    ToolDone,
    ToolError,
    ToolRejected,
    ToolStart,
    TurnEvent,
    UserMessage,
)
from engine.session.protocols import EmitFn, RecordsAnswers
from engine.store.history import AlsoWithKey, AlsoWithRow
from engine.tools.preview import ApprovalPreview

log = logging.getLogger(__name__)


class TurnEmitter:
    """Fire-and-forget seam over the caller's ``emit`` callback.

    A failing callback is logged and never breaks the turn: rendering is not allowed to
    lose the work the turn has already committed.
    """

    __slots__ = ("_emit", "_records", "depth")

    def __init__(
        self, emit: EmitFn | None, records: RecordsAnswers | None = None, depth: int = 0
    ) -> None:
        self._emit = emit
        self._records = records
        self.depth = depth

    def deeper(self) -> TurnEmitter:
        return TurnEmitter(self._emit, self._records, self.depth + 1)

    def at_depth(self, depth: int) -> TurnEmitter:
        return self if depth == self.depth else TurnEmitter(self._emit, self._records, depth)

    def send(self, event: TurnEvent) -> None:
        if self._emit is None:
            return
        try:
            self._emit(event)
        except Exception:
            log.exception("turn event callback failed on %s", type(event).__name__)

    @property
    def streams(self) -> bool:
        return self._emit is not None

    def answer_unit(self, content: str) -> AlsoWithRow | None:
        """What the caller wants stored with the root answer ``content`` (None: nothing; a
        sub-agent's answer is its parent's tool result, never a reply)."""
        if self.depth != 0 or self._records is None:
            return None
        try:
            return self._records.answer_unit(content)
        except Exception:  # the answer is stored regardless; delivery falls back
            log.exception("answer_unit callback failed")
            return None

    def failure_unit(self, notice: str) -> AlsoWithKey | None:
        """What the caller wants stored with a failed turn's end, its ``notice`` for the user."""
        if self._records is None:
            return None
        try:
            return self._records.failure_unit(notice)
        except Exception:  # the failure is recorded regardless; the notice goes out live
            log.exception("failure_unit callback failed")
            return None

    def text_delta(self, text: str) -> None:
        self.send(TextDelta(text, self.depth))

    def thinking(self, content: str, reasoning: str | None) -> None:
        self.send(Thinking(content, reasoning, self.depth))

    def model_fallback(self, failed: str, next_model: str, reason: str) -> None:
        self.send(ModelFallback(failed, next_model, reason))

    def tool_start(self, tool_call_id: int, name: str, arguments: str) -> None:
        self.send(ToolStart(tool_call_id, name, arguments, self.depth))

    def tool_done(self, tool_call_id: int, name: str, result: str) -> None:
        self.send(ToolDone(tool_call_id, name, result, self.depth))

    def tool_error(self, tool_call_id: int, name: str, error: str) -> None:
        self.send(ToolError(tool_call_id, name, error, self.depth))

    def tool_cancelled(self, tool_call_id: int, name: str) -> None:
        self.send(ToolCancelled(tool_call_id, name, self.depth))

    def tool_rejected(self, tool_call_id: int, name: str, reason: str) -> None:
        self.send(ToolRejected(tool_call_id, name, reason, self.depth))

    def approval_required(
        self,
        tool_call_id: int,
        name: str,
        arguments: dict[str, Any],
        *,
        session_id: int,
        agent_id: str,
        preview: ApprovalPreview | None,
    ) -> None:
        self.send(
            ApprovalRequired(
                tool_call_id, name, arguments, session_id, agent_id, preview, self.depth
            )
        )

    def question(self, request_id: int, question: str, *, session_id: int) -> None:
        self.send(Question(request_id, question, session_id, self.depth))

    def agent_start(self, agent_id: str, prompt: str, depth: int) -> None:
        self.send(AgentStart(agent_id, prompt, depth))

    def agent_end(self, agent_id: str, status: str, depth: int) -> None:
        self.send(AgentEnd(agent_id, status, depth))

    def user_message(self, message_id: int, content: str, attachments: tuple = ()) -> None:
        self.send(UserMessage(message_id, content, attachments))

    def done(self, event: Done) -> None:
        self.send(event)

    def error(self, message: str) -> None:
        self.send(Error(message))
