"""Read-only views of sessions for the HTTP API and chat adapters.

Every method returns plain JSON-able dicts (datetimes as ISO 8601 strings) in the shapes of
``GET /api/sessions`` and ``GET /api/sessions/:id``. Each call is one unit of work with a
fixed number of queries, whatever the number of sessions, frames, messages or tool calls.

``session_detail`` flattens a session's whole agent stack into one chronological list: the
rows of every frame ordered by ``chat_history.id`` (a child frame's rows sit between its
parent's tool call and that call's result), with ``agent`` / ``agent_end`` markers where a
sub-agent frame starts and, once terminated, ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store.db import Database
from engine.store.rows import FrameRow
from engine.store.schema import chat_history as h
from engine.store.schema import chat_llm_tools as t
from engine.store.schema import chat_sessions as s
from engine.store.schema import chat_sessions_stack as f
from engine.text import strict_json

MAX_PER_PAGE = 200
#: Beyond this the page's offset could overflow the database's integers.
MAX_PAGE = 1_000_000

Json = dict[str, Any]

# Our tool statuses, in the spec's words where they differ.
_TOOL_STATUS_NAMES = {"failed": "error"}

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


class SessionViews:
    """Session list and session transcript, read-only."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def list_sessions(
        self, *, source: str | None = None, page: int = 1, per_page: int = 20
    ) -> Json:
        """One page of sessions, newest first, with their counts of ``ok`` messages.

        ``{"items": [...], "total": N, "page": P, "per_page": PP}``; ``total`` counts every
        session matching ``source`` (all sessions when None). Raises ValueError for a page
        outside 1..``MAX_PAGE`` or a page size outside 1..``MAX_PER_PAGE``.
        """
        if not 1 <= page <= MAX_PAGE:
            raise ValueError(f"page must be between 1 and {MAX_PAGE}, got {page}")
        if not 1 <= per_page <= MAX_PER_PAGE:
            raise ValueError(f"per_page must be between 1 and {MAX_PER_PAGE}, got {per_page}")
        return await self._db.run(_list_sessions, source, page, per_page)

    async def usage(self, session_id: int) -> SessionUsage:
        return await self._db.run(_usage, session_id)

    async def session_detail(self, session_id: int) -> Json | None:
        """A session and its whole message tree in chronological order; None when unknown."""
        return await self._db.run(_session_detail, session_id)


@dataclass(frozen=True, slots=True)
class SessionUsage:
    """The last root answer's tokens, and the spend of every frame (sub-agents included)."""

    last_input_tokens: int | None
    last_output_tokens: int | None
    last_model: str | None
    total_input_tokens: int
    total_output_tokens: int
    total_cost: float
    model_calls: int


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _usage(conn: Connection, session_id: int) -> SessionUsage:
    frames = sa.select(f.c.id).where(f.c.session_id == session_id)
    answered = (
        h.c.role == "assistant",
        h.c.session_stack_id.in_(frames),
        h.c.is_synthetic.is_(False),
    )
    totals = conn.execute(
        sa.select(
            sa.func.coalesce(sa.func.sum(h.c.input_tokens), 0),
            sa.func.coalesce(sa.func.sum(h.c.output_tokens), 0),
            sa.func.coalesce(sa.func.sum(h.c.cost), 0.0),
            sa.func.count(h.c.id),
        ).where(*answered)
    ).one()
    root = sa.select(f.c.id).where(f.c.session_id == session_id, f.c.depth == 0)
    last = conn.execute(
        sa.select(h.c.input_tokens, h.c.output_tokens, h.c.model)
        .where(
            h.c.role == "assistant",
            h.c.session_stack_id.in_(root),
            h.c.is_synthetic.is_(False),
        )
        .order_by(h.c.id.desc())
        .limit(1)
    ).first()
    return SessionUsage(
        last_input_tokens=last.input_tokens if last else None,
        last_output_tokens=last.output_tokens if last else None,
        last_model=last.model if last else None,
        total_input_tokens=int(totals[0]),
        total_output_tokens=int(totals[1]),
        total_cost=float(totals[2]),
        model_calls=int(totals[3]),
    )


