"""The embedder waits for an embeddings endpoint that refuses whatever batch it is sent,
or cannot be reached, rather than counting it against the batch: three rounds of it
skipped the batch for good and its documents were never embedded (found by meaning; found
by review on 2026-12-07)."""

from __future__ import annotations

import httpx
import pytest

from engine.store import Store
from memory.embedder import Embedder
from memory.embeddings import EmbeddingClient, EmbeddingConfig, EmbeddingError
from memory.indexer import Indexer
from memory.vectors import Vectors, detect
from tests.engine.llm.blackhole import blackhole
from tests.fakes.openai_server import FakeOpenAIServer
from tests.memory import test_semantic
from tests.memory.conftest import write_history
from tests.memory.test_semantic import MODEL, client_for, raw

# The semantic tests' fixtures, asked for by name.
http, sqlite_store = test_semantic.http, test_semantic.sqlite_store


async def _one_document(store: Store) -> Vectors:
    session = await store.sessions.create("telegram:1")
    await write_history(store, session.id, [("user", "the hotel near Alfama")])
    await Indexer(store.db).catch_up()
    vectors = await detect(store.db)
    assert vectors is not None
    return vectors


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (402, '{"detail": "Insufficient balance"}'),
        (
            400,
            '{"error": {"message": "API key not valid.", "status": "INVALID_ARGUMENT", '
            '"details": [{"reason": "API_KEY_INVALID"}]}}',
        ),
    ],
    ids=["402-credit-run-out", "400-gemini-key-invalid"],
)
async def test_an_account_out_of_credit_or_a_refused_key_is_waited_for_not_counted(
    sqlite_store: Store,
    fake_openai: FakeOpenAIServer,
    http: httpx.AsyncClient,
    status: int,
    body: str,
) -> None:
    """Until 2026-12-07 an HTTP 402 (Jina's "insufficient balance", OpenRouter's credits)
    and Gemini's 400 API_KEY_INVALID counted against the batch, as a 401 did before."""
    vectors = await _one_document(sqlite_store)
    for _ in range(3):
        fake_openai.embedding_failures.append(raw(body, status=status))
        with pytest.raises(EmbeddingError) as caught:
            await Embedder(sqlite_store.db, client_for(fake_openai, http), vectors).embed_pending()
        assert caught.value.retriable
        assert "API key not valid" not in str(caught.value)  # a body may quote the key
    # Credit topped up / key mended: the document gets its vector.
    embedder = Embedder(sqlite_store.db, client_for(fake_openai, http), vectors)
    assert await embedder.embed_pending() == 1, (
        f"three rounds of HTTP {status} skipped the batch for good"
    )


async def test_an_endpoint_host_that_drops_packets_is_waited_for_not_counted(
    sqlite_store: Store, fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    """A host switched off times out connecting: nothing was sent. Until 2026-12-07 that
    was counted like a slow answer to the batch."""
    vectors = await _one_document(sqlite_store)
    with blackhole() as url:
        off = EmbeddingClient(EmbeddingConfig(MODEL, url, timeout_s=0.5), http)
        for _ in range(3):
            with pytest.raises(EmbeddingError, match="cannot reach") as caught:
                await Embedder(sqlite_store.db, off, vectors).embed_pending()
            assert caught.value.retriable
    embedder = Embedder(sqlite_store.db, client_for(fake_openai, http), vectors)
    assert await embedder.embed_pending() == 1, "three connect timeouts skipped the batch"
