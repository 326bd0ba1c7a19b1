"""The session's seams: what the turn engine needs from the packages that plug into it.

The approval package implements the gate (``ApprovalPolicy`` decides, ``HumanApprovals``
waits for a person); the hub implements the inbox a turn drains (``PendingUserInput``)
and the bridge its events leave by (``EmitFn``, ``RecordsAnswers``). The session owns
these and imports none of their implementations; implementations do not subclass them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from engine.session.events import TurnEvent
from engine.store.history import AlsoWithKey, AlsoWithRow
from engine.store.rows import ToolCallRow

__all__ = [
    "Announce",
    "ApprovalPolicy",
    "Decision",
    "EmitFn",
    "GateRequest",
    "HumanApprovals",
    "PendingUserInput",
    "QueuedMessage",
    "RecordsAnswers",
    "Verdict",
]


# -- the approval gate -----------------------------------------------------------------


class Decision(StrEnum):
    """What the gate does with a call: run it, refuse it, or ask a human."""

    ALLOW = "allow"
    DENY = "deny"
    REQUIRE = "require"


@dataclass(frozen=True, slots=True)
class GateRequest:
    """One call put to the gate, with the session it comes from."""

    session_id: int
    agent_id: str
    source: str
    call: ToolCallRow
    args: dict[str, Any]
    #: The session's stored RunContext (JSON), when it has one.
    run_context: dict[str, Any] | None = None
    #: Where the call's relative paths start, as the tool will resolve them (``None``:
    #: the run context's ``working_directory``, else the workspace). The gate judges the
    #: path the tool touches: the two read the directory apart when a job's grants
    #: changed during its run (found by review).
    working_directory: Path | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's answer; ``reason`` is for the model when the call is refused."""

    decision: Decision
    reason: str = ""


#: Shows the pending call to the people who may decide it (an ``ApprovalRequired`` event).
Announce = Callable[[], None]


class ApprovalPolicy(Protocol):
    """Decides whether a call may run, asks a human (``REQUIRE``) or refuses it."""

    async def check(self, request: GateRequest) -> Verdict: ...


class HumanApprovals(Protocol):
    """Where a turn waits for a person: an approval of a gated call, an answer to a question.

    ``None``: the waiting channel closed (the row stays ``pending``; a resume asks again).
    """

    async def wait_for_approval(
        self, request: GateRequest, announce: Announce
    ) -> Verdict | None: ...

    async def recorded(self, tool_call_id: int) -> Verdict | None:
        """The decision a human recorded for the call while no turn waited; ``None``: none."""
        ...

    async def wait_for_answer(
        self, call: ToolCallRow, session_id: int, announce: Announce
    ) -> str | None: ...


# -- the source's inbox ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """A user message waiting for the turn; ``queued_id`` is its durable queue row."""

    text: str
    metadata: dict[str, Any] | None = None
    queued_id: int | None = None


class PendingUserInput(Protocol):
    """The source's inbox, drained at each round boundary of the root interactive turn."""

    def drain_user(self) -> list[QueuedMessage]: ...


# -- the way events leave a turn -------------------------------------------------------

#: Receives every event of a turn; it must not block (``TurnEmitter`` guards the turn).
EmitFn = Callable[[TurnEvent], None]


class RecordsAnswers(Protocol):
    """Work a turn's caller wants done in the transaction storing the root answer, and in
    the one ending a failed turn: the exactly-once seam of a reply.

    Given to a turn beside its ``emit`` (``records=``), never probed for. The hub's bridge
    is one: a chat's outbox row for the answer then commits with the answer itself (one
    write fewer before the reply, and no window in which the answer is stored but its
    delivery is not).
    """

    def answer_unit(self, content: str) -> AlsoWithRow | None: ...

    def failure_unit(self, notice: str) -> AlsoWithKey | None:
        """Work for the transaction that ends a failed turn (the notice's outbox row)."""
        ...
