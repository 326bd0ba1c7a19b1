"""``ApprovalBroker``: the human side of the gate — waiting turns and their decisions.

Every decision is written to the database first (``InboxStore``), then handed to the
turn waiting for it, if one is. When none is (the process restarted since the call was
gated), the caller resumes the owning session and the re-gated call finds the recorded
decision. A waiter registers before its request is written, so a decision can never
fall between "nobody waits" and "the turn starts waiting".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.engine import Connection

from engine.approval.bypass import Bypasses, BypassScope, validate_bypass
from engine.approval.deciders import (
    APPROVER_POLICIES,
    Decider,
    Requester,
    decides_every_call,
    refusal,
    requester_of,
    who_may_decide,
)
from engine.session.protocols import Decision, GateRequest, Verdict
from engine.store.inbox import ApprovalRecord, InboxStore
from engine.store.inbox import Decision as HumanDecision
from engine.store.rows import ToolCallRow

__all__ = [
    "MAX_BYPASS_SECONDS",
    "SHORT_BYPASS_SECONDS",
    "ApprovalBroker",
    "BypassRequest",
    "Resolution",
]

#: A bypass lives in memory until the process ends; a year is already longer than that.
MAX_BYPASS_SECONDS = 366 * 24 * 3600
#: The "⏱ 15 min" button of every surface.
SHORT_BYPASS_SECONDS = 15 * 60


@dataclass(frozen=True, slots=True)
class BypassRequest:
    """Let the session's later gated calls run without asking (``seconds=None``: no expiry)."""

    scope: BypassScope | str = BypassScope.ALL
    value: str | None = None
    seconds: float | None = None

    @property
    def ttl(self) -> timedelta | None:
        """``ValueError`` beyond ``MAX_BYPASS_SECONDS`` (a float can overflow ``timedelta``)."""
        if self.seconds is None:
            return None
        if not self.seconds <= MAX_BYPASS_SECONDS:  # also NaN
            raise ValueError(f"ttl: at most {MAX_BYPASS_SECONDS} seconds")
        return timedelta(seconds=self.seconds)


@dataclass(frozen=True, slots=True)
class Resolution:
    """``live``: a waiting turn took the decision; otherwise resume ``session_id``."""

    tool_call_id: int
    session_id: int
    live: bool


@dataclass(slots=True)
class _Waiter:
    session_id: int
    future: asyncio.Future[object]