def _list_sessions(conn: Connection, source: str | None, page: int, per_page: int) -> Json:
    where = [s.c.source == source] if source is not None else []
    total = conn.execute(sa.select(sa.func.count()).select_from(s).where(*where)).scalar_one()

    page_rows = (
        sa.select(
            s.c.id,
            s.c.source,
            s.c.agent_id,
            s.c.is_ephemeral,
            s.c.is_interactive,
            s.c.context_label,
            s.c.created_at,
        )
        .where(*where)
        .order_by(s.c.id.desc())
        .limit(per_page)
        .offset((page - 1) * per_page)
        .subquery("page_rows")
    )
    counts = (
        sa.select(
            f.c.session_id,
            sa.func.count(h.c.id).label("message_count"),
            sa.func.max(h.c.created_at).label("last_message_at"),
        )
        .select_from(h.join(f, f.c.id == h.c.session_stack_id))
        .where(h.c.status == "ok", f.c.session_id.in_(sa.select(page_rows.c.id)))
        .group_by(f.c.session_id)
        .subquery("counts")
    )
    rows = conn.execute(
        sa.select(page_rows, counts.c.message_count, counts.c.last_message_at)
        .select_from(page_rows.outerjoin(counts, counts.c.session_id == page_rows.c.id))
        .order_by(page_rows.c.id.desc())
    ).mappings()
    items = [
        {
            "id": row["id"],
            "source": row["source"],
            "agent_id": row["agent_id"],
            "is_ephemeral": bool(row["is_ephemeral"]),
            "is_interactive": bool(row["is_interactive"]),
            "context_label": row["context_label"],
            "created_at": _iso(row["created_at"]),
            "message_count": row["message_count"] or 0,
            "last_message_at": _iso(row["last_message_at"]),
        }
        for row in rows
    ]
    return {"items": items, "total": total, "page": page, "per_page": per_page}


def _session_detail(conn: Connection, session_id: int) -> Json | None:
    session = (
        conn.execute(
            sa.select(
                s.c.id,
                s.c.source,
                s.c.agent_id,
                s.c.is_interactive,
                s.c.is_ephemeral,
                s.c.context_label,
                s.c.created_at,
            ).where(s.c.id == session_id)
        )
        .mappings()
        .first()
    )
    if session is None:
        return None

    frames = {
        row[0]: FrameRow(*row)
        for row in conn.execute(
            sa.select(*_FRAME_COLUMNS).where(f.c.session_id == session_id).order_by(f.c.id)
        )
    }
    messages = (
        conn.execute(
            sa.select(
                h.c.id,
                h.c.session_stack_id,
                h.c.role,
                h.c.content,
                h.c.status,
                h.c.is_synthetic,
                h.c.reasoning_content,
                h.c.metadata,
                h.c.model,
                h.c.input_tokens,
                h.c.output_tokens,
                h.c.created_at,
            )
            .join(f, f.c.id == h.c.session_stack_id)
            .where(f.c.session_id == session_id)
            .order_by(h.c.id)
        )
        .mappings()
        .all()
    )
    calls: dict[int, list[sa.RowMapping]] = {}
    for call in conn.execute(
        sa.select(t.c.id, t.c.message_id, t.c.name, t.c.arguments, t.c.result, t.c.status)
        .join(h, h.c.id == t.c.message_id)
        .join(f, f.c.id == h.c.session_stack_id)
        .where(f.c.session_id == session_id)
        .order_by(t.c.id)
    ).mappings():
        calls.setdefault(call["message_id"], []).append(call)

    return {
        "session": {
            "id": session["id"],
            "source": session["source"],
            "agent_id": session["agent_id"],
            "is_interactive": bool(session["is_interactive"]),
            "is_ephemeral": bool(session["is_ephemeral"]),
            "context_label": session["context_label"],
            "created_at": _iso(session["created_at"]),
        },
        "messages": _flatten(frames, messages, calls),
    }


