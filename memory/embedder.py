"""Embeds indexed documents in batches, after indexing rounds (a ``FollowUps`` job).

The watermark is per embedding model (``memory_embed_marks``): documents with ids up to
it have their vectors. A batch is read past the mark, sent in one request, and its vectors
and the moved mark commit in one transaction (a compare-and-set on the mark, so two
processes never store one batch twice). A failing request leaves the mark where it was and
is retried at the next round; after ``max_failures`` attempts the batch is skipped, logged,
and stays findable by full text. Changing the model (``EMBEDDING_MODEL``, or a provider
serving ``embeddings`` added or removed while the service runs) embeds everything again
under the new model's own mark; each batch is read, sent and stored under the model chosen
when it was read, and nothing embeds while nothing is chosen.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import Database
from memory.embeddings import ChosenEmbeddings, EmbeddingClient, EmbeddingError
from memory.marks import Marks
from memory.tables import documents_in_id_order, memory_documents, memory_embed_marks
from memory.vectors import Vectors

__all__ = ["Embedder", "EmbedderLimits"]

log = logging.getLogger(__name__)

#: Per embedding model, how far documents were embedded (``memory/marks.py``).
EMBED_MARKS = Marks(memory_embed_marks, "model", "last_document_id")


@dataclass(frozen=True, slots=True)
class EmbedderLimits:
    #: Documents per request (and per transaction).
    batch: int = 32
    max_failures: int = 3


@dataclass(frozen=True, slots=True)
class _Batch:
    after: int  # the mark it was read past
    documents: list[tuple[int, str, str]]  # (id, source, body)

    @property
    def last_id(self) -> int:
        return self.documents[-1][0]


class Embedder:
    def __init__(
        self,
        db: Database,
        client: EmbeddingClient | ChosenEmbeddings,
        vectors: Vectors,
        limits: EmbedderLimits | None = None,
    ) -> None:
        """``client``: one endpoint, or the one chosen now (asked again per batch)."""
        self._db = db
        self._client = client
        self._vectors = vectors
        self.limits = limits or EmbedderLimits()

    async def embed_pending(self) -> int:
        """Embed every document past the mark; return how many got vectors."""
        done = 0
        while True:
            client = self._client.current()
            if client is None:  # no endpoint chosen: nothing embeds
                return done
            model = client.model
            batch = await self._db.run(_read_batch, model, self.limits.batch)
            if batch is None:
                return done
            try:
                vectors = await client.embed([body for _, _, body in batch.documents])
            except EmbeddingError as exc:
                if not exc.retriable:  # an endpoint that is away is waited for, not counted
                    await self._failed(model, batch, exc)
                raise
            rows = [
                (doc_id, source, vector)
                for (doc_id, source, _), vector in zip(batch.documents, vectors, strict=True)
            ]
            done += await self._db.run(_store, self._vectors, model, batch, rows)

    async def _failed(self, model: str, batch: _Batch, exc: EmbeddingError) -> None:
        limit = self.limits.max_failures
        skipped = await self._db.run(EMBED_MARKS.fail, model, batch.after, batch.last_id, limit)
        if skipped:
            log.error(
                "memory: embedding documents %d..%d with %s failed %d times (%s); they are "
                "found by full text only",
                batch.documents[0][0],
                batch.last_id,
                model,
                limit,
                exc,
            )


def _read_batch(conn: Connection, model: str, size: int) -> _Batch | None:
    documents_in_id_order(conn)  # every document with a lower id is committed
    after = EMBED_MARKS.read(conn, model).at
    d = memory_documents
    rows = conn.execute(
        sa.select(d.c.id, d.c.source, d.c.body).where(d.c.id > after).order_by(d.c.id).limit(size)
    ).all()
    if not rows:
        return None
    return _Batch(after, [(int(r.id), r.source, r.body) for r in rows])


def _store(
    conn: Connection,
    vectors: Vectors,
    model: str,
    batch: _Batch,
    rows: list[tuple[int, str, list[float]]],
) -> int:
    """The batch's vectors stored and the mark moved past it; how many documents it
    passed (0: another process stored this batch meanwhile)."""
    # A document deleted while its batch was away (``/forget_me``) gets no vector, nor
    # does another stored since under its id (SQLite gives a deleted row's id again: the
    # vector of Ann's words went to Bob's, and a search in Ann's chat found his; found by
    # review on 2026-12-06): the row must still be what was embedded. The mark stops
    # before such another document, which the next batch embeds (it was passed over,
    # never embedded, until 2026-12-06).
    d = memory_documents
    embedded = {doc_id: (source, body) for doc_id, source, body in batch.documents}
    now = conn.execute(sa.select(d.c.id, d.c.source, d.c.body).where(d.c.id.in_(embedded)))
    current = {int(r.id): (r.source, r.body) for r in now}
    other = [doc_id for doc_id in current if current[doc_id] != embedded[doc_id]]
    through = min(other) - 1 if other else batch.last_id
    if not EMBED_MARKS.move(conn, model, batch.after, through):
        return 0
    vectors.write(
        conn,
        model,
        [row for row in rows if row[0] <= through and current.get(row[0]) == embedded[row[0]]],
    )
    return sum(1 for doc_id, _, _ in batch.documents if doc_id <= through)
