"""Conversation rows of one stack frame and their tool calls."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store.db import Database, quick_unit
from engine.store.prepared import Prepared
from engine.store.queue import consume
from engine.store.rows import (
    AssistantRecord,
    LaunchedProcess,
    MessageRow,
    NewToolCall,
    Role,
    ToolCallRow,
    ToolStatus,
)
from engine.store.schema import chat_history as h
from engine.store.schema import chat_llm_tools as t
from engine.store.schema import chat_sessions_stack as frames
from engine.store.schema import tool_approvals as approvals
from engine.store.schema import utcnow

#: More work for a message's transaction, given the new message's id.
AlsoWithRow = Callable[[Connection, int], None]
#: More work for the transaction that ends a failed turn, given the failure's key
#: (``failed:<first failed message id>``): the failure notice's delivery record.
AlsoWithKey = Callable[[Connection, str], None]

_MESSAGE_COLUMNS = (
    h.c.id,
    h.c.session_stack_id,
    h.c.role,
    h.c.content,
    h.c.status,
    h.c.is_synthetic,
    h.c.reasoning_content,
    h.c.metadata,
    h.c.created_at,
    h.c.model,
    h.c.input_tokens,
    h.c.output_tokens,
    h.c.cost,
)
_TOOL_COLUMNS = (
    t.c.id,
    t.c.message_id,
    t.c.llm_call_id,
    t.c.name,
    t.c.arguments,
    t.c.result,
    t.c.status,
    t.c.launched_at,
)
_OPEN = ("running", "pending")
#: The result of a call its turn's failure ended before it ran (or ran to its end).
TURN_FAILED_NOTE = "Not run to its end: the turn failed."

# Built once: these run on every model step.
_INSERT_MESSAGE = Prepared(h.insert())
_INSERT_TOOL = Prepared(t.insert())
_UPDATE_TOOL = Prepared(
    t.update()
    .where(t.c.id == sa.bindparam("b_id"))
    .values(
        status=sa.bindparam("b_status"),
        result=sa.bindparam("b_result"),
        updated_at=sa.bindparam("b_now"),
    )
)

_MARK_LAUNCHED = Prepared(
    t.update()
    .where(t.c.id == sa.bindparam("b_id"))
    .values(launched_at=sa.bindparam("b_now"), updated_at=sa.bindparam("b_now"))
)
_RECORD_PROCESS = Prepared(
    t.update()
    .where(t.c.id == sa.bindparam("b_id"))
    .values(process_group=sa.bindparam("b_group"), process_start=sa.bindparam("b_start"))
)


class History:
    """Append-mostly storage of messages and tool calls. Every method commits."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def append_message(
        self,
        stack_id: int,
        role: Role,
        content: str,
        *,
        is_synthetic: bool = False,
        metadata: dict[str, Any] | None = None,
        status: str = "ok",
        consumes: int | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> MessageRow:
        """Store a message; ``consumes`` names the queued message it replaces, ``also`` is
        the caller's bookkeeping (both in the same commit)."""
        return await self._db.run(
            insert_message, stack_id, role, content, is_synthetic, metadata, status, consumes, also
        )

    async def append_assistant(
        self,
        stack_id: int,
        record: AssistantRecord,
        calls: Sequence[NewToolCall] = (),
        *,
        also: AlsoWithRow | None = None,
    ) -> MessageRow:
        """Persist an assistant message and its tool calls (status ``running``) atomically.

        ``also`` runs in the same transaction with the new message's id (an adapter's
        outbox row for the answer, so the answer and its delivery record commit together).
        """
        if also is None:
            return await self._db.run(insert_assistant, stack_id, record, calls)
        return await self._db.run(_insert_assistant_and, stack_id, record, calls, also)

    async def set_tool_status(
        self, tool_call_id: int, status: ToolStatus, result: str | None = None
    ) -> None:
        await self._db.run(update_tool_status, tool_call_id, status, result)

    async def mark_launched(self, tool_call_id: int) -> datetime:
        """Record that the call's effect starts now (before it does); returns the time."""
        return await self._db.run(_mark_launched, tool_call_id)

    async def record_process(
        self, tool_call_id: int, process_group: int, process_start: str | None
    ) -> None:
        """Record the process group a call's command runs in."""
        await self._db.run(_record_process, tool_call_id, process_group, process_start)

    async def launched_processes(self) -> list[LaunchedProcess]:
        """Process groups recorded for calls still open: a crash may have left them."""
        return await self._db.run(_launched_processes)

    async def mark_failed(self, message_id: int) -> None:
        await self._db.run(_mark_failed, message_id)

    async def fail_unanswered(self, stack_id: int, *, also: AlsoWithKey | None = None) -> list[int]:
        """End a turn the user was told failed: its unanswered user/agent rows (after the
        last answer) become ``failed``, its open calls too (never run later), and the
        frame records where the turn ended (a tool round left last is not resumed); their
        ids. ``also`` commits with them (the
        notice's delivery record)."""
        return await self._db.run(_fail_unanswered, stack_id, also)

    async def get_tool_call(self, tool_call_id: int) -> ToolCallRow | None:
        return await self._db.run(_get_tool_call, tool_call_id)

    async def load(
        self, stack_id: int, *, after_id: int = 0, limit: int | None = None
    ) -> list[MessageRow]:
        """Non-failed messages of a frame with id > ``after_id``, oldest first, with tool calls.

        ``limit`` keeps only the newest ``limit`` messages.
        """
        return await self._db.run(load_messages, stack_id, after_id, limit)

    async def last_message(self, stack_id: int) -> MessageRow | None:
        """The newest non-failed message of a frame (without its tool calls)."""
        return await self._db.run(_last_message, stack_id)

    async def open_tool_calls(self, stack_id: int) -> list[ToolCallRow]:
        """Tool calls of a frame left ``running`` or ``pending`` (by a crash or a wait)."""
        return await self._db.run(_open_tool_calls, stack_id)

    async def session_open_tool_calls(self, session_id: int) -> list[tuple[int, ToolCallRow]]:
        """``(stack_id, call)`` for every open tool call of a session, oldest first."""
        return await self._db.run(_session_open_tool_calls, session_id)


