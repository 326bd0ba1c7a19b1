"""Chinese and Japanese words findable: ``memory_documents.search_body`` (the body with
every CJK character a word of its own, ``memory.tables.searchable``), and the full-text
index over it. Until 2026-12-07 both parsers kept a run of CJK characters as one word, and
/search 东京 did not find "我们下周去东京旅游" (found by review).

The documents already indexed get their ``search_body`` here, and the index is made again
(SQLite: FTS5 rebuilt from its new content view; PostgreSQL: ``body_tsv`` computed again):
a pass over every document, once.
"""

import re

import sqlalchemy as sa
from alembic.operations import Operations

# As ``memory.tables`` has them on 2026-12-07 (a migration keeps its own copy, as history).
_CJK = (
    "\u3005-\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003ffff"
)
_CJK_EDGE = re.compile(f"(?<=[{_CJK}])(?=\\w)|(?<=\\w)(?=[{_CJK}])")
_WORD_BREAK = "\x1f"
#: Documents read per pass.
_BATCH = 1_000

_OLD_INDEX = {
    "sqlite": (
        "DROP TRIGGER memory_documents_ai",
        "DROP TRIGGER memory_documents_ad",
        "DROP TABLE memory_fts",
    ),
    "postgresql": ("ALTER TABLE memory_documents DROP COLUMN body_tsv",),  # and its index
}
_SEARCH_INDEX = {
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
        "ALTER TABLE memory_documents ADD COLUMN body_tsv tsvector "
        "GENERATED ALWAYS AS (setweight(to_tsvector('english', COALESCE(search_body, body)), "
        "'A') || setweight(to_tsvector('simple', scope), 'D')) STORED",
        "CREATE INDEX ix_memory_documents_fts ON memory_documents USING gin (body_tsv)",
    ),
}


def upgrade(op: Operations) -> None:
    conn = op.get_bind()
    dialect = conn.dialect.name
    # The old index first: SQLite's has no update trigger, and PostgreSQL would compute
    # every updated row's vector twice.
    for statement in _OLD_INDEX[dialect]:
        conn.execute(sa.text(statement))
    op.add_column("memory_documents", sa.Column("search_body", sa.Text))
    filled = _fill(conn)
    for statement in _SEARCH_INDEX[dialect]:
        conn.execute(sa.text(statement))
    if dialect == "sqlite" and filled:  # (an empty index stays as a new one is made)
        conn.execute(sa.text("INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')"))


def _fill(conn: sa.Connection) -> bool:
    """``search_body`` for every document with Chinese or Japanese in it; whether there
    are documents."""
    documents = sa.table(
        "memory_documents", sa.column("id"), sa.column("body"), sa.column("search_body")
    )
    update = (
        documents.update()
        .where(documents.c.id == sa.bindparam("doc_id"))
        .values(search_body=sa.bindparam("marked"))
    )
    after = 0
    while True:
        rows = conn.execute(
            sa.select(documents.c.id, documents.c.body)
            .where(documents.c.id > after)
            .order_by(documents.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            return after > 0
        after = rows[-1].id
        changed = []
        for row in rows:
            marked = _CJK_EDGE.sub(_WORD_BREAK, row.body)
            if marked != row.body:
                changed.append({"doc_id": row.id, "marked": marked})
        if changed:
            conn.execute(update, changed)
