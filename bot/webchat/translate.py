"""Hub events as web chat frames (``protocol.py``): what each turn event looks like."""

from __future__ import annotations

import json
from typing import Any

from bot.platform.cards import CHOICE_LABELS, CHOICES, card_content, outcome_line
from bot.webchat.markdown import render_markdown
from bot.webchat.protocol import (
    AgentEndFrame,
    AgentQuestion,
    AgentStartFrame,
    ApprovalRequiredFrame,
    ApprovalResolved,
    Attachment,
    Choice,
    DoneFrame,
    ErrorFrame,
    NewSessionFrame,
    QuestionAnswered,
    ServerFrame,
    TextDeltaFrame,
    ThinkingDelta,
    ToolEndFrame,
    ToolStartFrame,
    UserMessageFrame,
)
from engine.approval import SHORT_BYPASS_SECONDS
from engine.hub import ANSWERED, DecisionMade, NewSession
from engine.session import (
    AgentEnd,
    AgentStart,
    ApprovalRequired,
    Done,
    Error,
    Question,
    TextDelta,
    Thinking,
    ToolCancelled,
    ToolDone,
    ToolError,
    ToolRejected,
    ToolStart,
    UserMessage,
)
from engine.store import InboxItem
from engine.tools import ApprovalPreview
from scheduler.runner import JOB_LABEL

__all__ = [
    "BYPASS_SECS",
    "RESULT_PREVIEW_CHARS",
    "approval_frame",
    "attachments_of",
    "pending_approval_event",
    "pending_question_frame",
    "preview",
    "resolved_frame",
    "to_frame",
]

RESULT_PREVIEW_CHARS = 500

#: What ``approve_tool`` sends for each choice (reject is its own frame).
BYPASS_SECS: dict[str, int | None] = {
    "approve": None,
    "bypass_15m": int(SHORT_BYPASS_SECONDS),
    "bypass_session": 0,
    "reject": None,
}
CARD_CHOICES = [
    Choice(choice=choice, label=CHOICE_LABELS[choice], bypass_secs=BYPASS_SECS[choice])
    for choice in CHOICES
]


def attachments_of(items: Any) -> list[Attachment]:
    """A message's stored attachments as the frame shows them (what is not one is left
    out: metadata comes from every front end)."""
    shown = []
    for item in items or ():
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            try:
                shown.append(
                    Attachment.model_validate(
                        {
                            "path": item["path"],
                            "name": item.get("name") or item["path"].rsplit("/", 1)[-1],
                            "kind": item.get("kind") or "document",
                            "mime_type": item.get("mime_type"),
                            "size": item.get("size"),
                        }
                    )
                )
            except ValueError:
                continue
    return shown


def to_frame(event: Any) -> ServerFrame | None:
    """The frame of one hub event (``None``: the web chat does not show it). Approval
    cards are built by ``approval_frame`` (they need who may decide)."""
    match event:
        case UserMessage(message_id=message_id, content=content, attachments=attachments):
            return UserMessageFrame(
                id=message_id, text=content, attachments=attachments_of(attachments)
            )
        case TextDelta(text=text, depth=depth):
            return TextDeltaFrame(text=text, depth=depth)
        case Thinking(content=content, reasoning=reasoning, depth=depth):
            text = content or reasoning or ""
            html = render_markdown(content) if content else None
            return ThinkingDelta(text=text, depth=depth, html=html) if text else None
        case ToolStart(tool_call_id=call_id, name=name, arguments=arguments, depth=depth):
            return ToolStartFrame(tool_call_id=call_id, name=name, arguments=arguments, depth=depth)
        case ToolDone(tool_call_id=call_id, name=name, result=result, depth=depth):
            return _tool_end(call_id, name, "done", result, depth)
        case ToolError(tool_call_id=call_id, name=name, error=error, depth=depth):
            return _tool_end(call_id, name, "failed", error, depth)
        case ToolRejected(tool_call_id=call_id, name=name, reason=reason, depth=depth):
            return _tool_end(call_id, name, "rejected", reason, depth)
        case ToolCancelled(tool_call_id=call_id, name=name, depth=depth):
            return _tool_end(call_id, name, "cancelled", "", depth)
        case Question(request_id=request_id, question=question, depth=depth):
            return AgentQuestion(request_id=request_id, question=question, depth=depth)
        case AgentStart(agent_id=agent_id, depth=depth):
            return AgentStartFrame(agent_id=agent_id, depth=depth)
        case AgentEnd(agent_id=agent_id, status=status, depth=depth):
            return AgentEndFrame(agent_id=agent_id, status=status, depth=depth)
        case Done(content=content, message_id=message_id, truncated=truncated):
            return DoneFrame(
                message_id=message_id,
                content=content,
                html=render_markdown(content),
                truncated=truncated,
            )
        case Error(message=message):
            return ErrorFrame(code="turn", message=message)
        case NewSession(session_id=session_id):
            return NewSessionFrame(session_id=session_id)
        case DecisionMade(tool_call_id=call_id, outcome=outcome, by=by, note=note):
            if outcome == ANSWERED:  # a question answered elsewhere: its box closes
                return QuestionAnswered(request_id=call_id, answer=note)
            return resolved_frame(call_id, outcome, by, note)
    return None


def approval_frame(event: ApprovalRequired, deciders: str | None) -> ApprovalRequiredFrame:
    card = card_content(event, deciders)
    return ApprovalRequiredFrame(
        tool_call_id=event.tool_call_id,
        tool=card.tool,
        agent=card.agent,
        depth=card.depth,
        label=card.label,
        content=card.content,
        language=card.language,
        workdir=card.workdir,
        path=card.path,
        new_file=card.new_file,
        deciders=card.deciders,
        asked_by=card.asked_by,
        choices=CARD_CHOICES,
    )


def resolved_frame(
    tool_call_id: int, outcome: str, by: str | None, note: str = ""
) -> ApprovalResolved:
    verb, suffix = outcome_line(outcome)
    line = f"{verb} by {by}{suffix}" if by else f"{verb}{suffix}"
    return ApprovalResolved(tool_call_id=tool_call_id, outcome=outcome, line=line, by=by, note=note)


def pending_approval_event(
    item: InboxItem, preview: ApprovalPreview | None, *, visiting: bool = False
) -> ApprovalRequired:
    """A stored waiting call as the event that showed it (a socket that opens later), with
    its ``preview`` (``hub.preview``: the card showed the call's JSON instead of the
    diff or the command after a reload until 2026-12-06).

    ``visiting``: the call of a scheduled job's run asking in this conversation; its card
    names the job (from the run's session label, as the run named it)."""
    label = item.context_label or ""
    return ApprovalRequired(
        tool_call_id=item.tool_call_id,
        name=item.name,
        arguments=_arguments(item.arguments),
        session_id=item.session_id,
        agent_id=item.agent_id,
        depth=item.depth,
        preview=preview,
        asked_by=(label.removeprefix(JOB_LABEL) or "A scheduled job") if visiting else None,
    )


def pending_question_frame(item: InboxItem) -> AgentQuestion:
    question = _arguments(item.arguments).get("question")
    return AgentQuestion(
        request_id=item.tool_call_id,
        question=question if isinstance(question, str) else "",
        depth=item.depth,
    )


def _arguments(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return {}
    return value if isinstance(value, dict) else {}


def preview(text: str, limit: int = RESULT_PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tool_end(call_id: int, name: str, status: Any, text: str, depth: int) -> ToolEndFrame:
    return ToolEndFrame(
        tool_call_id=call_id, name=name, status=status, preview=preview(text), depth=depth
    )