@quick_unit
def insert_message(
    conn: Connection,
    stack_id: int,
    role: Role,
    content: str,
    is_synthetic: bool = False,
    metadata: dict[str, Any] | None = None,
    status: str = "ok",
    consumes: int | None = None,
    also: Callable[[Connection], None] | None = None,
) -> MessageRow:
    if consumes is not None:
        content = consume(conn, consumes) or content  # its words corrected while it waited
    if also is not None:
        also(conn)
    now = utcnow()
    new_id = _INSERT_MESSAGE.insert(
        conn,
        {
            "session_stack_id": stack_id,
            "role": role,
            "content": content,
            "status": status,
            "is_synthetic": is_synthetic,
            "metadata": metadata,
            "created_at": now,
        },
    )
    return MessageRow(
        id=new_id,
        stack_id=stack_id,
        role=role,
        content=content,
        status=status,  # type: ignore[arg-type]
        is_synthetic=is_synthetic,
        reasoning_content=None,
        metadata=metadata,
        created_at=now,
    )


@quick_unit
def _insert_assistant_and(
    conn: Connection,
    stack_id: int,
    record: AssistantRecord,
    calls: Sequence[NewToolCall],
    also: AlsoWithRow,
) -> MessageRow:
    row = insert_assistant(conn, stack_id, record, calls)
    also(conn, row.id)
    return row


@quick_unit
def insert_assistant(
    conn: Connection, stack_id: int, record: AssistantRecord, calls: Sequence[NewToolCall]
) -> MessageRow:
    now = utcnow()
    message_id = _INSERT_MESSAGE.insert(
        conn,
        {
            "session_stack_id": stack_id,
            "role": "assistant",
            "content": record.content,
            "status": "ok",
            "is_synthetic": record.is_synthetic,
            "reasoning_content": record.reasoning_content,
            "model": record.model,
            "input_tokens": record.input_tokens,
            "output_tokens": record.output_tokens,
            "cost": record.cost,
            "duration_ms": record.duration_ms,
            "metadata": record.metadata,
            "created_at": now,
        },
    )
    tool_rows = []
    for call in calls:
        tool_call_id = _INSERT_TOOL.insert(
            conn,
            {
                "message_id": message_id,
                "llm_call_id": call.llm_call_id,
                "name": call.name,
                "arguments": call.arguments,
                "status": call.status,
                "result": call.result,
                "created_at": now,
                "updated_at": now,
            },
        )
        tool_rows.append(
            ToolCallRow(
                id=tool_call_id,
                message_id=message_id,
                llm_call_id=call.llm_call_id,
                name=call.name,
                arguments=call.arguments,
                result=call.result,
                status=call.status,
            )
        )
    return MessageRow(
        id=message_id,
        stack_id=stack_id,
        role="assistant",
        content=record.content,
        status="ok",
        is_synthetic=record.is_synthetic,
        reasoning_content=record.reasoning_content,
        metadata=record.metadata,
        created_at=now,
        model=record.model,
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        cost=record.cost,
        tool_calls=tool_rows,
    )


@quick_unit
def update_tool_status(
    conn: Connection, tool_call_id: int, status: ToolStatus, result: str | None
) -> None:
    _UPDATE_TOOL.execute(
        conn,
        {"b_id": tool_call_id, "b_status": status, "b_result": result, "b_now": utcnow()},
    )


@quick_unit
def _mark_launched(conn: Connection, tool_call_id: int) -> datetime:
    now = utcnow()
    _MARK_LAUNCHED.execute(conn, {"b_id": tool_call_id, "b_now": now})
    return now


@quick_unit
def _record_process(
    conn: Connection, tool_call_id: int, process_group: int, process_start: str | None
) -> None:
    _RECORD_PROCESS.execute(
        conn, {"b_id": tool_call_id, "b_group": process_group, "b_start": process_start}
    )


