"""The chat event bus: completed chat turns and compactions, fanned out in process.

Producers (the session handler, the context compactor) publish; consumers (memory,
analytics, ...) subscribe once at start-up and loop::

    async with bus.subscribe() as sub:
        async for event in sub:
            match event:
                case UserMessage(e) | AssistantResponse(e): ...
                case CompactionDone(e): ...
                case Lagged(missed=n): log.warning("chat bus lagged by %d", n)

Callers publish only after the data an event describes is committed, so a
consumer may read it back from the store at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, TypeAlias, get_args

from engine.bus.broadcast import DEFAULT_CAPACITY, Broadcast

__all__ = [
    "AssistantResponse",
    "BusEvent",
    "ChatEvent",
    "ChatEventBus",
    "ChatEventRole",
    "CompactionDone",
    "CompactionEvent",
    "ToolCallEvent",
    "ToolCallStatus",
    "UserMessage",
]

ChatEventRole: TypeAlias = Literal["user", "assistant", "agent"]
ToolCallStatus: TypeAlias = Literal["done", "failed"]

_ROLES = frozenset(get_args(ChatEventRole))
_STATUSES = frozenset(get_args(ToolCallStatus))


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """One finished tool call of an assistant turn."""

    name: str
    arguments: str | None  # JSON-serialized arguments
    result: str | None  # tool output or error message
    status: ToolCallStatus

    def __post_init__(self) -> None:
        # Literal is not enforced at runtime; a typo here would silently reach consumers.
        if self.status not in _STATUSES:
            raise ValueError(
                f"ToolCallEvent.status must be 'done' or 'failed', got {self.status!r}"
            )


@dataclass(frozen=True, slots=True)
class ChatEvent:
    """A committed chat message (one per side of a completed root turn)."""

    session_id: int  # chat_sessions.id
    stack_id: int  # stack frame id
    message_id: int  # history row id of this message
    role: ChatEventRole
    content: str
    is_synthetic: bool  # the message is system-generated (ticks, briefings)
    is_interactive: bool  # a real user participates (terminal, Telegram)
    is_ephemeral: bool  # short-lived automated session (cron, tic)
    tool_calls: tuple[ToolCallEvent, ...] = ()  # non-empty only for assistant events
    created_at: datetime = field(default_factory=_utcnow)  # time of publication, UTC

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise ValueError(f"ChatEvent.role must be user|assistant|agent, got {self.role!r}")


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """A context summary was persisted."""

    session_id: int
    stack_id: int
    summary_id: int  # id of the new summary row
    covers_up_to_message_id: int  # messages with id > this are loaded raw from now on
    triggered_by_tokens: int  # input token count that triggered the compaction


@dataclass(frozen=True, slots=True)
class UserMessage:
    """The user side of a completed turn (published first)."""

    event: ChatEvent


@dataclass(frozen=True, slots=True)
class AssistantResponse:
    """The assistant side of a completed turn, with its tool calls (published second)."""

    event: ChatEvent


@dataclass(frozen=True, slots=True)
class CompactionDone:
    """A compaction finished and its summary is stored."""

    event: CompactionEvent


BusEvent: TypeAlias = UserMessage | AssistantResponse | CompactionDone


class ChatEventBus(Broadcast[BusEvent]):
    """Broadcast of :data:`BusEvent` with one bounded buffer per subscriber.

    Publish only after the data is committed; publishing never blocks. Each
    publish method returns the number of subscribers the event reached.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        super().__init__(capacity)

    def user_message(self, event: ChatEvent) -> int:
        """Publish ``UserMessage(event)``."""
        return self.publish(UserMessage(event))

    def assistant_response(self, event: ChatEvent) -> int:
        """Publish ``AssistantResponse(event)``."""
        return self.publish(AssistantResponse(event))

    def compaction_done(self, event: CompactionEvent) -> int:
        """Publish ``CompactionDone(event)``."""
        return self.publish(CompactionDone(event))
