"""Where the documents' embedding vectors live, and the nearest ones to a query's.

One table, ``memory_vectors`` (a row per document and model, the source copied in so a
search is scoped without a join), behind three ways to rank it:

* ``sqlite-vec``: SQLite with the extension loaded (``engine/store/db.py`` loads it where
  the driver can); the distance is computed in SQL (``vec_distance_cosine``).
* ``numpy``: SQLite without it (CPython's ``sqlite3`` built without extension loading): the
  same float32 blobs, read for one source and ranked in Python. One source is one person's
  or one group's conversations, so the scan is bounded by what one chat says.
* ``pgvector``: PostgreSQL with the ``vector`` extension: ``<=>`` (cosine distance).

PostgreSQL without pgvector has no vectors: ``detect`` answers ``None`` and search stays
full-text. The SQLite table is migration 0016's; on PostgreSQL ``detect`` creates it, where
the extension is available, since an extension installed after the migrations ran must
still be found.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import Database, UtcDateTime

__all__ = ["SQLITE_VECTORS_DDL", "VectorKind", "Vectors", "detect", "from_blob", "to_blob"]

log = logging.getLogger(__name__)

VectorKind = Literal["sqlite-vec", "numpy", "pgvector"]

#: Migration 0016's table on SQLite (and ``seed_rows``' for a database created whole).
SQLITE_VECTORS_DDL: tuple[str, ...] = (
    "CREATE TABLE memory_vectors ("
    "document_id INTEGER NOT NULL REFERENCES memory_documents (id) ON DELETE CASCADE, "
    "model VARCHAR(255) NOT NULL, source VARCHAR(255) NOT NULL, dims INTEGER NOT NULL, "
    "vector BLOB NOT NULL, PRIMARY KEY (document_id, model))",
    "CREATE INDEX ix_memory_vectors_source ON memory_vectors (source, model)",
)

_PG_VECTORS_DDL: tuple[str, ...] = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    "CREATE TABLE IF NOT EXISTS memory_vectors ("
    "document_id BIGINT NOT NULL REFERENCES memory_documents (id) ON DELETE CASCADE, "
    "model VARCHAR(255) NOT NULL, source VARCHAR(255) NOT NULL, dims INTEGER NOT NULL, "
    "vector vector NOT NULL, PRIMARY KEY (document_id, model))",
    "CREATE INDEX IF NOT EXISTS ix_memory_vectors_source ON memory_vectors (source, model)",
)


def to_blob(vector: Sequence[float]) -> bytes:
    """Little-endian float32, sqlite-vec's own format."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


class Vectors:
    """Writes and ranks ``memory_vectors`` rows; make one with ``detect``."""

    def __init__(self, kind: VectorKind) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"Vectors({self.kind!r})"

    def write(
        self, conn: Connection, model: str, rows: Sequence[tuple[int, str, Sequence[float]]]
    ) -> None:
        """Store ``(document_id, source, vector)`` rows (a document already there: kept)."""
        if not rows:
            return
        if self.kind == "pgvector":
            value = "CAST(:vector AS vector)"
            params = [
                {"d": d, "m": model, "s": s, "n": len(v), "vector": _pg_literal(v)}
                for d, s, v in rows
            ]
            conflict = " ON CONFLICT DO NOTHING"
            verb = "INSERT"
        else:
            value = ":vector"
            params = [
                {"d": d, "m": model, "s": s, "n": len(v), "vector": to_blob(v)} for d, s, v in rows
            ]
            conflict = ""
            verb = "INSERT OR IGNORE"
        conn.execute(
            sa.text(
                f"{verb} INTO memory_vectors (document_id, model, source, dims, vector) "
                f"VALUES (:d, :m, :s, :n, {value}){conflict}"
            ),
            params,
        )

    def nearest(
        self,
        conn: Connection,
        source: str,
        model: str,
        query: Sequence[float],
        limit: int,
        since: datetime | None = None,
        *,
        min_similarity: float = -1.0,
    ) -> list[int]:
        """Ids of ``source``'s documents nearest to ``query`` (normalised), nearest first,
        none less similar than ``min_similarity`` (cosine)."""
        params: dict[str, object] = {
            "source": source,
            "model": model,
            "dims": len(query),
            "limit": limit,
            "max_distance": 1.0 - min_similarity,
        }
        where = "v.source = :source AND v.model = :model AND v.dims = :dims"
        if since is not None:
            where += " AND d.created_at >= :since"
            params["since"] = since
        join = "JOIN memory_documents d ON d.id = v.document_id " if since is not None else ""
        if self.kind == "numpy":
            return self._nearest_in_python(conn, where, join, params, query, min_similarity)
        if self.kind == "pgvector":
            params["query"] = _pg_literal(query)
            distance = "v.vector <=> CAST(:query AS vector)"
        else:
            params["query"] = to_blob(query)
            distance = "vec_distance_cosine(v.vector, :query)"
        # The distance computed once per row (in the inner query), filtered and ordered outside.
        statement = sa.text(
            f"SELECT document_id FROM (SELECT v.document_id, {distance} AS distance "
            f"FROM memory_vectors v {join}WHERE {where}) AS near "
            "WHERE distance <= :max_distance "
            "ORDER BY distance, document_id DESC LIMIT :limit"
        )
        if since is not None:
            statement = statement.bindparams(sa.bindparam("since", type_=UtcDateTime()))
        return [int(i) for i in conn.execute(statement, params).scalars()]

    @staticmethod
    def _nearest_in_python(
        conn: Connection,
        where: str,
        join: str,
        params: dict[str, object],
        query: Sequence[float],
        min_similarity: float,
    ) -> list[int]:
        limit = int(params["limit"])  # type: ignore[call-overload]
        statement = sa.text(
            f"SELECT v.document_id, v.vector FROM memory_vectors v {join}WHERE {where}"
        )
        if "since" in params:
            statement = statement.bindparams(sa.bindparam("since", type_=UtcDateTime()))
        rows = conn.execute(statement, params).all()
        if not rows:
            return []
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(
            len(rows), len(query)
        )
        scores = matrix @ np.asarray(query, dtype="<f4")  # normalised: the cosine
        # Best score first; among equals the newer document (as the other two rank).
        order = np.lexsort((-ids, -scores))[:limit]
        order = order[scores[order] >= min_similarity]
        return [int(i) for i in ids[order]]


async def detect(db: Database) -> Vectors | None:
    """How this database ranks vectors, or ``None`` when it cannot (PostgreSQL without
    pgvector)."""
    return await db.run(_detect)


def _detect(conn: Connection) -> Vectors | None:
    if conn.dialect.name == "postgresql":
        available = conn.execute(
            sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        ).first()
        if available is None:
            return None
        try:
            with conn.begin_nested():
                for statement in _PG_VECTORS_DDL:
                    conn.execute(sa.text(statement))
        except sa.exc.DBAPIError as exc:  # e.g. not allowed to create the extension
            log.warning("pgvector is installed but cannot be used (%s); full text only", exc)
            return None
        return Vectors("pgvector")
    try:
        with conn.begin_nested():
            conn.execute(sa.text("SELECT vec_version()"))
    except sa.exc.OperationalError:  # no such function: the extension is not loaded
        return Vectors("numpy")
    return Vectors("sqlite-vec")


def _pg_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"
