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
    """The turn stopped on an error the user was shown (every model failed, say).
    ``away``: every model was unreachable or busy (a background caller may try the same
    work again later without counting it as the work's failure)."""

    message: str
    away: bool = False


TurnResult = TurnOutcome | Failed


#: What a background caller (cron, an async task) records for a turn ended by /stop.
CANCELLED_ERROR = "Turn cancelled by user"


def background_error(result: TurnResult | None) -> str | None:
    """The error a background caller records for a turn that did not answer."""
    match result:
        case Cancelled():
            return CANCELLED_ERROR
        case Exhausted(rounds):
            return f"Stopped after {rounds} tool rounds without a final answer"
        case Failed(message):
            return message
    return None
