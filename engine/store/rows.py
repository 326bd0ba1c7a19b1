"""Typed rows the store hands out. Plain data; no database handles inside."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Role = Literal["user", "assistant", "agent"]
ToolStatus = Literal["running", "pending", "done", "failed", "cancelled", "rejected"]
TERMINAL_TOOL_STATUSES: frozenset[str] = frozenset({"done", "failed", "cancelled", "rejected"})
OPEN_TOOL_STATUSES: frozenset[str] = frozenset({"running", "pending"})


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: int
    source: str
    agent_id: str
    is_interactive: bool
    is_ephemeral: bool
    run_context: dict[str, Any] | None
    title: str | None
    created_at: datetime
    context_label: str | None = None
    auto_deny_approvals: bool = False


@dataclass(frozen=True, slots=True)
class FrameRow:
    """One level of a session's agent stack (0 = the root conversation)."""

    id: int
    session_id: int
    agent_id: str
    agent_prompt: str | None
    depth: int
    parent_tool_call_id: int | None
    terminated_at: datetime | None
    created_at: datetime


@dataclass(slots=True)
class ToolCallRow:
    """A tool call; its ``id`` is the durable tool-call id (approvals key on it)."""

    id: int
    message_id: int
    llm_call_id: str
    name: str
    arguments: str | None
    result: str | None
    status: ToolStatus
    #: When a call that is not safe to repeat started its effect; ``None`` if it never did.
    launched_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class LaunchedProcess:
    """The process group of an open tool call, as recorded when its command started."""

    tool_call_id: int
    process_group: int
    process_start: str | None


@dataclass(slots=True)
class MessageRow:
    id: int
    stack_id: int
    role: Role
    content: str
    status: Literal["ok", "failed"]
    is_synthetic: bool
    reasoning_content: str | None
    metadata: dict[str, Any] | None
    created_at: datetime
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    tool_calls: list[ToolCallRow] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NewToolCall:
    """A call to store. Live calls start ``running``; a synthetic one may be stored done."""

    llm_call_id: str
    name: str
    arguments: str
    status: ToolStatus = "running"
    result: str | None = None


@dataclass(frozen=True, slots=True)
class AssistantRecord:
    """What one LLM round produced, ready to persist."""

    content: str
    reasoning_content: str | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    duration_ms: int | None = None
    is_synthetic: bool = False
    #: What is kept with it beside (a final answer cut at the model's token limit:
    #: ``{"truncated": true}``, read back by the OpenAI API for a request sent again).
    metadata: dict[str, Any] | None = None
