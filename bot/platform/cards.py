"""What approval cards and clarification questions mean, on every platform.

A card shows the tool, the agent, the call in full (``CardContent``) and who may decide.
Its choices are approve, reject (with an optional reason, given within a window after
the first ❌), a 15-minute bypass and a session bypass; ``decide`` is what a tap does. A
card is *expired* when it is gone, closed, or the tap is not on the message that shows it.
A question is answered by a reply to it, or by any plain message while it is open.
Rendering (buttons, callback data, markup) is each platform's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from sqlalchemy.engine import Connection

from bot.platform.protocols import MessageRef, ShownCard
from engine.approval import Decider, display_call
from engine.hub import ChatHub, HubError
from engine.hub import Choice as HubChoice
from engine.session import ApprovalRequired
from engine.store import InboxError, NotPermitted

__all__ = [
    "CHOICES",
    "CHOICE_LABELS",
    "EXPIRED",
    "NOT_ALLOWED",
    "REJECT_WINDOW_S",
    "CardContent",
    "Choice",
    "Outcome",
    "RejectWindow",
    "RejectWindows",
    "card_content",
    "decide",
    "outcome_line",
    "question_answered",
    "reply_target",
]

log = logging.getLogger(__name__)

Choice = Literal["approve", "reject", "bypass_15m", "bypass_session"]
#: What a closed card says happened: a choice, or ``cancelled`` (/stop) / ``expired``.
Outcome = Literal["approve", "reject", "bypass_15m", "bypass_session", "cancelled", "expired"]

CHOICES: tuple[Choice, ...] = ("approve", "reject", "bypass_15m", "bypass_session")
#: The words of the choices, everywhere they are offered.
CHOICE_LABELS: dict[Choice, str] = {
    "approve": "✅ Approve",
    "reject": "❌ Reject",
    "bypass_15m": "⏱ 15 min",
    "bypass_session": "🔄 Session",
}
EXPIRED = "This button has expired."
NOT_ALLOWED = "You are not allowed to decide here."
#: After the first ❌, a reason may follow within this long; then it is rejected without.
REJECT_WINDOW_S = 60.0

_OUTCOME_LINES: dict[str, tuple[str, str]] = {
    # outcome: (icon and verb; what follows "by <who>")
    "approve": ("✅ Approved", ""),
    "reject": ("❌ Rejected", ""),
    "bypass_15m": ("⏱ Approved", " — no more asking for 15 min"),
    "bypass_session": ("🔄 Approved", " — no more asking this session"),
    "cancelled": ("⊘ Cancelled", " (/stop)"),
    "expired": ("⌛ Expired", ""),
    "answered": ("✍️ Answered", ""),
    # A scheduled job's card (``scheduler/asking.py``): closed without a decision.
    "timed_out": ("⌛ Not decided in time", " — the call was rejected and the job went on"),
    "stopped": ("⊘ Stopped", " — the job's run ended"),
}
_OUTCOME_ALIASES = {
    "approved": "approve",
    "rejected": "reject",
    "canceled": "cancelled",
    "cancel": "cancelled",
    "expire": "expired",
}


def outcome_line(outcome: str) -> tuple[str, str]:
    """``(verb, suffix)`` of a closed card: "✅ Approved" [by who] "" and so on."""
    key = _OUTCOME_ALIASES.get(outcome, outcome)
    return _OUTCOME_LINES.get(key, (f"• {outcome}", ""))


# -- what a card shows -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CardContent:
    """A card's fields: the call in full, never cut here (a platform cuts and attaches)."""

    tool: str
    agent: str
    depth: int
    label: str  # "Command", "Diff", "Arguments"
    content: str
    language: str
    workdir: str | None = None
    path: str | None = None
    new_file: bool = False
    #: Who may decide (``APPROVERS``), e.g. "Ada (who asked) or the owner can decide."
    deciders: str | None = None
    #: A scheduled job's title when the call is its run's, not this chat's own turn's.
    asked_by: str | None = None

    @property
    def title(self) -> str:
        """The card's first line: "🔐 Approval needed", or "⏰ <job> wants to run: <tool>"."""
        if self.asked_by:
            return f"⏰ {self.asked_by} wants to run: {self.tool}"
        return "🔐 Approval needed"