class ApprovalBroker:
    """``approvers`` is the ``APPROVERS`` policy, applied to every decision it records."""

    def __init__(
        self, inbox: InboxStore, bypasses: Bypasses, *, approvers: str = "requester+owner"
    ) -> None:
        if approvers not in APPROVER_POLICIES:
            raise ValueError(f"APPROVERS: unknown value {approvers!r}")
        self.inbox = inbox
        self.bypasses = bypasses
        self.approvers = approvers
        self._approvals: dict[int, _Waiter] = {}
        self._questions: dict[int, _Waiter] = {}

    # -- the turn's side ---------------------------------------------------------------

    async def wait_for_approval(
        self, request: GateRequest, announce: Callable[[], None]
    ) -> Verdict | None:
        """Persist the request, announce it, wait. ``None``: the waiting channel closed."""
        call = request.call
        with self._waiting(self._approvals, call.id, request.session_id) as future:
            record = await self.inbox.request_approval(call.id, request.session_id)
            if record.decision is not None:  # decided while nobody was waiting
                return _verdict(record)
            announce()
            return await future  # type: ignore[return-value]

    async def recorded(self, tool_call_id: int) -> Verdict | None:
        """The decision recorded for the call (``None``: none yet): a resumed call's."""
        record = await self.inbox.get(tool_call_id)
        return None if record is None or record.decision is None else _verdict(record)

    async def wait_for_answer(
        self, call: ToolCallRow, session_id: int, announce: Callable[[], None]
    ) -> str | None:
        """Wait for the user's answer to a clarification question; ``None``: channel closed."""
        with self._waiting(self._questions, call.id, session_id) as future:
            # Answered while nobody was waiting (a turn resumed here as the answer came, or
            # the answer's notice came first): read after the waiter is in place, so an
            # answer is either stored by now or finds the waiter.
            stored = await self.inbox.answer_of(call.id)
            if stored is not None:
                return stored
            announce()
            return await future  # type: ignore[return-value]

    # -- the human's side --------------------------------------------------------------

    async def refusal(self, tool_call_id: int, decider: Decider) -> str | None:
        """Why ``decider`` may not decide the call (``None``: they may, or it is not open).

        For a surface to answer at once; the decision itself is checked again when written.
        """
        record = await self.inbox.get(tool_call_id)
        if record is None or record.decision is not None:
            return None
        return refusal(self.approvers, decider, requester_of(record))

    async def answer_refusal(self, question_id: int, decider: Decider) -> str | None:
        """Why ``decider`` may not answer the question (``None``: they may). Under
        ``requester+owner`` the person whose message the turn answers, or the owner: an
        answer steers the turn's next calls, which are still that person's (their
        bypass covers them), so another member's answer ran commands nobody asked them
        for (until 2026-12-07; found by review). A question nobody asked for (no usable
        sender) any allowed member answers, as under the other rules."""
        if self.approvers != "requester+owner":
            return None
        requester_id, name = await self.inbox.requester(question_id)
        if requester_id is None:
            return None
        refused = refusal(self.approvers, decider, Requester(requester_id, name or ""))
        return None if refused is None else refused.replace("decide", "answer")

    async def who_may_decide(self, tool_call_id: int) -> str:
        """The card's line naming who may decide the call."""
        return who_may_decide(self.approvers, requester_of(await self.inbox.get(tool_call_id)))

    async def approve(
        self,
        tool_call_id: int,
        bypass: BypassRequest | None = None,
        *,
        decider: Decider,
        session_id: int | None = None,
        shown_in: str | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> Resolution:
        """Approve a pending call (live or persisted); ``InboxError`` if it cannot apply,
        ``NotPermitted`` if ``decider`` may not decide it. ``session_id`` / ``shown_in``:
        the deciding chat's session and source, ``also`` what commits with the decision
        (``InboxStore.decide``)."""
        if bypass is not None:  # a bad bypass is refused before anything changes
            validate_bypass(bypass.scope, bypass.value, bypass.ttl)
        record = await self.inbox.decide(
            tool_call_id,
            HumanDecision.APPROVED,
            session_id=session_id,
            shown_in=shown_in,
            vet=self._vet(decider),
            also=also,
        )
        if bypass is not None:
            # A person who may decide only their own calls (``requester+owner``) lets only
            # their own run without asking: in a group, another member's call still asks.
            everyone = decides_every_call(self.approvers, decider)
            self.bypasses.grant(
                record.session_id,
                bypass.scope,
                bypass.value,
                ttl=bypass.ttl,
                requester=None if everyone else decider.user_id,
            )
        return self._deliver(self._approvals, record, _verdict(record))

    async def reject(
        self,
        tool_call_id: int,
        note: str = "",
        *,
        decider: Decider,
        session_id: int | None = None,
        shown_in: str | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> Resolution:
        record = await self.inbox.decide(
            tool_call_id,
            HumanDecision.REJECTED,
            note,
            session_id=session_id,
            shown_in=shown_in,
            vet=self._vet(decider),
            also=also,
        )
        return self._deliver(self._approvals, record, _verdict(record))

    async def answer(
        self,
        request_id: int,
        answer: str,
        *,
        session_id: int | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> Resolution:
        """Answer a question: stored as the call's result first (``also`` committing with
        it), then handed to its turn."""
        item = await self.inbox.answer_question(
            request_id, answer, session_id=session_id, also=also
        )
        waiter = self._questions.get(request_id)
        live = waiter is not None and not waiter.future.done()
        if live:
            waiter.future.set_result(answer)
        return Resolution(request_id, item.session_id, live)

    def close_session(self, session_id: int) -> int:
        """The session's waiting channel is gone: its waits end (rows stay ``pending``)."""
        closed = 0
        for waiters in (self._approvals, self._questions):
            for waiter in waiters.values():
                if waiter.session_id == session_id and not waiter.future.done():
                    waiter.future.set_result(None)
                    closed += 1
        return closed

    def is_waiting(self, tool_call_id: int) -> bool:
        return tool_call_id in self._approvals or tool_call_id in self._questions

    def waiting(self) -> list[int]:
        """The calls whose turns wait here for a decision or an answer."""
        return [*self._approvals, *self._questions]

    # -- internals ---------------------------------------------------------------------

    def _vet(self, decider: Decider) -> Callable[[ApprovalRecord], str | None]:
        return lambda record: refusal(self.approvers, decider, requester_of(record))

    def _waiting(self, waiters: dict[int, _Waiter], call_id: int, session_id: int) -> _Registration:
        return _Registration(waiters, call_id, session_id)

    async def deliver_decided(self, tool_call_id: int) -> bool:
        """A decision or an answer recorded by another process (a fleet's): wake the call's
        waiter if it waits here (True); the database has it either way."""
        question = self._questions.get(tool_call_id)
        if question is not None:
            answer = await self.inbox.answer_of(tool_call_id)
            if answer is None or question.future.done():
                return False
            question.future.set_result(answer)
            return True
        record = await self.inbox.get(tool_call_id)
        if record is None or record.decision is None:
            return False
        return self._deliver(self._approvals, record, _verdict(record)).live

    @staticmethod
    def _deliver(
        waiters: dict[int, _Waiter], record: ApprovalRecord, verdict: Verdict
    ) -> Resolution:
        waiter = waiters.get(record.tool_call_id)
        live = waiter is not None and not waiter.future.done()
        if live:
            waiter.future.set_result(verdict)
        return Resolution(record.tool_call_id, record.session_id, live)


class _Registration:
    """Registers a waiter for the span of a ``with`` block."""

    __slots__ = ("_call_id", "_session_id", "_waiters")

    def __init__(self, waiters: dict[int, _Waiter], call_id: int, session_id: int) -> None:
        self._waiters = waiters
        self._call_id = call_id
        self._session_id = session_id

    def __enter__(self) -> asyncio.Future[object]:
        future = asyncio.get_running_loop().create_future()
        self._waiters[self._call_id] = _Waiter(self._session_id, future)
        return future

    def __exit__(self, *exc: object) -> None:
        self._waiters.pop(self._call_id, None)


def _verdict(record: ApprovalRecord) -> Verdict:
    if record.decision is HumanDecision.APPROVED:
        return Verdict(Decision.ALLOW, "approved by a human")
    return Verdict(Decision.DENY, record.note or "")
