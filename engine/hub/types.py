"""What goes in and out of the hub: options, notifications, bus events, errors."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from engine.approval.broker import SHORT_BYPASS_SECONDS, BypassRequest
from engine.session.events import Error, TurnEvent
from engine.tools.protocols import Tool

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = [
    "APPROVE",
    "CHOICES",
    "REJECT",
    "Choice",
    "FailureNotice",
    "HubError",
    "HubEvent",
    "NewSession",
    "NoticeWithdrawn",
    "Notification",
    "SendOptions",
    "TextRefused",
    "check_text",
    "validate_source",
]

# `telegram:-100123:45`, `console`, `web:ada@example.org`: a lowercase kind, then ids.
_SOURCE = re.compile(r"[a-z][a-z0-9_]*(:[A-Za-z0-9_.@+\-]+)*")
MAX_SOURCE_CHARS = 255


class HubError(ValueError):
    """A request the hub refuses; the message says what was wrong."""


class TextRefused(HubError):
    """A message's (or an answer's) text the hub takes from nobody: too long, empty. Not a
    sign that what it answers is gone."""


class NoticeWithdrawn(Exception):
    """Raised by a notification's ``delivered_in``: its sender's record says it was told
    already (by another worker), so storing it again rolls back. Not a failure."""


def validate_source(source: object) -> str:
    if not isinstance(source, str) or not source:
        raise HubError("source: must be a non-empty string such as 'telegram:42'")
    if len(source) > MAX_SOURCE_CHARS:
        raise HubError(f"source: longer than {MAX_SOURCE_CHARS} characters")
    if not _SOURCE.fullmatch(source):
        raise HubError(
            f"source: {source[:80]!r} is malformed; expected '<kind>' or '<kind>:<id>[:<id>]' "
            "(kind in lowercase letters, digits, '_'; ids without spaces or ':')"
        )
    return source


#: The advice for a message over the limit (a platform that reads no files says another).
AS_A_FILE = "Send it as a file instead."


def check_text(text: object, options: SendOptions, limit: int) -> None:
    """Refuse a text that is no string, longer than ``limit`` characters, or empty (a
    message with attachments may be empty)."""
    if not isinstance(text, str):
        raise TextRefused("text: must be a string")
    if len(text) > limit:
        raise TextRefused(
            f"message is {len(text)} characters long; the limit is {limit}. {AS_A_FILE}"
        )
    if not text.strip() and not (options.metadata or {}).get("attachments"):
        raise TextRefused("message is empty")


@dataclass(frozen=True, slots=True)
class SendOptions:
    """How one message is handled. Only the JSON-able part survives a restart."""

    is_synthetic: bool = False
    metadata: dict[str, Any] | None = None
    agent_id: str | None = None
    extra_system_static: str | None = None
    extra_system_dynamic: str | None = None
    interface_tools: Sequence[Tool] = ()

    def to_json(self) -> dict[str, Any] | None:
        stored = {
            k: v
            for k, v in (
                ("agent_id", self.agent_id),
                ("extra_system_static", self.extra_system_static),
                ("extra_system_dynamic", self.extra_system_dynamic),
            )
            if v is not None
        }
        return stored or None

    @classmethod
    def from_row(
        cls, is_synthetic: bool, metadata: dict[str, Any] | None, options: dict[str, Any] | None
    ) -> SendOptions:
        return cls(is_synthetic=is_synthetic, metadata=metadata, **(options or {}))


@dataclass(frozen=True, slots=True)
class Notification:
    """A neutral statement of fact from background work, worded for the user by the agent."""

    source: str
    event_type: str
    summary: str
    event_time: datetime = field(default_factory=lambda: datetime.now(UTC))
    refs: dict[str, Any] = field(default_factory=dict)
    #: The source to tell; ``None`` is the home source.
    target: str | None = None
    #: Runs in the transaction that stores it in the target conversation: the sender's
    #: record of the delivery commits with it (a crash cannot tell it twice).
    delivered_in: Callable[[Connection], None] | None = field(default=None, compare=False)
    #: Called once the notification is stored in the target conversation.
    on_delivered: Callable[[], Awaitable[None]] | None = field(default=None, compare=False)
    #: Called with the id of the message the agent wrote about it (the user-facing one).
    on_answered: Callable[[int], Awaitable[None]] | None = field(default=None, compare=False)
    #: Called when its delivery failed before it was stored: its sender may try again.
    on_undelivered: Callable[[], Awaitable[None]] | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "event_type": self.event_type,
            "summary": self.summary,
            "event_time": self.event_time.isoformat(),
            "refs": self.refs,
        }


@dataclass(frozen=True, slots=True)
class NewSession:
    """The source now talks to a fresh session (``/new``, ``/clear``)."""

    session_id: int
    previous_session_id: int | None


@dataclass(frozen=True, slots=True)
class Choice:
    """What a human chose for a gated call: run it (perhaps letting the session's later
    gated calls run without asking: ``bypass``) or not."""

    approved: bool
    bypass: BypassRequest | None = None

    @classmethod
    def named(cls, name: object) -> Choice:
        """A card's button by name (``CHOICES``); ``HubError`` for any other."""
        choice = CHOICES.get(name) if isinstance(name, str) else None
        if choice is None:
            raise HubError(f"choice: expected one of {', '.join(CHOICES)}")
        return choice

    @property
    def name(self) -> str:
        """How cards name it (``DecisionMade.outcome``); a bypass of another length or
        scope is an approval to them."""
        if not self.approved:
            return "reject"
        bypass = self.bypass
        if bypass is not None and bypass.seconds is None:
            return "bypass_session"
        if bypass is not None and bypass.seconds == SHORT_BYPASS_SECONDS:
            return "bypass_15m"
        return "approve"


APPROVE = Choice(approved=True)
REJECT = Choice(approved=False)
#: The choices a card offers, by the names its buttons carry.
CHOICES: dict[str, Choice] = {
    "approve": APPROVE,
    "bypass_15m": Choice(True, BypassRequest("all", None, SHORT_BYPASS_SECONDS)),
    "bypass_session": Choice(True, BypassRequest("all", None, None)),
    "reject": REJECT,
}


@dataclass(frozen=True, slots=True)
class DecisionMade:
    """A gated call was decided, or a question answered (``ANSWERED``, ``note`` the
    answer), away from the chat's card (the web inbox, the API): cards close."""

    tool_call_id: int
    outcome: str  # approve, bypass_15m, bypass_session, reject or answered
    by: str
    note: str = ""


#: ``DecisionMade.outcome`` of a question answered.
ANSWERED = "answered"


@dataclass(frozen=True, slots=True)
class FailureNotice(Error):
    """A failed turn's ``Error`` whose delivery was recorded with the failed mark
    (``ChatHub.on_failure``) under ``key``: the adapter sends that record, not a new text."""

    key: str = ""


@dataclass(frozen=True, slots=True)
class HubEvent:
    """One event of any turn, tagged with where it belongs; adapters filter by source.

    ``remote``: from a turn of another process of the fleet (``engine/hub/fleet/relay.py``),
    given only to subscribers that asked for such events (a viewer, never a deliverer)."""

    source: str
    session_id: int | None
    event: TurnEvent | NewSession | DecisionMade
    remote: bool = False