def card_content(event: ApprovalRequired, deciders: str | None = None) -> CardContent:
    """What a card shows of a call, on every platform: the call's text ``plainly``
    (``display_call``)."""
    shown = display_call(event.name, event.arguments, event.preview)
    return CardContent(
        tool=event.name,
        agent=event.agent_id,
        depth=event.depth,
        label=shown.label,
        content=shown.content,
        language=shown.language,
        workdir=shown.workdir,
        path=shown.path,
        new_file=bool(shown.new_file),
        deciders=deciders,
        asked_by=event.asked_by,
    )


# -- what a tap does ------------------------------------------------------------------


Decided = Literal["decided", "expired", "kept", "taken"]


async def decide(
    hub: ChatHub,
    source: str,
    tool_call_id: int,
    choice: Choice,
    decider: Decider,
    note: str = "",
    *,
    by: str | None = None,
    also: Callable[[Connection], None] | None = None,
) -> Decided:
    """Record ``choice`` (``by``: announced to the chat's every view, as the hub's
    ``DecisionMade``; ``also`` committed with it, rolled back when it is refused):
    ``decided``; ``expired`` when the call is no longer open;
    ``kept`` when the decider may not decide it after all (the card stays as it is);
    ``taken`` when another decision came first (a double click: that one closes the card
    with its outcome; closing it as expired here showed "Expired" on an approved call)."""
    try:
        await hub.decide(
            tool_call_id,
            HubChoice.named(choice),
            decider=decider,
            note=note,
            by=by,
            source=source,
            also=also,
        )
    except NotPermitted as exc:  # a check just before said yes: the card stays open
        log.warning("decision on %s refused: %s", tool_call_id, exc)
        return "kept"
    except (InboxError, HubError) as exc:
        log.info("decision on %s refused: %s", tool_call_id, exc)
        return "taken" if isinstance(exc, InboxError) and exc.code == "resolved" else "expired"
    return "decided"


@dataclass(frozen=True, slots=True)
class RejectWindow:
    deadline: float
    user_name: str
    decider: Decider


class RejectWindows:
    """Cards whose ❌ was tapped once: a reply within the window is the reason."""

    def __init__(self) -> None:
        self._open: dict[int, RejectWindow] = {}

    def open(self, tool_call_id: int, window: RejectWindow) -> None:
        self._open[tool_call_id] = window

    def close(self, tool_call_id: int) -> None:
        self._open.pop(tool_call_id, None)

    def __contains__(self, tool_call_id: object) -> bool:
        return tool_call_id in self._open


# -- what a message answers -----------------------------------------------------------

Card = TypeVar("Card", bound=ShownCard)


def reply_target(
    cards: Sequence[Card],
    *,
    reply_to: MessageRef | None,
    is_command: bool,
    rejecting: RejectWindows,
) -> tuple[Literal["answer", "reason"], Card] | None:
    """Which open card a message answers: ``answer`` for a question (a reply to it, or any
    plain message while one is open: the newest), ``reason`` for a card in its reject
    window replied to; ``None``: the message is a message."""
    if not cards:
        return None
    if reply_to is not None:
        for card in cards:
            if card.message_id == reply_to:
                if card.kind == "question":
                    return "answer", card
                if card.tool_call_id in rejecting:
                    return "reason", card
    question = question_answered([c for c in cards if c.kind == "question"], is_command=is_command)
    return None if question is None else ("answer", question)


Asked = TypeVar("Asked")


def question_answered(open_questions: Sequence[Asked], *, is_command: bool) -> Asked | None:
    """Which open question a plain message answers (every platform's rule): the newest
    one (they come oldest first); a command answers none."""
    if not open_questions or is_command:
        return None
    return open_questions[-1]
