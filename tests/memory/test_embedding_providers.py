"""Memory's embeddings follow the provider registry, over real HTTP: a provider serving
``embeddings`` added while the service runs embeds the next request (its key, its model)
and everything again under its model in the background; removed, ``EMBEDDING_*`` (or
nobody) embeds again; vectors of another model are never compared with a query's; no key
in a log line or a repr. Two fake OpenAI-compatible servers: the settings' and the
provider's, each refusing any other key."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from engine.bus import ChatEventBus, JobCompleted, SystemEventBus
from engine.bus.broadcast import DEFAULT_CAPACITY
from engine.store import Store
from memory.embedder import Embedder
from memory.embeddings import ChosenEmbeddings, EmbeddingChoice, EmbeddingConfig
from memory.indexer import Indexer
from memory.search import Search, Semantic
from memory.service import MemoryService
from memory.vectors import detect
from providers import Provider, ProviderRegistry, ProviderStore
from tests.fakes.openai_server import FakeOpenAIServer
from tests.memory.conftest import MEMORY_LAYERS, write_history
from tests.pg import migrated_sqlite

SOURCE = "telegram:42"
SETTINGS_KEY = "sk-settings-embed-key-1234567"
KEY = "sk-provider-embed-key-7654321"
NEEDLE = "we booked the hotel near Alfama in Lisbon"
PARAPHRASE = "accommodation in portugal"  # no word shared: found by meaning only


@pytest.fixture(scope="module")
def _remote_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def remote(_remote_server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    """The provider's server: answers only its own key."""
    _remote_server.reset()
    _remote_server.api_key = KEY
    yield _remote_server
    _remote_server.reset()


