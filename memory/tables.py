"""The memory layer's tables, as its migrations leave them.

``memory_documents`` holds the searchable text: one row per chunk of a user or assistant
message or of a compaction summary, with the session's source copied in so a search is
scoped without a join (and indexed as a token, ``scope``, see ``scope_of``). The full-text index over ``body`` is not a SQLAlchemy table:

* SQLite: an FTS5 virtual table ``memory_fts`` over the documents (external content, the
  view ``memory_fts_content``, kept in step by triggers), Porter stemming;
* PostgreSQL: a generated ``tsvector`` column ``body_tsv`` (``to_tsvector('english',
  ...)``, stored) with a GIN index.

Both read ``search_body`` where a row has one (0033): the body with every Chinese or
Japanese character a word of its own (``searchable``), as neither parser cuts a run of
them into words; a query's CJK words are cut the same way (``memory/search.py``).

``create_search_index`` makes it (``seed_rows`` for a database created whole; migrations
0013 and 0033 hold their own copies of the same statements, as history).

The people (0014): ``memory_users`` is the one user table every platform maps into through
``memory_identities`` (platform, the platform's own id); ``memory_facts`` is each user's
profile; ``memory_derive_marks`` is the deriver's durable queue (per session, how far its
messages were read for facts); ``memory_optouts`` the conversations memory leaves alone.

Semantic recall (0016): ``memory_embed_marks`` (per embedding model, how far documents
were embedded) and the vectors themselves (``memory/vectors.py``: not a SQLAlchemy table,
its column type is the dialect's).
"""

from __future__ import annotations

import hashlib
import re

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Connection

from engine.store import Id, UtcDateTime, metadata, serialize

__all__ = [
    "SEARCH_INDEX_DDL",
    "create_search_index",
    "documents_in_id_order",
    "memory_derive_marks",
    "memory_documents",
    "memory_embed_marks",
    "memory_facts",
    "memory_identities",
    "memory_optouts",
    "memory_users",
    "memory_watermarks",
    "scope_of",
    "searchable",
    "seed_rows",
]

#: How far indexing got in each session: everything up to these ids is in the index.
memory_watermarks = Table(
    "memory_watermarks",
    metadata,
    Column("session_id", Id, ForeignKey("chat_sessions.id"), primary_key=True),
    Column("last_message_id", Id, nullable=False, server_default="0"),
    Column("last_summary_id", Id, nullable=False, server_default="0"),
    Column("updated_at", UtcDateTime, nullable=False),
)

