"""Full-text search over the indexed conversations of one source.

Scope: a search only ever sees documents of the asking session's ``source`` (one
Telegram private chat is one user; a group chat sees its own conversations only).

User text is never query syntax: it is cut into word tokens, each one quoted (FTS5) or
turned into a phrase tsquery of its own (PostgreSQL), and the terms are OR-ed so a hit
need not contain every word; ranking (BM25 / ``ts_rank``) puts the best matches first.
A run of Chinese or Japanese characters is cut into overlapping pairs of characters, each
a phrase of two of the words the index holds (``memory.tables.searchable``).

Semantic recall (``Semantic``: an embeddings endpoint and a place for vectors): the query
is embedded too, the source's nearest documents are found, and the two rankings are fused
by reciprocal rank (``RRF_K``), so a hit may share no word with the query ("where are we
staying in Portugal" finds "the hotel in Lisbon"). When the endpoint fails the search is
full text alone, and the log says why; so it is while no endpoint is chosen (no
``EMBEDDING_MODEL``, no provider serving ``embeddings``). Only vectors of the model that
embedded the query (and of its length) are compared with it: after a change of model
(``EMBEDDING_MODEL``, a provider serving ``embeddings``) a document is found by meaning
once the embedder has embedded it again under the new model.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import Database, UtcDateTime, chat_sessions
from memory.embeddings import ChosenEmbeddings, EmbeddingClient, EmbeddingError
from memory.tables import CJK, WORD_BREAK, memory_documents, scope_of, searchable
from memory.vectors import Vectors

__all__ = ["MAX_TERMS", "RRF_K", "Hit", "Search", "Semantic", "fuse", "query_terms"]

log = logging.getLogger(__name__)

#: Terms kept of a query (the first ones): a 10 KB query costs what a short one does.
MAX_TERMS = 24
MAX_TERM_CHARS = 64
MAX_LIMIT = 50
#: Reciprocal rank fusion's constant (Cormack et al.; 60 is the usual choice).
RRF_K = 60
#: Candidates each ranking brings to the fusion, per result asked for.
CANDIDATES_PER_RESULT = 4
#: Characters of a hit found by meaning alone shown as its snippet (no word to highlight).
PLAIN_SNIPPET_CHARS = 200
_WORD = re.compile(r"\w+")
#: A word's runs of Chinese or Japanese characters, and what is between them.
_CJK_RUNS = re.compile(f"[{CJK}]+|[^{CJK}]+")
_CJK_RUN = re.compile(f"[{CJK}]+")
#: Two highlights of one CJK word's characters in a PostgreSQL headline ("[东][京]").
_SPLIT_MARKS = re.compile(f"(?<=[{CJK}])\\]\\[(?=[{CJK}])")
#: Words too common to find anything by (PostgreSQL's 'english' configuration drops the
#: same ones; FTS5 would match nearly every row with them and rank that noise).
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "after",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "been",
        "before",
        "being",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "done",
        "for",
        "from",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "just",
        "me",
        "more",
        "most",
        "my",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
    ]
)


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
    """The distinct word tokens of ``query`` as written (the database lowers them as it
    lowered the text: Python lowers "İ" to "i" and a combining dot, PostgreSQL to "i", and
    until 2026-12-07 "İstanbul" found nothing there; found by review), compared without
    case, stop words left out, at most ``MAX_TERMS``. A run of Chinese or Japanese
    characters gives its overlapping pairs ("东京旅游": 东京, 京旅, 旅游)."""
    terms: dict[str, str] = {}
    for match in _WORD.finditer(query):
        for word in _pieces(match.group()):
            word = word[:MAX_TERM_CHARS]
            key = word.lower()
            if key in STOP_WORDS or key in terms:
                continue
            terms[key] = word
            if len(terms) == MAX_TERMS:
                return list(terms.values())
    return list(terms.values())


def _pieces(word: str) -> list[str]:
    """``word``'s parts: its runs of other characters whole, its CJK runs as overlapping
    pairs (one character alone as itself)."""
    pieces: list[str] = []
    for run in _CJK_RUNS.findall(word):
        if _CJK_RUN.fullmatch(run) is None or len(run) == 1:
            pieces.append(run)
        else:
            pieces.extend(run[i : i + 2] for i in range(len(run) - 1))
    return pieces


def _readable(snippet: str) -> str:
    """A snippet of a ``searchable`` text as the words were written."""
    if WORD_BREAK not in snippet:
        return snippet
    return _SPLIT_MARKS.sub("", snippet.replace(WORD_BREAK, ""))


@dataclass(frozen=True, slots=True)
class Semantic:
    """Where query vectors come from and document vectors are ranked."""

    #: One endpoint, or the one chosen now (asked again per query).
    client: EmbeddingClient | ChosenEmbeddings
    vectors: Vectors
    #: Documents less similar than this (cosine) to the query are not hits by meaning: the
    #: nearest documents of a chat that never spoke of it are not an answer.
    min_similarity: float = 0.3


def fuse(rankings: Sequence[Sequence[int]], limit: int, k: int = RRF_K) -> list[int]:
    """Reciprocal rank fusion: each id scores ``sum(1 / (k + rank))`` over the rankings it
    is in (rank from 1); ties go to the newer (higher) id."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, 1):
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: (-scores[d], -d))[:limit]


