"""The approval gate: one decision point shared by the live loop and resume."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from engine.store.rows import ToolCallRow


class Decision(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    REQUIRE = "require"


@dataclass(frozen=True, slots=True)
class GateRequest:
    session_id: int
    agent_id: str
    source: str
    call: ToolCallRow
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    reason: str = ""


class ApprovalPolicy(Protocol):
    """Decides whether a call may run. Rules, bypasses and pending approvals live behind it."""

    async def check(self, request: GateRequest) -> Verdict: ...

    async def wait_for_human(self, request: GateRequest) -> Verdict | None:
        """Block until a human decides a ``REQUIRE``; ``None`` means nobody can answer."""
        ...


class AllowAll:
    """The policy used until rules exist: every call runs."""

    async def check(self, request: GateRequest) -> Verdict:
        return Verdict(Decision.ALLOW)

    async def wait_for_human(self, request: GateRequest) -> Verdict | None:
        return Verdict(Decision.ALLOW)


class GateOutcome(StrEnum):
    PROCEED = "proceed"
    REJECTED = "rejected"
    CHANNEL_CLOSED = "channel_closed"


def rejection_message(note: str) -> str:
    """The one wording of a rejection the model sees."""
    note = note.strip()
    return (
        f"User rejected this tool call. Reason: {note}" if note else "User rejected this tool call."
    )
