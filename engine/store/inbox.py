"""The Agent Inbox rows: approval records and open clarification questions.

An approval record is keyed by the durable tool-call id, so a decision made after a
restart finds the call it is about. A decision is written here before anyone is told.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store.db import Database
from engine.store.history import update_tool_status
from engine.store.schema import chat_history as h
from engine.store.schema import chat_llm_tools as t
from engine.store.schema import chat_sessions as s
from engine.store.schema import chat_sessions_stack as f
from engine.store.schema import tool_approvals as a
from engine.store.schema import utcnow

#: The tool whose pending rows are questions to the user, not approvals.
ASK_USER_TOOL = "ask_user_clarification"
#: Notes and answers are the human's words; beyond this they are cut (and say so).
MAX_NOTE_CHARS = 4000


class Decision(StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    tool_call_id: int
    session_id: int
    requested_at: datetime
    decision: Decision | None = None
    note: str | None = None
    decided_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class InboxItem:
    """A gated call or a question waiting for a human, with what an adapter shows."""

    tool_call_id: int
    session_id: int
    name: str
    arguments: str | None
    agent_id: str
    depth: int
    source: str
    context_label: str | None
    requested_at: datetime


class InboxError(ValueError):
    """A decision that cannot apply; ``code`` is ``not_found``, ``resolved`` or ``other_session``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class InboxStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def request_approval(self, tool_call_id: int, session_id: int) -> ApprovalRecord:
        """Mark the call ``pending`` and open its record (kept, decision included, if it exists)."""
        return await self._db.run(_request, tool_call_id, session_id)

    async def decide(
        self,
        tool_call_id: int,
        decision: Decision,
        note: str = "",
        *,
        session_id: int | None = None,
    ) -> ApprovalRecord:
        """Record a human's decision once; ``InboxError`` when it cannot apply."""
        return await self._db.run(_decide, tool_call_id, Decision(decision), note, session_id)

    async def get(self, tool_call_id: int) -> ApprovalRecord | None:
        return await self._db.run(_get, tool_call_id)

    async def pending_approvals(self, session_id: int | None = None) -> list[InboxItem]:
        """Undecided approvals (including those persisted across restarts), oldest first."""
        return await self._db.run(_pending, session_id, False)

    async def pending_questions(self, session_id: int | None = None) -> list[InboxItem]:
        return await self._db.run(_pending, session_id, True)

    async def answer_question(
        self, tool_call_id: int, answer: str, *, session_id: int | None = None
    ) -> InboxItem:
        """Store ``answer`` as the result of a persisted open question (nobody is waiting)."""
        return await self._db.run(_answer, tool_call_id, answer, session_id)


def truncate_note(text: str) -> str:
    if len(text) <= MAX_NOTE_CHARS:
        return text
    cut = len(text) - MAX_NOTE_CHARS
    return f"{text[:MAX_NOTE_CHARS]}\n[... {cut} more characters cut]"


def _record(row: sa.Row | None) -> ApprovalRecord | None:
    if row is None:
        return None
    decision = Decision(row.decision) if row.decision else None
    return ApprovalRecord(
        row.tool_call_id, row.session_id, row.requested_at, decision, row.note, row.decided_at
    )


def _get(conn: Connection, tool_call_id: int) -> ApprovalRecord | None:
    return _record(conn.execute(sa.select(a).where(a.c.tool_call_id == tool_call_id)).first())


def _request(conn: Connection, tool_call_id: int, session_id: int) -> ApprovalRecord:
    update_tool_status(conn, tool_call_id, "pending", None)
    existing = _get(conn, tool_call_id)
    if existing is not None:
        return existing
    now = utcnow()
    conn.execute(
        a.insert().values(tool_call_id=tool_call_id, session_id=session_id, requested_at=now)
    )
    return ApprovalRecord(tool_call_id, session_id, now)


def _owner(conn: Connection, tool_call_id: int) -> sa.Row | None:
    return conn.execute(
        sa.select(t.c.id, t.c.name, t.c.status, f.c.session_id)
        .join(h, h.c.id == t.c.message_id)
        .join(f, f.c.id == h.c.session_stack_id)
        .where(t.c.id == tool_call_id)
    ).first()


def _check_owner(conn: Connection, tool_call_id: int, session_id: int | None, what: str) -> sa.Row:
    call = _owner(conn, tool_call_id)
    if call is None:
        raise InboxError("not_found", f"no tool call {tool_call_id}")
    if session_id is not None and call.session_id != session_id:
        raise InboxError("other_session", f"tool call {tool_call_id} belongs to another session")
    if call.status != "pending":
        raise InboxError(
            "resolved", f"tool call {tool_call_id} is not waiting for {what} (it is {call.status})"
        )
    return call


def _decide(
    conn: Connection,
    tool_call_id: int,
    decision: Decision,
    note: str,
    session_id: int | None,
) -> ApprovalRecord:
    _check_owner(conn, tool_call_id, session_id, "approval")
    record = _get(conn, tool_call_id)
    if record is None:
        raise InboxError("not_found", f"tool call {tool_call_id} is not waiting for approval")
    if record.decision is not None:
        raise InboxError(
            "resolved", f"tool call {tool_call_id} was already {record.decision.value}"
        )
    now = utcnow()
    note = truncate_note(note)
    done = conn.execute(
        a.update()
        .where(a.c.tool_call_id == tool_call_id, a.c.decision.is_(None))
        .values(decision=decision.value, note=note, decided_at=now)
    )
    if done.rowcount != 1:
        raise InboxError("resolved", f"tool call {tool_call_id} was already decided")
    return ApprovalRecord(tool_call_id, record.session_id, record.requested_at, decision, note, now)


def _answer(conn: Connection, tool_call_id: int, answer: str, session_id: int | None) -> InboxItem:
    call = _check_owner(conn, tool_call_id, session_id, "an answer")
    if call.name != ASK_USER_TOOL:
        raise InboxError("not_found", f"tool call {tool_call_id} is not a question")
    update_tool_status(conn, tool_call_id, "done", truncate_note(answer))
    return _pending_query(conn, None, True, tool_call_id)[0]


def _pending(conn: Connection, session_id: int | None, questions: bool) -> list[InboxItem]:
    return _pending_query(conn, session_id, questions, None)


def _pending_query(
    conn: Connection, session_id: int | None, questions: bool, tool_call_id: int | None
) -> list[InboxItem]:
    query = (
        sa.select(
            t.c.id,
            f.c.session_id,
            t.c.name,
            t.c.arguments,
            f.c.agent_id,
            f.c.depth,
            s.c.source,
            s.c.context_label,
            sa.func.coalesce(a.c.requested_at, t.c.updated_at),
        )
        .join(h, h.c.id == t.c.message_id)
        .join(f, f.c.id == h.c.session_stack_id)
        .join(s, s.c.id == f.c.session_id)
        .outerjoin(a, a.c.tool_call_id == t.c.id)
        .order_by(t.c.id)
    )
    if tool_call_id is not None:
        query = query.where(t.c.id == tool_call_id)
    elif questions:
        query = query.where(t.c.status == "pending", t.c.name == ASK_USER_TOOL)
    else:
        query = query.where(
            t.c.status == "pending", a.c.decision.is_(None), t.c.name != ASK_USER_TOOL
        )
    if session_id is not None:
        query = query.where(f.c.session_id == session_id)
    return [InboxItem(*row) for row in conn.execute(query)]