def _flatten(
    frames: dict[int, FrameRow],
    messages: Sequence[sa.RowMapping],
    calls: dict[int, list[sa.RowMapping]],
) -> list[Json]:
    """Rows of every frame, in id order, with sub-agent start and end markers."""
    out: list[Json] = []
    open_frames: list[FrameRow] = []  # the frames being shown, outermost first

    # A child frame without a single row is shown right after its parent's tool calls.
    frames_with_rows = {m["session_stack_id"] for m in messages}
    empty_by_call: dict[int | None, list[FrameRow]] = {}
    for frame in frames.values():
        if frame.depth > 0 and frame.id not in frames_with_rows:
            empty_by_call.setdefault(frame.parent_tool_call_id, []).append(frame)

    def close_until(keep: int) -> None:
        """Close the shown frames beyond the first ``keep``, deepest first."""
        while len(open_frames) > keep:
            closing = open_frames.pop()
            if closing.depth > 0 and closing.terminated_at is not None:
                out.append(_agent_end(closing))

    for message in messages:
        frame = frames[message["session_stack_id"]]
        if not open_frames or open_frames[-1].id != frame.id:
            shown = [shown.id for shown in open_frames]
            if frame.id in shown:  # back in a parent frame
                close_until(shown.index(frame.id) + 1)
            else:  # a new frame: leave its siblings and their children first
                close_until(sum(1 for shown in open_frames if shown.depth < frame.depth))
                open_frames.append(frame)
                if frame.depth > 0 and message["role"] != "agent":
                    out.append(_agent_start(frame, frame.agent_prompt, frame.created_at))

        role = message["role"]
        if role == "user":
            out.append(_user(message))
        elif role == "agent":
            out.append(_agent_start(frame, message["content"], message["created_at"]))
        else:
            own_calls = calls.get(message["id"], [])
            out.append(_assistant(message, frame, "thinking" if own_calls else "assistant"))
            for call in own_calls:
                out.append(_tool(call, frame))
            for call in own_calls:
                for empty in empty_by_call.pop(call["id"], []):
                    out.extend(_empty_frame(empty))
    close_until(0)

    # Empty child frames whose parent tool call is not in this session's history.
    for orphans in empty_by_call.values():
        for empty in orphans:
            out.extend(_empty_frame(empty))
    return out


def _user(message: sa.RowMapping) -> Json:
    metadata = message["metadata"] or {}
    return {
        "kind": "user",
        "id": message["id"],
        "content": message["content"],
        "is_synthetic": bool(message["is_synthetic"]),
        "status": message["status"],
        "created_at": _iso(message["created_at"]),
        "attachments": list(metadata.get("attachments") or []),
    }


def _assistant(message: sa.RowMapping, frame: FrameRow, kind: str) -> Json:
    return {
        "kind": kind,
        "id": message["id"],
        "content": message["content"],
        "reasoning": message["reasoning_content"] or None,
        "created_at": _iso(message["created_at"]),
        "input_tokens": message["input_tokens"],
        "output_tokens": message["output_tokens"],
        "model": message["model"],
        "is_synthetic": bool(message["is_synthetic"]),
        "depth": frame.depth,
    }


def _tool(call: sa.RowMapping, frame: FrameRow) -> Json:
    return {
        "kind": "tool",
        "id": call["id"],
        "name": call["name"],
        "arguments": _arguments(call["arguments"]),
        "status": _TOOL_STATUS_NAMES.get(call["status"], call["status"]),
        "result": call["result"],
        "depth": frame.depth,
    }


def _arguments(raw: str | None) -> Any:
    """The arguments as a dict; the raw text when it is not a JSON object; {} when absent."""
    if raw is None or raw == "":
        return {}
    try:
        parsed = strict_json(raw)  # a NaN the model wrote broke the session's page (500)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return raw
    return parsed if isinstance(parsed, dict) else raw


def _agent_start(frame: FrameRow, content: str | None, created_at: datetime) -> Json:
    return {
        "kind": "agent",
        "agent_id": frame.agent_id,
        "depth": frame.depth,
        "content": content,
        "created_at": _iso(created_at),
    }


def _agent_end(frame: FrameRow) -> Json:
    return {"kind": "agent_end", "agent_id": frame.agent_id, "depth": frame.depth}


def _empty_frame(frame: FrameRow) -> list[Json]:
    markers = [_agent_start(frame, frame.agent_prompt, frame.created_at)]
    if frame.terminated_at is not None:
        markers.append(_agent_end(frame))
    return markers