def _launched_processes(conn: Connection) -> list[LaunchedProcess]:
    rows = conn.execute(
        sa.select(t.c.id, t.c.process_group, t.c.process_start)
        .where(t.c.status.in_(_OPEN), t.c.process_group.is_not(None))
        .order_by(t.c.id)
    )
    return [LaunchedProcess(*row) for row in rows]


def _mark_failed(conn: Connection, message_id: int) -> None:
    conn.execute(h.update().where(h.c.id == message_id).values(status="failed"))


def _fail_unanswered(conn: Connection, stack_id: int, also: AlsoWithKey | None) -> list[int]:
    ok = sa.and_(h.c.session_stack_id == stack_id, h.c.status == "ok")
    answered = sa.select(sa.func.max(h.c.id)).where(ok, h.c.role == "assistant").scalar_subquery()
    query = sa.select(h.c.id).where(ok, h.c.id > sa.func.coalesce(answered, 0)).order_by(h.c.id)
    ids = [row[0] for row in conn.execute(query)]
    if ids:
        conn.execute(h.update().where(h.c.id.in_(ids)).values(status="failed"))
    # Its calls still open end with it: the person was told it failed, and until
    # 2026-12-07 the chat's next message (or a restart) ran them (found by review).
    # A call still waiting for a person's decision (asked before, its card open) is left
    # to it: the next message or a restart asks it again, and its card still decides it.
    rounds = sa.select(h.c.id).where(h.c.session_stack_id == stack_id)
    undecided = sa.select(approvals.c.tool_call_id).where(approvals.c.decision.is_(None))
    conn.execute(
        t.update()
        .where(t.c.message_id.in_(rounds), t.c.status.in_(_OPEN), t.c.id.not_in(undecided))
        .values(status="failed", result=TURN_FAILED_NOTE, updated_at=utcnow())
    )
    # A tool round may be the last row left: the turn ended there, it is not to resume.
    last = sa.select(sa.func.max(h.c.id)).where(ok).scalar_subquery()
    conn.execute(frames.update().where(frames.c.id == stack_id).values(ended_turn_at=last))
    if also is not None:
        # Nothing unanswered (the message was never stored, or a tool round came after
        # it): the key only has to be new, the failure is recorded once either way.
        also(conn, f"failed:{ids[0]}" if ids else f"failed:{uuid.uuid4().hex[:12]}")
    return ids


def _get_tool_call(conn: Connection, tool_call_id: int) -> ToolCallRow | None:
    row = conn.execute(sa.select(*_TOOL_COLUMNS).where(t.c.id == tool_call_id)).first()
    return ToolCallRow(*row) if row else None


def load_messages(
    conn: Connection, stack_id: int, after_id: int = 0, limit: int | None = None
) -> list[MessageRow]:
    query = sa.select(*_MESSAGE_COLUMNS).where(
        h.c.session_stack_id == stack_id, h.c.status == "ok", h.c.id > after_id
    )
    if limit is not None:
        messages = [
            MessageRow(*row) for row in conn.execute(query.order_by(h.c.id.desc()).limit(limit))
        ]
        messages.reverse()
    else:
        messages = [MessageRow(*row) for row in conn.execute(query.order_by(h.c.id))]
    if not messages:
        return []
    by_id = {m.id: m for m in messages}
    tool_rows = conn.execute(
        sa.select(*_TOOL_COLUMNS)
        .join(h, h.c.id == t.c.message_id)
        .where(h.c.session_stack_id == stack_id, h.c.id >= messages[0].id, h.c.status == "ok")
        .order_by(t.c.id)
    )
    for row in tool_rows:
        call = ToolCallRow(*row)
        owner = by_id.get(call.message_id)
        if owner is not None:
            owner.tool_calls.append(call)
    return messages


def _last_message(conn: Connection, stack_id: int) -> MessageRow | None:
    row = conn.execute(
        sa.select(*_MESSAGE_COLUMNS)
        .where(h.c.session_stack_id == stack_id, h.c.status == "ok")
        .order_by(h.c.id.desc())
        .limit(1)
    ).first()
    return MessageRow(*row) if row else None


def _open_tool_calls(conn: Connection, stack_id: int) -> list[ToolCallRow]:
    rows = conn.execute(
        sa.select(*_TOOL_COLUMNS)
        .join(h, h.c.id == t.c.message_id)
        .where(h.c.session_stack_id == stack_id, t.c.status.in_(_OPEN))
        .order_by(t.c.id)
    )
    return [ToolCallRow(*row) for row in rows]


def _session_open_tool_calls(conn: Connection, session_id: int) -> list[tuple[int, ToolCallRow]]:
    rows = conn.execute(
        sa.select(h.c.session_stack_id, *_TOOL_COLUMNS)
        .join(h, h.c.id == t.c.message_id)
        .join(frames, frames.c.id == h.c.session_stack_id)
        .where(frames.c.session_id == session_id, t.c.status.in_(_OPEN))
        .order_by(t.c.id)
    )
    return [(row[0], ToolCallRow(*row[1:])) for row in rows]