@pytest.fixture
def settings_server(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    """``EMBEDDING_BASE_URL``'s server: answers only ``EMBEDDING_API_KEY``."""
    fake_openai.api_key = SETTINGS_KEY
    return fake_openai


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """SQLite: always a place for vectors (PostgreSQL here has no pgvector)."""
    store = await Store.open(migrated_sqlite(tmp_path / "chathub.db"), MEMORY_LAYERS)
    yield store
    await store.close()


@pytest.fixture
def bus() -> SystemEventBus:
    return SystemEventBus()


@pytest.fixture
async def registry(store: Store, bus: SystemEventBus) -> ProviderRegistry:
    registry = ProviderRegistry(ProviderStore(store.db), bus)
    await registry.load()
    return registry


def configured(server: FakeOpenAIServer) -> EmbeddingConfig:
    return EmbeddingConfig("settings-embed", server.base_url, SETTINGS_KEY, timeout_s=5)


def remote_provider(server: FakeOpenAIServer, models: str = "remote-embed") -> Provider:
    return Provider.checked("remote", server.base_url, KEY, "chat, embeddings", models)


@asynccontextmanager
async def running(
    store: Store, choice: EmbeddingChoice, bus: SystemEventBus
) -> AsyncIterator[MemoryService]:
    """The memory service wired as ``chathub serve`` wires it: the choice follows the bus."""
    following = asyncio.create_task(choice.follow(bus))
    await asyncio.sleep(0)  # subscribed
    memory = MemoryService(store.db, ChatEventBus(), embeddings=choice)
    await memory.start()
    try:
        yield memory
    finally:
        await memory.close()
        following.cancel()


async def said(store: Store, memory: MemoryService | None, *texts: str) -> None:
    """``texts`` said in ``SOURCE`` and indexed; with ``memory``, followed up (embedded)."""
    session = await store.sessions.create(SOURCE, title="trip")
    await write_history(store, session.id, [("user", text) for text in texts])
    if memory is None:
        await Indexer(store.db).catch_up()
        return
    await memory.indexer.catch_up()
    memory.followups.wake()
    await memory.followed_up()


async def found(memory: MemoryService | Search, query: str = PARAPHRASE) -> list[str]:
    search = memory.search if isinstance(memory, MemoryService) else memory
    return [hit.snippet for hit in await search.sessions(SOURCE, query)]


def models_asked(server: FakeOpenAIServer) -> list[str]:
    return [request["model"] for request in server.embedding_requests]


def texts_sent(server: FakeOpenAIServer) -> list[str]:
    return [text for request in server.embedding_requests for text in request["input"]]


async def count_vectors(store: Store) -> dict[str, int]:
    def count(conn: sa.Connection) -> dict[str, int]:
        query = sa.text("SELECT model, count(*) FROM memory_vectors GROUP BY model")
        return {str(model): int(n) for model, n in conn.execute(query)}

    return await store.db.run(count)


async def eventually(predicate, within_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not predicate():
        assert loop.time() < deadline, "not in time"
        await asyncio.sleep(0.01)


async def test_a_provider_added_embeds_the_next_request_and_removed_gives_back_the_settings(
    store: Store,
    registry: ProviderRegistry,
    bus: SystemEventBus,
    settings_server: FakeOpenAIServer,
    remote: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    choice = EmbeddingChoice(configured(settings_server), registry)
    async with running(store, choice, bus) as memory:
        await said(store, memory, NEEDLE, "groceries: milk and bread")
        assert models_asked(settings_server) == ["settings-embed"]
        assert any(NEEDLE in s for s in await found(memory))
        assert models_asked(settings_server)[-1] == "settings-embed"  # the query

        # Added while running (as POST /api/providers does): on the bus at once.
        await registry.add(remote_provider(remote))
        await eventually(lambda: choice.endpoint().origin == "remote")
        await memory.followed_up()  # woken by the change: everything embedded again
        assert models_asked(remote) == ["remote-embed"]
        assert set(texts_sent(remote)) == {NEEDLE, "groceries: milk and bread"}
        assert await count_vectors(store) == {"settings-embed": 2, "remote-embed": 2}

        asked_settings = len(settings_server.embedding_requests)
        assert any(NEEDLE in s for s in await found(memory))
        assert remote.embedding_requests[-1] == {"model": "remote-embed", "input": [PARAPHRASE]}
        assert len(settings_server.embedding_requests) == asked_settings  # not asked

        await registry.remove("remote")
        await eventually(lambda: choice.endpoint().origin == "EMBEDDING_MODEL")
        await memory.followed_up()  # settings-embed's mark holds: nothing embedded again
        asked_remote = len(remote.embedding_requests)
        assert any(NEEDLE in s for s in await found(memory))
        assert settings_server.embedding_requests[asked_settings:] == [
            {"model": "settings-embed", "input": [PARAPHRASE]}
        ]
        assert len(remote.embedding_requests) == asked_remote
    # Each server answers its own key only: every request above carried the right one.
    assert KEY not in caplog.text and SETTINGS_KEY not in caplog.text
    assert "embeddings now: Endpoint(" in caplog.text


async def test_without_embeddings_memory_is_full_text_until_a_provider_serves_them(
    store: Store,
    registry: ProviderRegistry,
    bus: SystemEventBus,
    fake_openai: FakeOpenAIServer,
    remote: FakeOpenAIServer,
) -> None:
    choice = EmbeddingChoice(None, registry)  # no EMBEDDING_MODEL
    async with running(store, choice, bus) as memory:
        assert memory.search.semantic is None and "embedding" not in memory.followups.names
        await said(store, memory, NEEDLE)
        assert await found(memory) == []  # full text: no word shared
        assert any("[hotel]" in s for s in await found(memory, "which hotel"))

        await registry.add(remote_provider(remote, models=""))  # lists none, no model asked
        await asyncio.sleep(0.05)
        assert choice.endpoint() is None and memory.search.semantic is None

        await registry.remove("remote")
        await registry.add(remote_provider(remote))
        await eventually(lambda: memory.search.semantic is not None)
        await memory.followed_up()  # what was said before is embedded, no message needed
        assert texts_sent(remote) == [NEEDLE]
        assert any(NEEDLE in s for s in await found(memory))

        await registry.remove("remote")
        await eventually(lambda: choice.endpoint() is None)
        asked = len(remote.embedding_requests)
        assert await found(memory) == []  # full text again
        await said(store, memory, "the flight to Tokyo leaves at nine")
        assert len(remote.embedding_requests) == asked  # nobody embeds
    assert fake_openai.embedding_requests == []


async def test_a_lagging_follower_sends_the_next_request_to_the_right_provider(
    store: Store,
    registry: ProviderRegistry,
    bus: SystemEventBus,
    settings_server: FakeOpenAIServer,
    remote: FakeOpenAIServer,
) -> None:
    """The announcement lost in a flood: the choice's subscription lagged, and it chose
    again for the lag; the next query goes to the provider."""
    choice = EmbeddingChoice(configured(settings_server), registry)
    async with running(store, choice, bus) as memory:
        await said(store, memory, NEEDLE)
        await registry.store.add(remote_provider(remote))
        await registry.load()  # the snapshot changed; nothing announced it
        for n in range(DEFAULT_CAPACITY + 10):
            bus.publish(JobCompleted(n, n, "ok"))
        await eventually(lambda: choice.endpoint().origin == "remote")
        await memory.followed_up()
        assert any(NEEDLE in s for s in await found(memory))
        assert remote.embedding_requests[-1] == {"model": "remote-embed", "input": [PARAPHRASE]}


async def test_vectors_of_another_model_are_never_compared_with_the_query(
    store: Store,
    registry: ProviderRegistry,
    settings_server: FakeOpenAIServer,
    remote: FakeOpenAIServer,
) -> None:
    """The fake answers the same vector for a text whatever the model: only the model
    column keeps the settings' vectors from the provider's query."""
    await said(store, None, NEEDLE)
    vectors = await detect(store.db)
    assert vectors is not None
    choice = EmbeddingChoice(configured(settings_server), registry)
    async with httpx.AsyncClient() as http:
        client = ChosenEmbeddings(choice, http)
        embedder = Embedder(store.db, client, vectors)
        search = Search(store.db, Semantic(client, vectors))
        assert await embedder.embed_pending() == 1
        assert any(NEEDLE in s for s in await found(search))

        await registry.add(remote_provider(remote))
        choice.choose_again()  # nothing embedded under remote-embed yet
        assert await found(search) == []
        assert remote.embedding_requests[-1] == {"model": "remote-embed", "input": [PARAPHRASE]}

        assert await embedder.embed_pending() == 1  # embedded again, in the background
        assert any(NEEDLE in s for s in await found(search))
        assert await count_vectors(store) == {"settings-embed": 1, "remote-embed": 1}
        assert KEY not in repr(client) and KEY not in repr(client.current())
        assert KEY not in repr(client.current().config)  # type: ignore[union-attr]


async def test_a_provider_listing_the_configured_model_keeps_its_vectors(
    store: Store,
    registry: ProviderRegistry,
    settings_server: FakeOpenAIServer,
    remote: FakeOpenAIServer,
) -> None:
    """Vectors are the model's, whoever serves it: a provider of the configured model
    embeds nothing again."""
    await said(store, None, NEEDLE)
    vectors = await detect(store.db)
    assert vectors is not None
    choice = EmbeddingChoice(configured(settings_server), registry)
    async with httpx.AsyncClient() as http:
        client = ChosenEmbeddings(choice, http)
        embedder = Embedder(store.db, client, vectors)
        assert await embedder.embed_pending() == 1
        await registry.add(remote_provider(remote, models="bge-m3, settings-embed"))
        choice.choose_again()
        assert (choice.endpoint().origin, choice.endpoint().model) == ("remote", "settings-embed")
        assert await embedder.embed_pending() == 0
        assert any(NEEDLE in s for s in await found(Search(store.db, Semantic(client, vectors))))
        assert remote.embedding_requests == [{"model": "settings-embed", "input": [PARAPHRASE]}]


async def test_a_refused_key_is_one_sentence_and_never_logged(
    store: Store,
    registry: ProviderRegistry,
    bus: SystemEventBus,
    remote: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    remote.api_key = "sk-the-key-the-server-wants"
    choice = EmbeddingChoice(None, registry)
    async with running(store, choice, bus) as memory:
        await registry.add(remote_provider(remote))
        await eventually(lambda: memory.search.semantic is not None)
        await said(store, memory, NEEDLE)
        assert any("[hotel]" in s for s in await found(memory, "which hotel"))  # full text
    assert "refused its key (HTTP 401)" in caplog.text
    assert "searching by full text only" in caplog.text
    assert KEY not in caplog.text


async def test_chathub_serve_follows_a_provider_added_by_another_process(
    tmp_path: Path, settings_server: FakeOpenAIServer, remote: FakeOpenAIServer
) -> None:
    """``chathub serve`` wires it (bot/serve.py), and a change made by another process
    (``chathub providers add`` in a shell) reaches it through the registry's watch."""
    from bot.schema import LAYERS
    from bot.serve import Service
    from engine.llm.registry import ModelRegistry
    from engine.store import open_database
    from tests.bot.telegram_contract.conftest import app_config
    from tests.engine.hub.conftest import EchoModel

    url = migrated_sqlite(tmp_path / "chathub.db")
    config = app_config(
        url,
        tmp_path / "workspace",
        embedding_model="settings-embed",
        embedding_base_url=settings_server.base_url,
        embedding_api_key=SETTINGS_KEY,
    )
    service = Service(
        config,
        models=ModelRegistry([EchoModel(name="primary")]),
        http=False,
        providers_watch_s=0.05,
    )
    await service.start()
    shell_db = await open_database(url, LAYERS)
    try:
        memory, engine = service.memory, service.engine
        assert memory is not None and engine is not None
        await said(engine.store, memory, NEEDLE)
        assert models_asked(settings_server) == ["settings-embed"]

        shell = ProviderRegistry(ProviderStore(shell_db), SystemEventBus())
        await shell.load()
        await shell.add(remote_provider(remote))
        await eventually(lambda: len(remote.embedding_requests) > 0)  # within the watch
        await memory.followed_up()
        assert texts_sent(remote) == [NEEDLE]
        assert any(NEEDLE in s for s in await found(memory))
        assert remote.embedding_requests[-1] == {"model": "remote-embed", "input": [PARAPHRASE]}

        await shell.remove("remote")
        asked = len(settings_server.embedding_requests)
        await eventually(lambda: found_by(memory) == "EMBEDDING_MODEL")
        assert any(NEEDLE in s for s in await found(memory))
        assert settings_server.embedding_requests[asked:] == [
            {"model": "settings-embed", "input": [PARAPHRASE]}
        ]
    finally:
        await shell_db.close()
        await service.stop()


def found_by(memory: MemoryService) -> str | None:
    """Where ``memory``'s next embedding request goes (the chosen endpoint's origin)."""
    semantic = memory.search.semantic
    assert semantic is not None and isinstance(semantic.client, ChosenEmbeddings)
    endpoint = semantic.client.choice.endpoint()
    return None if endpoint is None else endpoint.origin
