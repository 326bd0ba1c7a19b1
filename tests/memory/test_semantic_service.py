"""Semantic recall wired as ``chathub serve`` wires it: the memory service embeds what is
indexed in its background follow-ups, ``search_sessions`` finds by meaning within the
asking person's own conversations, a stuck embeddings endpoint holds up no turn, and a
PostgreSQL without pgvector searches by full text."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memory.embeddings import EmbeddingConfig
from memory.settings import MemorySettings, embedding_config
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply
from tests.memory.test_isolation import ANN, BOB, Chat, open_chat, said_by, tool_results

MODEL = "fake-embed"


@pytest.fixture
async def chat(
    store_url: str, tmp_path: Path, fake_openai: FakeOpenAIServer
) -> AsyncIterator[Chat]:
    config = EmbeddingConfig(MODEL, fake_openai.base_url, timeout_s=5)
    async with open_chat(store_url, tmp_path, fake_openai, embeddings=config) as chat:
        yield chat


async def test_each_persons_search_finds_their_own_past_by_meaning(
    chat: Chat, backend: str
) -> None:
    chat.fake.reply_text("noted")
    chat.fake.reply_text("noted")
    await chat.turn(
        f"telegram:{ANN}", "the combination for my bike lock is 4711", said_by(ANN, "Ann")
    )
    await chat.turn(f"telegram:{BOB}", "my bicycle padlock pin is 9090", said_by(BOB, "Bob"))
    await chat.memory.followed_up()  # embedded in the background

    chat.fake.reply_tool_calls(("c1", "search_sessions", {"query": "padlock pin"}))
    chat.fake.reply_text("it is 4711")
    asked, after_search = await chat.turn(
        f"telegram:{ANN}", "what opens my padlock?", said_by(ANN, "Ann", 2)
    )
    [found] = tool_results(after_search)
    snippets = [hit["snippet"] for hit in found["results"]]
    if backend == "postgresql":  # no pgvector here: full text, which shares no word with it
        assert chat.memory.search.semantic is None
        assert snippets == []
    else:
        assert chat.memory.search.semantic is not None
        assert any("4711" in s for s in snippets), snippets
    assert "9090" not in json.dumps(asked) and "9090" not in json.dumps(after_search)
    embedded = [t for r in chat.fake.embedding_requests for t in r["input"]]
    if backend == "sqlite":
        assert "padlock pin" in embedded  # the query
        assert any("9090" in t for t in embedded)  # Bob's message has its vector too
    else:
        assert embedded == []


async def test_a_stuck_embeddings_endpoint_holds_up_no_turn(chat: Chat, backend: str) -> None:
    if backend == "postgresql":
        pytest.skip("no vectors without pgvector: nothing is embedded")
    chat.fake.embedding_failures.extend(ScriptedReply(kind="hang") for _ in range(3))
    for n in range(3):
        chat.fake.reply_text(f"answer {n}")
    for n in range(3):  # each turn answers while the follow-up's request hangs
        await chat.turn(f"telegram:{ANN}", f"message {n}", said_by(ANN, "Ann", n + 1))
    assert len(chat.fake.embedding_requests) == 1  # one request, still hanging
    assert len(chat.fake.requests) == 3


async def test_postgresql_without_pgvector_says_so_once(
    store_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAIServer,
    backend: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite always has a place for vectors")
    config = EmbeddingConfig(MODEL, fake_openai.base_url)
    with caplog.at_level(logging.WARNING, logger="memory.service"):
        async with open_chat(store_url, tmp_path, fake_openai, embeddings=config) as chat:
            assert chat.memory.search.semantic is None
            assert "embedding" not in chat.memory.followups.names
    assert caplog.text.count("no pgvector extension") == 1


class _Settings(MemorySettings):
    llm_base_url: str = "http://llm.example/v1"
    llm_api_key: str = "sk-llm"


def test_embedding_settings_default_to_the_model_server() -> None:
    assert embedding_config(_Settings(_env_file=None)) is None
    assert embedding_config(_Settings(embedding_model="  ", _env_file=None)) is None
    config = embedding_config(_Settings(embedding_model="nomic-embed-text", _env_file=None))
    assert config == EmbeddingConfig("nomic-embed-text", "http://llm.example/v1", "sk-llm")
    own = embedding_config(
        _Settings(
            embedding_model="text-embedding-3-small",
            embedding_base_url="https://api.openai.com/v1",
            embedding_api_key="sk-embed",
            embedding_timeout_seconds=5,
            _env_file=None,
        )
    )
    assert own == EmbeddingConfig(
        "text-embedding-3-small", "https://api.openai.com/v1", "sk-embed", 5
    )
    # As a copied .env.example writes them: empty is unset.
    copied = _Settings(
        embedding_model="m", embedding_base_url="", embedding_api_key="", _env_file=None
    )
    assert embedding_config(copied) == EmbeddingConfig("m", "http://llm.example/v1", "sk-llm")


@pytest.mark.parametrize(
    "bad",
    [
        {"embedding_batch": 0},
        {"embedding_batch": 10_000},
        {"embedding_timeout_seconds": 0},
        {"embedding_min_similarity": 2},
    ],
)
def test_bad_embedding_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        _Settings(_env_file=None, **bad)


async def test_close_cancels_a_hanging_embedding_request(chat: Chat, backend: str) -> None:
    if backend == "postgresql":
        pytest.skip("nothing is embedded without pgvector")
    chat.fake.embedding_failures.append(ScriptedReply(kind="hang"))
    chat.fake.reply_text("hi")
    await chat.turn(f"telegram:{ANN}", "hello", said_by(ANN, "Ann"))
    await asyncio.wait_for(chat.memory.close(), 5)
