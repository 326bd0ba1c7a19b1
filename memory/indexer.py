"""Copies committed chat text into the search index, session by session, from the database.

The database is the truth: whatever event arrives (or is missed), indexing a session reads
its root-frame messages and summaries past the session's watermark, writes their documents
and moves the watermark, in one transaction. So an event seen twice, a lagged bus or a
restart never indexes a thing twice or skips one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import (
    Database,
    chat_history,
    chat_sessions,
    chat_sessions_stack,
    chat_summaries,
    insert_for,
    utcnow,
)
from memory.optouts import opted_out_in
from memory.tables import (
    documents_in_id_order,
    memory_documents,
    memory_embed_marks,
    memory_watermarks,
    scope_of,
    searchable,
)
from memory.users import BatchSpeakers, identity_of, is_personal_in

log = logging.getLogger(__name__)


class SessionsFailed(Exception):
    """Sessions a catch-up could not index (each logged); the others it did."""

    def __init__(self, sessions: list[int]) -> None:
        super().__init__(f"sessions not indexed: {sessions}")
        self.sessions = sessions


__all__ = ["Indexer", "IndexerLimits", "SessionsFailed", "chunks"]

#: Roles whose text is worth finding again (tool output and system prompts are not).
INDEXED_ROLES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class IndexerLimits:
    #: Longest document; a longer message is split (PostgreSQL's tsvector caps at 1 MB,
    #: and a snippet out of a short chunk is cheap to make).
    chunk_chars: int = 4_000
    #: Rows read per transaction, so a long catch-up never holds the write lock (and, on
    #: SQLite, the one database thread a turn's writes also use) for long: ~12 ms here.
    batch: int = 200


def chunks(text: str, size: int) -> Iterator[str]:
    """``text`` in pieces of at most ``size`` characters, cut at whitespace when there is
    some in the piece's second half."""
    while len(text) > size:
        cut = text.rfind(" ", size // 2, size)
        cut = size if cut <= 0 else cut
        yield text[:cut]
        text = text[cut:].lstrip()
    if text.strip():
        yield text


class Indexer:
    """Indexes sessions from the database; safe to call for any session at any time."""

    def __init__(self, db: Database, limits: IndexerLimits | None = None) -> None:
        self._db = db
        self._limits = limits or IndexerLimits()

    async def index_session(self, session_id: int) -> int:
        """Index what ``session_id`` has past its watermark; return the documents written."""
        written = 0
        while True:
            count, more = await self._db.run(_index_batch, session_id, self._limits)
            written += count
            if not more:
                return written

    async def behind(self) -> list[int]:
        """Sessions with messages or summaries past their watermark."""
        return await self._db.run(_sessions_behind)

    async def catch_up(self) -> int:
        """Index every session that is behind; return the documents written. A session
        whose rows cannot be indexed is logged and passed over: the others are not held
        behind it; ``SessionsFailed`` is raised once all were tried (the round failed:
        the next one catches up again)."""
        written = 0
        failed: list[int] = []
        for session_id in await self.behind():
            try:
                written += await self.index_session(session_id)
            except Exception:
                log.exception("memory: indexing session %d failed; the others go on", session_id)
                failed.append(session_id)
        if failed:
            raise SessionsFailed(failed)
        return written


def _watermark(conn: Connection, session_id: int) -> tuple[int, int]:
    row = conn.execute(
        sa.select(memory_watermarks.c.last_message_id, memory_watermarks.c.last_summary_id).where(
            memory_watermarks.c.session_id == session_id
        )
    ).first()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _index_batch(conn: Connection, session_id: int, limits: IndexerLimits) -> tuple[int, bool]:
    session = conn.execute(
        sa.select(chat_sessions.c.source, chat_sessions.c.is_ephemeral).where(
            chat_sessions.c.id == session_id
        )
    ).first()
    if session is None:
        return 0, False
    source = session.source
    last_message, last_summary = _watermark(conn, session_id)
    root = sa.and_(chat_sessions_stack.c.session_id == session_id, chat_sessions_stack.c.depth == 0)
    messages = conn.execute(
        sa.select(
            chat_history.c.id,
            chat_history.c.role,
            chat_history.c.content,
            chat_history.c.status,
            chat_history.c.is_synthetic,
            chat_history.c.metadata,
            chat_history.c.created_at,
        )
        .join(chat_sessions_stack, chat_sessions_stack.c.id == chat_history.c.session_stack_id)
        .where(root, chat_history.c.id > last_message)
        .order_by(chat_history.c.id)
        .limit(limits.batch)
    ).all()
    summaries = conn.execute(
        sa.select(chat_summaries.c.id, chat_summaries.c.content, chat_summaries.c.created_at)
        .join(chat_sessions_stack, chat_sessions_stack.c.id == chat_summaries.c.stack_id)
        .where(root, chat_summaries.c.id > last_summary)
        .order_by(chat_summaries.c.id)
        .limit(limits.batch)
    ).all()
    documents: list[dict[str, Any]] = []
    # An opted-out conversation's rows are passed over for good (the watermark moves), and
    # so are a background run's (a job's, the tic's): what reaches a chat of it is indexed
    # there; until 2026-12-07 every person's job runs were indexed under "cron", searched
    # by every job (found by review).
    indexed = not session.is_ephemeral and not opted_out_in(conn, source)
    speakers = BatchSpeakers(conn)
    for m in messages if indexed else ():
        # Synthetic prompts (ticks, briefings) are the system's words, not the user's.
        if m.role in INDEXED_ROLES and m.status == "ok" and not m.is_synthetic:
            speaker = identity_of(source, m.metadata) if m.role == "user" else None
            user_id = speakers.user_id(speaker) if speaker is not None else None
            if speakers.owner_forgotten(source, m.id) or (
                user_id is not None and speakers.forgotten(user_id, m.id)
            ):
                continue  # said before the speaker's /forget_me: never indexed again
            documents += _documents(
                session_id,
                source,
                "message",
                m.id,
                m.role,
                m.content,
                m.created_at,
                limits,
                user_id,
            )
    # A summary holds the conversation from its first message on: in a person's own
    # conversation forgotten since, it holds their forgotten words (indexed after the
    # forget, it brought them back into /search until 2026-12-06; found by review).
    # Only a personal conversation has an owner to have forgotten it: no query for groups.
    personal = summaries and indexed and is_personal_in(conn, source)
    if personal and speakers.owner_forgotten(source, _first_message(conn, root)):
        summaries_kept: Sequence[Any] = ()
    else:
        summaries_kept = summaries if indexed else ()
    for s in summaries_kept:
        documents += _documents(
            session_id, source, "summary", s.id, "summary", s.content, s.created_at, limits
        )
    if documents:
        documents_in_id_order(conn)
        if conn.dialect.name == "sqlite":
            _number_past_every_mark(conn, documents)
        conn.execute(_insert_ignoring_duplicates(conn), documents)
    if messages or summaries:
        _set_watermark(
            conn,
            session_id,
            messages[-1].id if messages else last_message,
            summaries[-1].id if summaries else last_summary,
        )
    more = len(messages) == limits.batch or len(summaries) == limits.batch
    return len(documents), more


def _first_message(conn: Connection, root: Any) -> int:
    """The id of the session's first root-frame message (0: none)."""
    first = conn.execute(
        sa.select(sa.func.min(chat_history.c.id))
        .join(chat_sessions_stack, chat_sessions_stack.c.id == chat_history.c.session_stack_id)
        .where(root)
    ).scalar()
    return int(first or 0)


def _documents(
    session_id: int,
    source: str,
    kind: str,
    ref_id: int,
    role: str,
    content: str | None,
    created_at: Any,
    limits: IndexerLimits,
    user_id: int | None = None,
) -> list[dict[str, Any]]:
    return [
        {
            "session_id": session_id,
            "source": source,
            "scope": scope_of(source),
            "kind": kind,
            "ref_id": ref_id,
            "chunk": number,
            "role": role,
            "body": body,
            "search_body": searchable(body),  # Chinese and Japanese words findable
            "created_at": created_at,
            "user_id": user_id,
        }
        for number, body in enumerate(chunks(content or "", limits.chunk_chars))
    ]


def _number_past_every_mark(conn: Connection, documents: list[dict[str, Any]]) -> None:
    """Ids past the newest document and past every embedding mark. SQLite gives a deleted
    newest row's id to the next insert, and a document under an id a mark has passed was
    never embedded (until 2026-12-06; PostgreSQL's sequence never gives an id twice)."""
    newest = conn.execute(
        sa.select(
            sa.func.max(memory_documents.c.id),
            sa.select(sa.func.max(memory_embed_marks.c.last_document_id)).scalar_subquery(),
        )
    ).one()
    first = max(newest[0] or 0, newest[1] or 0) + 1
    for number, document in enumerate(documents):
        document["id"] = first + number


def _insert_ignoring_duplicates(conn: Connection) -> Any:
    # Two processes indexing one session at once (a second worker): the unique key keeps
    # a document once, whoever wrote it first.
    return insert_for(conn.dialect.name, memory_documents).on_conflict_do_nothing()


def _set_watermark(conn: Connection, session_id: int, message_id: int, summary_id: int) -> None:
    values = {
        "session_id": session_id,
        "last_message_id": message_id,
        "last_summary_id": summary_id,
        "updated_at": utcnow(),
    }
    conn.execute(
        insert_for(conn.dialect.name, memory_watermarks)
        .values(**values)
        .on_conflict_do_update(
            index_elements=["session_id"],
            set_={k: v for k, v in values.items() if k != "session_id"},
        )
    )


def _sessions_behind(conn: Connection) -> list[int]:
    stack, wm = chat_sessions_stack, memory_watermarks
    joined = stack.outerjoin(wm, wm.c.session_id == stack.c.session_id)
    by_message = (
        sa.select(stack.c.session_id)
        .select_from(joined.join(chat_history, chat_history.c.session_stack_id == stack.c.id))
        .where(stack.c.depth == 0, chat_history.c.id > sa.func.coalesce(wm.c.last_message_id, 0))
    )
    by_summary = (
        sa.select(stack.c.session_id)
        .select_from(joined.join(chat_summaries, chat_summaries.c.stack_id == stack.c.id))
        .where(stack.c.depth == 0, chat_summaries.c.id > sa.func.coalesce(wm.c.last_summary_id, 0))
    )
    union = sa.union(by_message, by_summary).subquery()
    return sorted(int(v) for v in conn.execute(sa.select(union.c[0])).scalars())