class Search:
    def __init__(self, db: Database, semantic: Semantic | None = None) -> None:
        self._db = db
        self.semantic = semantic

    async def sessions(
        self, source: str, query: str, *, limit: int = 5, since: datetime | None = None
    ) -> list[Hit]:
        """The best ``limit`` hits for ``query`` among ``source``'s conversations."""
        terms = query_terms(query)
        if not terms or "\x00" in source:  # no source holds a NUL (PostgreSQL raised on it)
            return []
        limit = max(1, min(limit, MAX_LIMIT))
        semantic = self.semantic
        embedded = await self._query_vector(query)
        if semantic is None or embedded is None:
            return [hit for _, hit in await self._db.run(_search, source, terms, limit, since)]
        model, query_vector = embedded
        return await self._db.run(
            _hybrid, source, terms, model, query_vector, semantic, limit, since
        )

    async def _query_vector(self, query: str) -> tuple[str, list[float]] | None:
        """The query's vector and the model that made it; ``None``: full text only."""
        if self.semantic is None:
            return None
        client = self.semantic.client.current()
        if client is None:  # no endpoint chosen now
            return None
        try:
            [vector] = await client.embed([query])
        except EmbeddingError as exc:
            log.warning("memory: searching by full text only: %s", exc)
            return None
        return client.model, vector


def _hybrid(
    conn: Connection,
    source: str,
    terms: list[str],
    model: str,
    query_vector: list[float],
    semantic: Semantic,
    limit: int,
    since: datetime | None,
) -> list[Hit]:
    pool = min(limit * CANDIDATES_PER_RESULT, MAX_LIMIT * CANDIDATES_PER_RESULT)
    by_words = _search(conn, source, terms, pool, since)
    by_meaning = semantic.vectors.nearest(
        conn,
        source,
        model,  # the query's model: another model's vectors are never compared with it
        query_vector,
        pool,
        since,
        min_similarity=semantic.min_similarity,
    )
    best = fuse([[doc_id for doc_id, _ in by_words], by_meaning], limit)
    hits = dict(by_words)
    missing = [doc_id for doc_id in best if doc_id not in hits]
    hits.update(_plain_hits(conn, source, missing))
    return [hits[doc_id] for doc_id in best if doc_id in hits]


