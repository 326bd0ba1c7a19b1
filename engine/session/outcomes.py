"""How a turn ends."""

from __future__ import annotations

from dataclasses import dataclass

from engine.bus.chat import ToolCallEvent


@dataclass(frozen=True, slots=True)
class Final:
    content: str
    message_id: int
    input_tokens: int | None
    output_tokens: int | None
    truncated: bool
    tool_calls: tuple[ToolCallEvent, ...]


@dataclass(frozen=True, slots=True)
class Cancelled:
    pass


@dataclass(frozen=True, slots=True)
class Exhausted:
    rounds: int


TurnOutcome = Final | Cancelled | Exhausted


@dataclass(frozen=True, slots=True)
class Failed:
    """The turn stopped on an error the user was shown (every model failed, say)."""

    message: str


TurnResult = TurnOutcome | Failed
