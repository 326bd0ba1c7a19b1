"""The Agent Inbox rows: approval records and open clarification questions.

An approval record is keyed by the durable tool-call id, so a decision made after a
restart finds the call it is about. A decision is written here before anyone is told.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store.db import Database
from engine.store.history import update_tool_status
from engine.store.queue import SENDER_KEY
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
#: The prompt metadata of a background run (a job's) naming the conversation it serves:
#: the run's memory (its search, its person's facts) is that conversation's.
VISITS_KEY = "visits"


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
    #: Whose message started the turn (``None``: a background session such as cron or tic).
    requester_id: str | None = None
    requester_name: str | None = None
    #: The chat where a call of another session asks (a job run's card); ``None``: its own.
    shown_in: str | None = None


#: Called inside the deciding transaction: ``None`` lets the decision through, otherwise
#: the sentence refusing it (``NotPermitted``).
Vet = Callable[[ApprovalRecord], str | None]


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
    """A decision that cannot apply; ``code`` is ``not_found``, ``resolved``,
    ``other_session``, or ``repeated`` (a question answered with these very words already)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class NotPermitted(InboxError):
    """The decider may not decide this call (``APPROVERS``); nothing changed."""

    def __init__(self, message: str) -> None:
        super().__init__("not_permitted", message)


class InboxStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def request_approval(self, tool_call_id: int, session_id: int) -> ApprovalRecord:
        """Mark the call ``pending`` and open its record (kept, decision included, if it exists)."""
        return await self._db.run(_request, tool_call_id, session_id)

    async def show_in(self, tool_call_id: int, source: str) -> None:
        """Record that the open call asks in chat ``source`` (not its session's own)."""
        await self._db.run(_show_in, tool_call_id, source)

    async def decide(
        self,
        tool_call_id: int,
        decision: Decision,
        note: str = "",
        *,
        session_id: int | None = None,
        shown_in: str | None = None,
        vet: Vet | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> ApprovalRecord:
        """Record a human's decision once; ``InboxError`` when it cannot apply.

        ``session_id``: the deciding chat's session; a call of another session is refused
        unless its card is shown in ``shown_in`` (that chat's source).

        ``vet`` sees the record in the same transaction, so who asked and whether it is
        still open are read together with the write (``NotPermitted`` when it refuses).
        ``also`` commits with the decision (the message that gave a rejection's reason
        marked handled); a decision refused rolls it back.
        """
        return await self._db.run(
            _decide, tool_call_id, Decision(decision), note, session_id, shown_in, vet, also
        )

    async def get(self, tool_call_id: int) -> ApprovalRecord | None:
        return await self._db.run(_get, tool_call_id)

    async def requester(self, tool_call_id: int) -> tuple[str | None, str | None]:
        """``(id, name)`` of the person whose message the call answers (``_requester``)."""
        return await self._db.run(_requester, tool_call_id)

    async def pending_approvals(
        self, session_id: int | None = None, *, shown_in: str | None = None
    ) -> list[InboxItem]:
        """Undecided approvals (including those persisted across restarts), oldest first;
        ``shown_in``: only the calls of other sessions asking in that chat (a job's run)."""
        return await self._db.run(_pending, session_id, False, shown_in)

    async def pending_questions(self, session_id: int | None = None) -> list[InboxItem]:
        return await self._db.run(_pending, session_id, True)

    async def requester_of(self, tool_call_id: int) -> str | None:
        """Who asked for the call: the sender of the last person's message before it."""
        return (await self._db.run(_requester, tool_call_id))[0]

    async def answer_question(
        self,
        tool_call_id: int,
        answer: str,
        *,
        session_id: int | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> InboxItem:
        """Store ``answer`` as the result of a persisted open question (nobody is waiting);
        ``also`` commits with it (the message that answered it marked handled)."""
        return await self._db.run(_answer, tool_call_id, answer, session_id, also)

    async def last_sender(self, session_id: int, *, before: int | None = None) -> str | None:
        """The platform id of whoever wrote the session's last person's message (before
        message ``before``, when given) (``None``: a synthetic message, or nobody named);
        the owner of work that turn asks for."""
        sender_id, _name = await self._db.run(_sender, session_id, before=before)
        return sender_id

    async def answer_of(self, tool_call_id: int) -> str | None:
        """The stored answer to question ``tool_call_id``; None while it is open."""
        return await self._db.run(_answer_of, tool_call_id)


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
        row.tool_call_id,
        row.session_id,
        row.requested_at,
        decision,
        row.note,
        row.decided_at,
        row.requester_id,
        row.requester_name,
        row.shown_in,
    )


def _get(conn: Connection, tool_call_id: int) -> ApprovalRecord | None:
    return _record(conn.execute(sa.select(a).where(a.c.tool_call_id == tool_call_id)).first())


def _request(conn: Connection, tool_call_id: int, session_id: int) -> ApprovalRecord:
    update_tool_status(conn, tool_call_id, "pending", None)
    existing = _get(conn, tool_call_id)
    if existing is not None:
        return existing
    now = utcnow()
    requester_id, requester_name = _requester(conn, tool_call_id)
    conn.execute(
        a.insert().values(
            tool_call_id=tool_call_id,
            session_id=session_id,
            requested_at=now,
            requester_id=requester_id,
            requester_name=requester_name,
        )
    )
    return ApprovalRecord(
        tool_call_id, session_id, now, requester_id=requester_id, requester_name=requester_name
    )


#: A requester's id as stored (``tool_approvals.requester_id``); compared so (a Matrix id
#: may run to 255 characters).
REQUESTER_ID_CHARS = 64


def _requester(conn: Connection, tool_call_id: int) -> tuple[str | None, str | None]:
    """The sender of the last person's message before the call in its session.

    That message is what the model was answering when it made the call (a steering
    message counts: its sender asked too). Synthetic rows (cron, tic, sub-agent tasks)
    name nobody, and neither does a session no person wrote to: only the owner decides.
    """
    call = _owner(conn, tool_call_id)
    if call is None:
        return None, None
    return _sender(conn, call.session_id, before=call.message_id)


def _sender(
    conn: Connection, session_id: int, *, before: int | None = None
) -> tuple[str | None, str | None]:
    """``(id, name)`` of the last person's message of the session (before ``before``)."""
    query = (
        sa.select(h.c.metadata, h.c.is_synthetic)
        .join(f, f.c.id == h.c.session_stack_id)
        .where(f.c.session_id == session_id, h.c.role == "user")
        .order_by(h.c.id.desc())
        .limit(1)
    )
    if before is not None:
        query = query.where(h.c.id < before)
    row = conn.execute(query).first()
    if row is None or row.is_synthetic:
        return None, None
    sender = (row.metadata or {}).get(SENDER_KEY)
    if not isinstance(sender, dict) or not isinstance(sender.get("id"), str) or not sender["id"]:
        return None, None
    name = sender.get("name")
    return sender["id"][:REQUESTER_ID_CHARS], name[:255] if isinstance(name, str) and name else None


def _owner(conn: Connection, tool_call_id: int) -> sa.Row | None:
    return conn.execute(
        sa.select(t.c.id, t.c.name, t.c.status, t.c.message_id, f.c.session_id)
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


def _show_in(conn: Connection, tool_call_id: int, source: str) -> None:
    conn.execute(a.update().where(a.c.tool_call_id == tool_call_id).values(shown_in=source))


def _decide(
    conn: Connection,
    tool_call_id: int,
    decision: Decision,
    note: str,
    session_id: int | None,
    shown_in: str | None,
    vet: Vet | None,
    also: Callable[[Connection], None] | None = None,
) -> ApprovalRecord:
    record = _get(conn, tool_call_id)
    if record is not None and shown_in is not None and record.shown_in == shown_in:
        session_id = None  # asked in this chat for another session (a job's run)
    _check_owner(conn, tool_call_id, session_id, "approval")
    if record is None:
        raise InboxError("not_found", f"tool call {tool_call_id} is not waiting for approval")
    if record.decision is not None:
        raise InboxError(
            "resolved", f"tool call {tool_call_id} was already {record.decision.value}"
        )
    refused = vet(record) if vet is not None else None
    if refused is not None:
        raise NotPermitted(refused)
    now = utcnow()
    note = truncate_note(note)
    done = conn.execute(
        a.update()
        .where(a.c.tool_call_id == tool_call_id, a.c.decision.is_(None))
        .values(decision=decision.value, note=note, decided_at=now)
    )
    if done.rowcount != 1:
        raise InboxError("resolved", f"tool call {tool_call_id} was already decided")
    if also is not None:
        also(conn)
    return replace(record, decision=decision, note=note, decided_at=now)


def _answer(
    conn: Connection,
    tool_call_id: int,
    answer: str,
    session_id: int | None,
    also: Callable[[Connection], None] | None = None,
) -> InboxItem:
    try:
        call = _check_owner(conn, tool_call_id, session_id, "an answer")
    except InboxError as exc:
        if exc.code == "resolved":
            _refuse_repeated(conn, tool_call_id, answer)
        raise
    if call.name != ASK_USER_TOOL:
        raise InboxError("not_found", f"tool call {tool_call_id} is not a question")
    # Still pending as the row is written: two answers at once (two surfaces, two
    # processes) both read it pending, and the second waits for the first's lock.
    answered = conn.execute(
        t.update()
        .where(t.c.id == tool_call_id, t.c.status == "pending")
        .values(status="done", result=truncate_note(answer), updated_at=utcnow())
    )
    if answered.rowcount != 1:
        _refuse_repeated(conn, tool_call_id, answer)
        raise InboxError("resolved", f"tool call {tool_call_id} was answered meanwhile")
    if also is not None:
        also(conn)
    return _pending_query(conn, None, True, tool_call_id)[0]


def _refuse_repeated(conn: Connection, tool_call_id: int, answer: str) -> None:
    """The same words as the answer given: a message handed over a second time (a crash
    before its mark), or sent twice. It is that answer, not a new one."""
    if _answer_of(conn, tool_call_id) == truncate_note(answer):
        raise InboxError("repeated", f"tool call {tool_call_id} was answered so already")


def _answer_of(conn: Connection, tool_call_id: int) -> str | None:
    return conn.execute(
        sa.select(t.c.result).where(
            t.c.id == tool_call_id, t.c.name == ASK_USER_TOOL, t.c.status == "done"
        )
    ).scalar()


def _pending(
    conn: Connection, session_id: int | None, questions: bool, shown_in: str | None = None
) -> list[InboxItem]:
    return _pending_query(conn, session_id, questions, None, shown_in)


def _pending_query(
    conn: Connection,
    session_id: int | None,
    questions: bool,
    tool_call_id: int | None,
    shown_in: str | None = None,
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
    if shown_in is not None:
        query = query.where(a.c.shown_in == shown_in)
    return [InboxItem(*row) for row in conn.execute(query)]