def _plain_hits(conn: Connection, source: str, ids: list[int]) -> dict[int, Hit]:
    """Hits for documents found by meaning alone, of ``source`` only (a vector stored for
    another document under a reused id showed another chat's words until 2026-12-06):
    their opening words as the snippet."""
    if not ids:
        return {}
    d, s = memory_documents, chat_sessions
    rows = conn.execute(
        sa.select(
            d.c.id,
            d.c.session_id,
            s.c.title,
            d.c.role,
            d.c.kind,
            d.c.ref_id,
            d.c.created_at,
            sa.func.substr(d.c.body, 1, PLAIN_SNIPPET_CHARS + 1).label("opening"),
        )
        .join(s, s.c.id == d.c.session_id)
        .where(d.c.id.in_(ids), d.c.source == source)
    )
    out: dict[int, Hit] = {}
    for row in rows:
        opening = row.opening
        if len(opening) > PLAIN_SNIPPET_CHARS:
            opening = opening[:PLAIN_SNIPPET_CHARS].rsplit(" ", 1)[0] + "…"
        out[int(row.id)] = Hit(
            session_id=int(row.session_id),
            title=row.title,
            role=row.role,
            kind=row.kind,
            ref_id=int(row.ref_id),
            created_at=row.created_at,
            snippet=opening,
        )
    return out


def _search(
    conn: Connection, source: str, terms: list[str], limit: int, since: datetime | None
) -> list[tuple[int, Hit]]:
    params: dict[str, object] = {"source": source, "scope": scope_of(source), "limit": limit}
    # As the index reads its text: a CJK pair becomes a phrase of two words.
    terms = [searchable(term) or term for term in terms]
    when = ""
    if since is not None:
        when = " AND d.created_at >= :since"
        params["since"] = since
    if conn.dialect.name == "postgresql":
        # asyncpg prepares statements, and after five runs PostgreSQL may switch to a generic
        # plan, which cannot see how common the words are: here 4.8 -> 20 ms a query (the
        # 37-word worst case of bench/memory_recall.py: p99 48 ms). A custom plan per run costs
        # ~0.3 ms of planning.
        conn.execute(sa.text("SET LOCAL plan_cache_mode = force_custom_plan"))
        names = [f"t{i}" for i in range(len(terms))]
        params.update(zip(names, terms, strict=True))
        # A phrase: a term the parser cuts in two (a CJK pair) matches the two together.
        tsquery = " || ".join(f"phraseto_tsquery('english', :{n})" for n in names)
        sql = (
            # The scope token narrows the match to the source's rows; weight D (0) is the
            # scope's, A (1) the body's: only the body is ranked. Words that are all stop
            # words make an empty query, which matches nothing (not the whole scope).
            f"WITH w AS (SELECT ({tsquery}) AS words), "
            "q AS (SELECT words, CASE WHEN numnode(words) = 0 THEN words "
            "ELSE plainto_tsquery('simple', :scope) && words END AS query FROM w) "
            "SELECT d.id, d.session_id, s.title, d.role, d.kind, d.ref_id, d.created_at, "
            "ts_headline('english', COALESCE(d.search_body, d.body), q.words, "
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
        # CROSS JOIN keeps the full-text match the outer loop: SQLite 3.51's planner (seen
        # through pysqlite3) otherwise walks the source's documents and matches each one,
        # 445 ms instead of 2.8 ms over 10,000 documents of one chat.
        words = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        params["match"] = f'scope : "{scope_of(source)}" AND ({words})'
        sql = (
            "SELECT d.id, d.session_id, s.title, d.role, d.kind, d.ref_id, d.created_at, "
            "snippet(memory_fts, 0, '[', ']', '…', 24) AS snippet "
            "FROM memory_fts CROSS JOIN memory_documents d ON d.id = memory_fts.rowid "
            "JOIN chat_sessions s ON s.id = d.session_id "
            f"WHERE memory_fts MATCH :match AND d.source = :source{when} "
            "ORDER BY bm25(memory_fts, 1.0, 0.0), d.id DESC LIMIT :limit"
        )
    text = sa.text(sql)
    if since is not None:
        text = text.bindparams(sa.bindparam("since", type_=UtcDateTime()))
    statement = text.columns(created_at=UtcDateTime())
    return [
        (
            int(row.id),
            Hit(
                session_id=int(row.session_id),
                title=row.title,
                role=row.role,
                kind=row.kind,
                ref_id=int(row.ref_id),
                created_at=row.created_at,
                snippet=_readable(row.snippet),
            ),
        )
        for row in conn.execute(statement, params)
    ]
