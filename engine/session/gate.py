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
    #: The session's stored RunContext (JSON), when it has one.
    run_context: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    reason: str = ""


class ApprovalPolicy(Protocol):
    """Decides whether a call may run, asks a human (``REQUIRE``) or refuses it."""

    async def check(self, request: GateRequest) -> Verdict: ...


class AllowAll:
    """A policy for tests and trusted embeddings: every call runs without asking."""

    async def check(self, request: GateRequest) -> Verdict:
        return Verdict(Decision.ALLOW)


class GateOutcome(StrEnum):
    PROCEED = "proceed"
    REJECTED = "rejected"
    CHANNEL_CLOSED = "channel_closed"


AUTO_DENIED = (
    "Tool call rejected automatically: it needs a human's approval and this session "
    "runs unattended."
)


def rejection_message(note: str) -> str:
    """The one wording of a rejection the model sees."""
    note = note.strip()
    return (
        f"User rejected this tool call. Reason: {note}" if note else "User rejected this tool call."
    )
