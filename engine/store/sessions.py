"""Sessions, their stack frames, and the ``source → active session`` map."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store.db import Database
from engine.store.rows import FrameRow, SessionRow
from engine.store.schema import chat_history as h
from engine.store.schema import chat_llm_tools as t
from engine.store.schema import chat_sessions as s
from engine.store.schema import chat_sessions_stack as f
from engine.store.schema import session_tool_grants, sources, utcnow

_SESSION_COLUMNS = (
    s.c.id,
    s.c.source,
    s.c.agent_id,
    s.c.is_interactive,
    s.c.is_ephemeral,
    s.c.run_context,
    s.c.title,
    s.c.created_at,
    s.c.context_label,
    s.c.auto_deny_approvals,
)
_FRAME_COLUMNS = (
    f.c.id,
    f.c.session_id,
    f.c.agent_id,
    f.c.agent_prompt,
    f.c.depth,
    f.c.parent_tool_call_id,
    f.c.terminated_at,
    f.c.created_at,
)


class Sessions:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(
        self,
        source: str,
        *,
        agent_id: str = "main",
        is_interactive: bool = True,
        is_ephemeral: bool = False,
        run_context: dict[str, Any] | None = None,
        title: str | None = None,
        context_label: str | None = None,
        auto_deny_approvals: bool = False,
    ) -> SessionRow:
        """A new session with its root frame (depth 0)."""
        row = SessionRow(
            id=0,
            source=source,
            agent_id=agent_id,
            is_interactive=is_interactive,
            is_ephemeral=is_ephemeral,
            run_context=run_context,
            title=title,
            created_at=utcnow(),
            context_label=context_label,
            auto_deny_approvals=auto_deny_approvals,
        )
        return await self._db.run(_create, row)

    async def get(self, session_id: int) -> SessionRow | None:
        return await self._db.run(_get, session_id)

    async def set_run_context(self, session_id: int, run_context: dict[str, Any] | None) -> None:
        await self._db.run(_set_run_context, session_id, run_context)

    async def active_frames(self, session_id: int) -> list[FrameRow]:
        """Frames not yet terminated, shallowest first."""
        return await self._db.run(_active_frames, session_id)

    async def root_frame(self, session_id: int) -> FrameRow:
        return await self._db.run(_root_frame, session_id)

    async def push_frame(
        self,
        session_id: int,
        *,
        agent_id: str,
        depth: int,
        parent_tool_call_id: int,
        agent_prompt: str,
    ) -> FrameRow:
        return await self._db.run(
            _push_frame, session_id, agent_id, depth, parent_tool_call_id, agent_prompt
        )

    async def terminate_frame(self, frame_id: int) -> None:
        await self._db.run(_terminate_frame, frame_id)

    async def ended_child(self, session_id: int, tool_call_id: int) -> FrameRow | None:
        """The ended frame sub-agent call ``tool_call_id`` ran (the newest), if any."""
        return await self._db.run(_ended_child, session_id, tool_call_id)

    async def interrupted(self, session_id: int | None = None) -> list[int]:
        """Non-ephemeral sessions a crash left mid-turn, oldest first (``session_id``:
        that one, if it was).

        A frame is mid-turn when a sub-agent frame is still active, a call is still
        ``running``/``pending``, its last row is an unanswered user/agent message, or its
        last row is a tool round no answer followed (unless a call in it was cancelled:
        that turn was ended by /stop; or the turn was recorded as ended there: the user
        was told it failed or ran out of rounds).
        """
        return await self._db.run(_interrupted, session_id)

    async def for_source(
        self,
        source: str,
        *,
        fresh: bool = False,
        agent_id: str = "main",
        also: Callable[[Connection], None] | None = None,
    ) -> SessionRow:
        """The source's active session, created on first use (or anew with ``fresh``).

        One transaction: two callers racing for a new source get the same session.
        ``also`` runs in it (and rolls it back when it raises).
        """
        template = SessionRow(
            id=0,
            source=source,
            agent_id=agent_id,
            is_interactive=True,
            is_ephemeral=False,
            run_context=None,
            title=None,
            created_at=utcnow(),
        )
        return await self._db.run(_for_source, template, fresh, also)

    async def source_model(self, source: str) -> str | None:
        return await self._db.run(_source_model, source)

    async def set_source_model(self, source: str, model: str | None) -> None:
        await self._db.run(_set_source_model, source, model)

    async def reset_tool_grants(self, session_id: int) -> int:
        """Revoke every tool group the session's root activated (``/resettools``)."""
        return await self._db.run(_reset_tool_grants, session_id)

    async def all_sources(self) -> dict[str, int]:
        """``source → active session id`` for every source."""
        return await self._db.run(_all_sources)

    async def active_for_source(self, source: str) -> int | None:
        return await self._db.run(_active_for_source, source)

    async def set_active_for_source(self, source: str, session_id: int) -> None:
        await self._db.run(_set_active_for_source, source, session_id)


def _create(conn: Connection, row: SessionRow) -> SessionRow:
    values = {k: getattr(row, k) for k in row.__slots__ if k != "id"}
    session_id = conn.execute(s.insert().values(**values)).inserted_primary_key[0]
    conn.execute(
        f.insert().values(
            session_id=session_id, agent_id=row.agent_id, depth=0, created_at=row.created_at
        )
    )
    return replace(row, id=session_id)


def _get(conn: Connection, session_id: int) -> SessionRow | None:
    row = conn.execute(sa.select(*_SESSION_COLUMNS).where(s.c.id == session_id)).first()
    return SessionRow(*row) if row else None


