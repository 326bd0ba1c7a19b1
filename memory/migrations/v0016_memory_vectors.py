"""Semantic recall: the embedding watermarks, and on SQLite the vectors' table.

On PostgreSQL the vectors need the pgvector extension, which this migration does not
require: ``memory/vectors.py`` creates their table at start-up where it is available.
"""

import sqlalchemy as sa
from alembic.operations import Operations

from engine.store import Id, UtcDateTime

_SQLITE_VECTORS = (
    "CREATE TABLE memory_vectors ("
    "document_id INTEGER NOT NULL REFERENCES memory_documents (id) ON DELETE CASCADE, "
    "model VARCHAR(255) NOT NULL, source VARCHAR(255) NOT NULL, dims INTEGER NOT NULL, "
    "vector BLOB NOT NULL, PRIMARY KEY (document_id, model))",
    "CREATE INDEX ix_memory_vectors_source ON memory_vectors (source, model)",
)


def upgrade(op: Operations) -> None:
    op.create_table(
        "memory_embed_marks",
        sa.Column("model", sa.String(255), primary_key=True),
        sa.Column("last_document_id", Id, nullable=False, server_default="0"),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        for statement in _SQLITE_VECTORS:
            conn.execute(sa.text(statement))