memory_documents = Table(
    "memory_documents",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("session_id", Id, ForeignKey("chat_sessions.id"), nullable=False),
    Column("source", String(255), nullable=False),
    Column("scope", String(32), nullable=False),  # the source's index token
    Column("kind", String(16), nullable=False),
    Column("ref_id", Id, nullable=False),  # chat_history.id or chat_summaries.id
    Column("chunk", Integer, nullable=False, server_default="0"),
    Column("role", String(16), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    # Who said it (0014): null for the assistant, summaries and rows indexed before.
    Column("user_id", Id),
    # The body as the full-text index reads it (0033, ``searchable``): null when that is
    # the body itself (no Chinese or Japanese in it).
    Column("search_body", Text),
    UniqueConstraint("kind", "ref_id", "chunk", name="uq_memory_documents_ref"),
    CheckConstraint("kind IN ('message', 'summary')", name="ck_memory_documents_kind"),
)
Index("ix_memory_documents_source", memory_documents.c.source, memory_documents.c.created_at)
Index("ix_memory_documents_user", memory_documents.c.user_id)

memory_users = Table(
    "memory_users",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("display_name", String(255)),
    Column("created_at", UtcDateTime, nullable=False),
    #: The newest message id at the person's last ``/forget_me`` (0027): their words up
    #: to it are never derived nor indexed again.
    Column("forgotten_through", Id),
)

#: A platform's id of a person -> the one user: ("telegram", "123"), ("web", "owner").
memory_identities = Table(
    "memory_identities",
    metadata,
    Column("platform", String(32), primary_key=True),
    Column("external_id", String(255), primary_key=True),
    Column("user_id", Id, ForeignKey("memory_users.id"), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)
Index("ix_memory_identities_user", memory_identities.c.user_id)

FACT_AUTHORS = ("deriver", "tool", "user")

memory_facts = Table(
    "memory_facts",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("user_id", Id, ForeignKey("memory_users.id"), nullable=False),
    Column("body", Text, nullable=False),
    # The conversation it was learned in: a group's facts are shown in that group only.
    Column("origin_source", String(255), nullable=False),
    Column("message_ids", JSON, nullable=False),  # chat_history ids it came from
    Column("created_by", String(16), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    CheckConstraint("created_by IN ('deriver', 'tool', 'user')", name="ck_memory_facts_created_by"),
)
Index("ix_memory_facts_user", memory_facts.c.user_id, memory_facts.c.updated_at)

#: The deriver's durable queue: a session's messages past ``last_message_id`` are unread.
memory_derive_marks = Table(
    "memory_derive_marks",
    metadata,
    Column("session_id", Id, ForeignKey("chat_sessions.id"), primary_key=True),
    Column("last_message_id", Id, nullable=False, server_default="0"),
    # Failed attempts at the batch past the mark: a batch the model cannot read is skipped
    # after a few (and logged), so one bad batch never stops a session's derivation.
    Column("failures", Integer, nullable=False, server_default="0"),
    Column("updated_at", UtcDateTime, nullable=False),
)

#: Conversations memory leaves alone: not indexed, nothing derived, no profile shown.
memory_optouts = Table(
    "memory_optouts",
    metadata,
    Column("source", String(255), primary_key=True),
    Column("created_at", UtcDateTime, nullable=False),
)

#: Conversations with one person whose source does not say so (a Discord DM), as their
#: platform learned them (0028): memory treats them as ``is_personal``'s.
memory_personal_sources = Table(
    "memory_personal_sources",
    metadata,
    Column("source", String(255), primary_key=True),
    Column("created_at", UtcDateTime, nullable=False),
)

#: How far each embedding model got (0016): documents up to this id have its vectors (or
#: were skipped after ``failures`` attempts). The vectors' own table is ``memory/vectors.py``'s.
memory_embed_marks = Table(
    "memory_embed_marks",
    metadata,
    Column("model", String(255), primary_key=True),
    Column("last_document_id", Id, nullable=False, server_default="0"),
    Column("failures", Integer, nullable=False, server_default="0"),
    Column("updated_at", UtcDateTime, nullable=False),
)

#: The full-text index, per dialect (0033's; 0013 made it over ``body`` alone).
SEARCH_INDEX_DDL: dict[str, tuple[str, ...]] = {
    "sqlite": (
        # The FTS5 content is the text indexed, so a snippet's marks fall on its words.
        "CREATE VIEW memory_fts_content AS SELECT id, COALESCE(search_body, body) AS body, "
        "scope FROM memory_documents",
        "CREATE VIRTUAL TABLE memory_fts USING fts5(body, scope, content='memory_fts_content', "
        "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
        "CREATE TRIGGER memory_documents_ai AFTER INSERT ON memory_documents BEGIN "
        "INSERT INTO memory_fts(rowid, body, scope) "
        "VALUES (new.id, COALESCE(new.search_body, new.body), new.scope); END",
        "CREATE TRIGGER memory_documents_ad AFTER DELETE ON memory_documents BEGIN "
        "INSERT INTO memory_fts(memory_fts, rowid, body, scope) "
        "VALUES ('delete', old.id, COALESCE(old.search_body, old.body), old.scope); END",
    ),
    "postgresql": (
        # Stored, so ranking reads the vector instead of parsing every matching body again.
        "ALTER TABLE memory_documents ADD COLUMN body_tsv tsvector "
        "GENERATED ALWAYS AS (setweight(to_tsvector('english', COALESCE(search_body, body)), "
        "'A') || setweight(to_tsvector('simple', scope), 'D')) STORED",
        "CREATE INDEX ix_memory_documents_fts ON memory_documents USING gin (body_tsv)",
    ),
}

#: Chinese and Japanese characters (Han, kana, their iteration marks): written without
#: spaces, so both parsers keep a whole run of them as one word (Korean has spaces).
CJK = (
    "\u3005-\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003ffff"
)
#: Put between a CJK character and a letter or digit beside it: a word break to both
#: parsers (an ASCII one: PostgreSQL's, in the C locale, reads every non-ASCII character
#: as a letter), and a control character no one types, so a snippet drops exactly these
#: (``memory/search.py``).
WORD_BREAK = "\x1f"
_CJK_EDGE = re.compile(f"(?<=[{CJK}])(?=\\w)|(?<=\\w)(?=[{CJK}])")
_CJK_ANY = re.compile(f"[{CJK}]")


def searchable(body: str) -> str | None:
    """``body`` as the full-text index reads it: every Chinese or Japanese character a
    word of its own (``WORD_BREAK`` around it), so a word inside a sentence is found as a
    phrase of its characters; ``None`` when that is ``body`` itself. Until 2026-12-07 a
    whole run was one word, and /search 东京 did not find "我们下周去东京旅游" (found by
    review)."""
    if _CJK_ANY.search(body) is None:  # most text: a tenth of the time of the edit
        return None
    marked = _CJK_EDGE.sub(WORD_BREAK, body)
    return None if marked == body else marked


def scope_of(source: str) -> str:
    """The one-word token standing for ``source`` in the full-text index.

    A search matches it first, so the engine ranks one source's documents rather than
    every source's (a common word is in half of all rows); hashed, so any source string is
    one plain word (a collision only widens that first cut: the exact ``source`` column is
    filtered too). Not weighed in the ranking.
    """
    return "s" + hashlib.sha256(source.encode()).hexdigest()[:24]


def create_search_index(conn: Connection) -> None:
    """The full-text index over ``memory_documents`` (which must exist)."""
    for statement in SEARCH_INDEX_DDL[conn.dialect.name]:
        conn.execute(text(statement))


def seed_rows(conn: Connection) -> None:
    """What migrations 0013, 0014 and 0016 make besides tables, for a database created whole."""
    from memory.rules import allow_memory_tools  # (not here: this module's tables are memory's)
    from memory.vectors import SQLITE_VECTORS_DDL

    create_search_index(conn)
    allow_memory_tools(conn)
    if conn.dialect.name == "sqlite":
        for statement in SQLITE_VECTORS_DDL:
            conn.execute(text(statement))


def documents_in_id_order(conn: Connection) -> None:
    """Taken before documents are inserted and before they are read past a mark, held to
    the commit: PostgreSQL gives an id at the insert, so a transaction still open with a
    lower id than one committed since would be passed by the embedder's mark and never
    embedded (until 2026-12-06). SQLite's writers go one at a time."""
    serialize(conn, "memory:documents")