def _set_run_context(conn: Connection, session_id: int, run_context: dict[str, Any] | None) -> None:
    conn.execute(s.update().where(s.c.id == session_id).values(run_context=run_context))


def _active_frames(conn: Connection, session_id: int) -> list[FrameRow]:
    rows = conn.execute(
        sa.select(*_FRAME_COLUMNS)
        .where(f.c.session_id == session_id, f.c.terminated_at.is_(None))
        .order_by(f.c.depth, f.c.id)
    )
    return [FrameRow(*row) for row in rows]


def _root_frame(conn: Connection, session_id: int) -> FrameRow:
    row = conn.execute(
        sa.select(*_FRAME_COLUMNS)
        .where(f.c.session_id == session_id, f.c.depth == 0)
        .order_by(f.c.id)
        .limit(1)
    ).first()
    if row is None:
        raise LookupError(f"session {session_id} has no root frame")
    return FrameRow(*row)


def _push_frame(
    conn: Connection,
    session_id: int,
    agent_id: str,
    depth: int,
    parent_tool_call_id: int,
    agent_prompt: str,
) -> FrameRow:
    now = utcnow()
    result = conn.execute(
        f.insert().values(
            session_id=session_id,
            agent_id=agent_id,
            agent_prompt=agent_prompt,
            depth=depth,
            parent_tool_call_id=parent_tool_call_id,
            created_at=now,
        )
    )
    return FrameRow(
        result.inserted_primary_key[0],
        session_id,
        agent_id,
        agent_prompt,
        depth,
        parent_tool_call_id,
        None,
        now,
    )


def _terminate_frame(conn: Connection, frame_id: int) -> None:
    conn.execute(f.update().where(f.c.id == frame_id).values(terminated_at=utcnow()))


def _ended_child(conn: Connection, session_id: int, tool_call_id: int) -> FrameRow | None:
    row = conn.execute(
        sa.select(*_FRAME_COLUMNS)
        .where(
            f.c.session_id == session_id,
            f.c.terminated_at.is_not(None),
            f.c.parent_tool_call_id == tool_call_id,
        )
        .order_by(f.c.id.desc())
        .limit(1)
    ).first()
    return None if row is None else FrameRow(*row)


def _interrupted(conn: Connection, session_id: int | None = None) -> list[int]:
    last_id = (
        sa.select(sa.func.max(h.c.id))
        .where(h.c.session_stack_id == f.c.id, h.c.status == "ok")
        .correlate(f)
        .scalar_subquery()
    )
    last_role = sa.select(h.c.role).where(h.c.id == last_id).correlate(f).scalar_subquery()
    tool_round_unanswered = sa.and_(
        sa.or_(f.c.ended_turn_at.is_(None), f.c.ended_turn_at < last_id),
        sa.select(t.c.id).where(t.c.message_id == last_id).correlate(f).exists(),
        ~sa.select(t.c.id)
        .where(t.c.message_id == last_id, t.c.status == "cancelled")
        .correlate(f)
        .exists(),
    )
    open_calls = (
        sa.select(t.c.id)
        .join(h, h.c.id == t.c.message_id)
        .where(h.c.session_stack_id == f.c.id, t.c.status.in_(("running", "pending")))
        .correlate(f)
        .exists()
    )
    query = (
        sa.select(f.c.session_id)
        .join(s, s.c.id == f.c.session_id)
        .where(
            f.c.terminated_at.is_(None),
            s.c.is_ephemeral.is_(False),
            sa.or_(
                f.c.depth > 0,
                open_calls,
                last_role.in_(("user", "agent")),
                tool_round_unanswered,
            ),
        )
        .group_by(f.c.session_id)
        .order_by(f.c.session_id)
    )
    if session_id is not None:
        query = query.where(f.c.session_id == session_id)
    return [row[0] for row in conn.execute(query)]


def _for_source(
    conn: Connection,
    template: SessionRow,
    fresh: bool,
    also: Callable[[Connection], None] | None = None,
) -> SessionRow:
    if also is not None:
        also(conn)
    if not fresh:
        session_id = _active_for_source(conn, template.source)
        if session_id is not None:
            row = _get(conn, session_id)
            if row is not None:
                return row
    row = _create(conn, replace(template, created_at=utcnow()))
    _set_active_for_source(conn, template.source, row.id)
    return row


def _source_model(conn: Connection, source: str) -> str | None:
    return conn.execute(
        sa.select(sources.c.preferred_model).where(sources.c.source == source)
    ).scalar()


def _set_source_model(conn: Connection, source: str, model: str | None) -> None:
    conn.execute(sources.update().where(sources.c.source == source).values(preferred_model=model))


def _reset_tool_grants(conn: Connection, session_id: int) -> int:
    return conn.execute(
        session_tool_grants.delete().where(session_tool_grants.c.session_id == session_id)
    ).rowcount


def _all_sources(conn: Connection) -> dict[str, int]:
    return {row.source: row.session_id for row in conn.execute(sa.select(sources))}


def _active_for_source(conn: Connection, source: str) -> int | None:
    return conn.execute(sa.select(sources.c.session_id).where(sources.c.source == source)).scalar()


def _set_active_for_source(conn: Connection, source: str, session_id: int) -> None:
    """Portable upsert: update, else insert."""
    now = utcnow()
    updated = conn.execute(
        sources.update()
        .where(sources.c.source == source)
        .values(session_id=session_id, updated_at=now)
    )
    if updated.rowcount == 0:
        conn.execute(sources.insert().values(source=source, session_id=session_id, updated_at=now))
