"""The whole loop, wired as ``chathub serve`` wires it: a person says something lasting,
the deriver (its own model, after indexing) stores it as a fact, and their next turn's
request carries it; the other person's never does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from engine.llm.scripted import ScriptedModel, text
from engine.llm.types import LlmResponse, Message
from engine.store import Store
from tests.fakes.openai_server import FakeOpenAIServer
from tests.memory.conftest import MEMORY_LAYERS
from tests.memory.test_isolation import ANN, BOB, Chat, open_chat, profile_of, said_by


@pytest.fixture
def deriver_model() -> ScriptedModel:
    return ScriptedModel(name="memory-model")


def _message_id(content: object, said: str) -> int | None:
    """The id the deriver's prompt (JSON data) gives the message ``said``."""
    if isinstance(content, dict):
        if content.get("text") == said and isinstance(content.get("message_id"), int):
            return content["message_id"]
        content = list(content.values())
    if isinstance(content, list):
        for item in content:
            if (found := _message_id(item, said)) is not None:
                return found
    return None


def add_fact_citing(said: str, fact: str) -> Callable[[Sequence[Message]], LlmResponse]:
    def answer(messages: Sequence[Message]) -> LlmResponse:
        [ids] = [
            found
            for m in messages
            if m["role"] == "user"
            and (found := _message_id(json.loads(str(m["content"])), said)) is not None
        ]
        return text(json.dumps({"operations": [{"op": "add", "fact": fact, "message_ids": [ids]}]}))

    return answer


@pytest.fixture
async def chat(
    store_url: str, tmp_path: Path, fake_openai: FakeOpenAIServer, deriver_model: ScriptedModel
) -> AsyncIterator[Chat]:
    async with open_chat(store_url, tmp_path, fake_openai, lambda: [deriver_model]) as chat:
        yield chat


async def test_what_a_person_said_reaches_their_next_turn_as_a_fact(
    chat: Chat, deriver_model: ScriptedModel
) -> None:
    fake = chat.fake
    fake.reply_text("Noted.")
    deriver_model.add(add_fact_citing("I'm vegetarian.", "Is vegetarian."))
    await chat.turn(f"telegram:{ANN}", "I'm vegetarian.", said_by(ANN, "Ann"))
    await chat.memory.followed_up()  # the deriver ran after the indexing round
    assert deriver_model.pending == 0
    user_id = await chat.memory.user_of(f"telegram:{ANN}")
    assert user_id is not None
    [fact] = await chat.memory.facts.list(user_id)
    assert (fact.body, fact.created_by, fact.origin_source) == (
        "Is vegetarian.",
        "deriver",
        f"telegram:{ANN}",
    )

    fake.reply_text("Risotto.")
    [ann_next] = await chat.turn(f"telegram:{ANN}", "Dinner idea?", said_by(ANN, "Ann", 2))
    assert profile_of(ann_next) == ["Is vegetarian."]

    fake.reply_text("Steak.")
    [bob_turn] = await chat.turn(f"telegram:{BOB}", "Dinner idea?", said_by(BOB, "Bob"))
    assert profile_of(bob_turn) is None
    assert "vegetarian" not in json.dumps(bob_turn)


async def test_a_session_that_can_never_be_indexed_holds_back_no_ones_facts(
    store_url: str, tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """Its round failed, and the follow-ups (the facts, the embeddings) were woken only by
    a round that did not: until a restart nobody learned anything (found by review on
    2026-12-07)."""
    room = "telegram:-100999"
    store = await Store.open(store_url, MEMORY_LAYERS)
    broken = (await store.sessions.for_source(room)).id
    await store.close()
    deriver = ScriptedModel(name="memory-model")
    async with open_chat(store_url, tmp_path, fake_openai, lambda: [deriver]) as chat:
        index_session = chat.memory.indexer.index_session

        async def failing_for_one(session_id: int) -> int:
            if session_id == broken:  # rows no database takes, say
                raise RuntimeError("this session's rows cannot be written")
            return await index_session(session_id)

        chat.memory.indexer.index_session = failing_for_one  # type: ignore[method-assign]
        await chat.memory.followed_up()
        fake_openai.reply_text("Hello.")
        await chat.turn(room, "hello")  # its round fails: every later one catches up
        fake_openai.reply_text("Noted.")
        deriver.add(add_fact_citing("I'm vegetarian.", "Is vegetarian."))
        await chat.turn(f"telegram:{ANN}", "I'm vegetarian.", said_by(ANN, "Ann"))
        await chat.memory.followed_up()

        user_id = await chat.memory.user_of(f"telegram:{ANN}")
        assert user_id is not None
        assert [f.body for f in await chat.memory.facts.list(user_id)] == ["Is vegetarian."]
