"""Memory: the searchable documents, their full-text index, per-session watermarks."""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import Id, UtcDateTime

_SEARCH_INDEX = {
    "sqlite": (
        "CREATE VIRTUAL TABLE memory_fts USING fts5(body, scope, content='memory_documents', "
        "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
        "CREATE TRIGGER memory_documents_ai AFTER INSERT ON memory_documents BEGIN "
        "INSERT INTO memory_fts(rowid, body, scope) VALUES (new.id, new.body, new.scope); END",
        "CREATE TRIGGER memory_documents_ad AFTER DELETE ON memory_documents BEGIN "
        "INSERT INTO memory_fts(memory_fts, rowid, body, scope) "
        "VALUES ('delete', old.id, old.body, old.scope); END",
    ),
    "postgresql": (
        # Stored, so ranking reads the vector instead of parsing every matching body again.
        "ALTER TABLE memory_documents ADD COLUMN body_tsv tsvector "
        "GENERATED ALWAYS AS (setweight(to_tsvector('english', body), 'A') || "
        "setweight(to_tsvector('simple', scope), 'D')) STORED",
        "CREATE INDEX ix_memory_documents_fts ON memory_documents USING gin (body_tsv)",
    ),
}


def upgrade(op: Operations) -> None:
    op.create_table(
        "memory_watermarks",
        sa.Column("session_id", Id, sa.ForeignKey("chat_sessions.id"), primary_key=True),
        sa.Column("last_message_id", Id, nullable=False, server_default="0"),
        sa.Column("last_summary_id", Id, nullable=False, server_default="0"),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "memory_documents",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("session_id", Id, sa.ForeignKey("chat_sessions.id"), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("scope", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("ref_id", Id, nullable=False),
        sa.Column("chunk", sa.Integer, nullable=False, server_default="0"),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.UniqueConstraint("kind", "ref_id", "chunk", name="uq_memory_documents_ref"),
        sa.CheckConstraint("kind IN ('message', 'summary')", name="ck_memory_documents_kind"),
    )
    op.create_index("ix_memory_documents_source", "memory_documents", ["source", "created_at"])
    conn = op.get_bind()
    for statement in _SEARCH_INDEX[conn.dialect.name]:
        conn.execute(sa.text(statement))
