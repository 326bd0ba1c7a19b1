"""Full-text search over the indexed conversations of one source.

Scope: a search only ever sees documents of the asking session's ``source`` (one
Telegram private chat is one user; a group chat sees its own conversations only).

User text is never query syntax: it is cut into word tokens, each one quoted (FTS5) or
turned into a plain tsquery of its own (PostgreSQL), and the terms are OR-ed so a hit
need not contain every word; ranking (BM25 / ``ts_rank``) puts the best matches first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import Database
from engine.store.schema import UtcDateTime
from memory.tables import scope_of

__all__ = ["MAX_TERMS", "Hit", "Search", "query_terms"]

#: Terms kept of a query (the first ones): a 10 KB query costs what a short one does.
MAX_TERMS = 24
MAX_TERM_CHARS = 64
MAX_LIMIT = 50
_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Hit:
    session_id: int
    title: str | None
    role: str
    kind: str  # message | summary
    ref_id: int  # chat_history.id or chat_summaries.id
    created_at: datetime
    snippet: str


def query_terms(query: str) -> list[str]:
    """The distinct word tokens of ``query``, lower-cased, at most ``MAX_TERMS``."""
    terms: dict[str, None] = {}
    for match in _WORD.finditer(query):
        terms[match.group().lower()[:MAX_TERM_CHARS]] = None
        if len(terms) == MAX_TERMS:
            break
    return list(terms)


class Search:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def sessions(
        self, source: str, query: str, *, limit: int = 5, since: datetime | None = None
    ) -> list[Hit]:
        """The best ``limit`` hits for ``query`` among ``source``'s conversations."""
        terms = query_terms(query)
        if not terms:
            return []
        limit = max(1, min(limit, MAX_LIMIT))
        return await self._db.run(_search, source, terms, limit, since)


def _search(
    conn: Connection, source: str, terms: list[str], limit: int, since: datetime | None
) -> list[Hit]:
    params: dict[str, object] = {"source": source, "scope": scope_of(source), "limit": limit}
    when = ""
    if since is not None:
        when = " AND d.created_at >= :since"
        params["since"] = since
    if conn.dialect.name == "postgresql":
        # asyncpg prepares statements, and after five runs PostgreSQL may switch to a generic
        # plan, which cannot see how common the words are: here 4.8 -> 20 ms a query (the
        # 37-word worst case of bench/memory.py: p99 48 ms). A custom plan per run costs
        # ~0.3 ms of planning.
        conn.execute(sa.text("SET LOCAL plan_cache_mode = force_custom_plan"))
        names = [f"t{i}" for i in range(len(terms))]
        params.update(zip(names, terms, strict=True))
        tsquery = " || ".join(f"plainto_tsquery('english', :{n})" for n in names)
        sql = (
            # The scope token narrows the match to the source's rows; weight D (0) is the
            # scope's, A (1) the body's: only the body is ranked. Words that are all stop
            # words make an empty query, which matches nothing (not the whole scope).
            f"WITH w AS (SELECT ({tsquery}) AS words), "
            "q AS (SELECT words, CASE WHEN numnode(words) = 0 THEN words "
            "ELSE plainto_tsquery('simple', :scope) && words END AS query FROM w) "
            "SELECT d.session_id, s.title, d.role, d.kind, d.ref_id, d.created_at, "
            "ts_headline('english', d.body, q.words, "
            "'StartSel=[, StopSel=], MaxWords=30, MinWords=12') AS snippet "
            "FROM memory_documents d CROSS JOIN q "
            "JOIN chat_sessions s ON s.id = d.session_id "
            "WHERE d.body_tsv @@ q.query AND d.source = :source"
            f"{when} "
            "ORDER BY ts_rank('{0, 0, 0, 1}', d.body_tsv, q.query) DESC, d.id DESC "
            "LIMIT :limit"
        )
    else:
        # Every term a quoted string: FTS5 reads no operator, column filter or prefix in it.
        words = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        params["match"] = f'scope : "{scope_of(source)}" AND ({words})'
        sql = (
            "SELECT d.session_id, s.title, d.role, d.kind, d.ref_id, d.created_at, "
            "snippet(memory_fts, 0, '[', ']', '…', 24) AS snippet "
            "FROM memory_fts JOIN memory_documents d ON d.id = memory_fts.rowid "
            "JOIN chat_sessions s ON s.id = d.session_id "
            f"WHERE memory_fts MATCH :match AND d.source = :source{when} "
            "ORDER BY bm25(memory_fts, 1.0, 0.0), d.id DESC LIMIT :limit"
        )
    text = sa.text(sql)
    if since is not None:
        text = text.bindparams(sa.bindparam("since", type_=UtcDateTime()))
    statement = text.columns(created_at=UtcDateTime())
    return [
        Hit(
            session_id=int(row.session_id),
            title=row.title,
            role=row.role,
            kind=row.kind,
            ref_id=int(row.ref_id),
            created_at=row.created_at,
            snippet=row.snippet,
        )
        for row in conn.execute(statement, params)
    ]
