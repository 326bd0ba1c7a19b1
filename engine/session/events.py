"""Turn events: what a running turn tells the adapter that started it.

They leave a turn only through ``TurnEmitter``. Adapters render them (streamed text,
tool activity, the final answer); the hub bridges them onto its broadcast bus.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.tools.preview import ApprovalPreview


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A streamed fragment of the assistant's answer."""

    text: str
    depth: int = 0


@dataclass(frozen=True, slots=True)
class Thinking:
    """Text the model wrote alongside tool calls (an intermediate step)."""

    content: str
    reasoning: str | None = None
    depth: int = 0


@dataclass(frozen=True, slots=True)
class ModelFallback:
    failed_model: str
    next_model: str
    reason: str


@dataclass(frozen=True, slots=True)
class ToolStart:
    tool_call_id: int
    name: str
    arguments: str
    depth: int = 0


@dataclass(frozen=True, slots=True)
class ToolDone:
    tool_call_id: int
    name: str
    result: str
    depth: int = 0


@dataclass(frozen=True, slots=True)
class ToolError:
    tool_call_id: int
    name: str
    error: str
    depth: int = 0


@dataclass(frozen=True, slots=True)
class ToolCancelled:
    tool_call_id: int
    name: str
    depth: int = 0


@dataclass(frozen=True, slots=True)
class ToolRejected:
    tool_call_id: int
    name: str
    reason: str
    depth: int = 0


@dataclass(frozen=True, slots=True)
class ApprovalRequired:
    """A gated call waits for ``approve``/``reject`` of ``tool_call_id`` (the durable id)."""

    tool_call_id: int
    name: str
    arguments: dict[str, Any]
    session_id: int
    agent_id: str
    preview: ApprovalPreview | None = None
    depth: int = 0
    #: Who wants the call when it is not the chat's own turn: a job's title (its card says
    #: "⏰ <title> wants to run: …"); ``None``: the chat's own turn.
    asked_by: str | None = None


@dataclass(frozen=True, slots=True)
class Question:
    """``ask_user_clarification``: answer with ``resolve_question(request_id, answer)``."""

    request_id: int
    question: str
    session_id: int
    depth: int = 0


@dataclass(frozen=True, slots=True)
class AgentStart:
    """A sub-agent starts on a task, one frame deeper (``depth`` is the child's)."""

    agent_id: str
    prompt: str
    depth: int


@dataclass(frozen=True, slots=True)
class AgentEnd:
    agent_id: str
    status: str  # done | failed | cancelled
    depth: int


@dataclass(frozen=True, slots=True)
class UserMessage:
    """Echo of a stored user message (clients never render a message optimistically)."""

    message_id: int
    content: str
    attachments: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Done:
    content: str
    message_id: int
    input_tokens: int | None = None
    output_tokens: int | None = None
    truncated: bool = False
    tool_calls: tuple[Any, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Error:
    message: str


TurnEvent = (
    TextDelta
    | Thinking
    | ModelFallback
    | ToolStart
    | ToolDone
    | ToolError
    | ToolCancelled
    | ToolRejected
    | ApprovalRequired
    | Question
    | AgentStart
    | AgentEnd
    | UserMessage
    | Done
    | Error
)
