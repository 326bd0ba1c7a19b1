"""Nobody's memory reaches another person's context, asserted on the exact requests the
fake model (an OpenAI-compatible server over HTTP) receives: through the hub, wired like
``chathub serve`` (memory service, its tools, its turn context)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.config import AppConfig, EngineConfig, HubConfig, ModelConfig, load_settings
from engine.core import Engine
from engine.hub import ChatHub, SendOptions
from engine.llm.protocols import ChatModel
from engine.session.events import Done, Error
from engine.session.turn.gate import AllowAll
from engine.store import SENDER_KEY, Store
from memory.embeddings import EmbeddingConfig
from memory.optouts import opted_out_in
from memory.profile import HEADING
from memory.service import MemoryService
from memory.tools import memory_tools
from memory.users import Identity
from tests.fakes.openai_server import FakeOpenAIServer
from tests.memory.conftest import MEMORY_LAYERS

ANN, BOB = "111", "222"
GROUP = "telegram:-100"


def said_by(user: str, name: str, message_id: int = 1) -> dict[str, Any]:
    """The metadata bot/telegram/dispatch/messages.py stores with a message."""
    return {"telegram_message_id": message_id, SENDER_KEY: {"id": user, "name": name}}


@dataclass
class Chat:
    """A hub with long-term memory over a real store, answering through ``fake``."""

    hub: ChatHub
    memory: MemoryService
    fake: FakeOpenAIServer
    sent: int = field(default=0)

    async def turn(
        self, source: str, text: str, metadata: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Send ``text`` and wait for the answer; the requests the model got for it. The
        memory service has indexed the turn when this returns."""
        events = self.hub.events(source)
        before = len(self.fake.requests)
        await self.hub.send_message(source, text, SendOptions(metadata=metadata))

        async def answered() -> None:
            while True:
                item = await events.recv()
                if isinstance(item.event, Done):
                    return
                if isinstance(item.event, Error):
                    raise AssertionError(item.event.message)

        await asyncio.wait_for(answered(), 10)
        events.close()
        await self.memory.settled()
        return self.fake.requests[before:]

    async def fact(self, user: str, body: str, origin: str) -> None:
        user_id = await self.memory.user_for(Identity("telegram", user))
        await self.memory.facts.add(user_id, body, origin_source=origin, created_by="user")


@contextlib.asynccontextmanager
async def open_chat(
    store_url: str,
    tmp_path: Path,
    fake: FakeOpenAIServer,
    deriver_models: Callable[[], Sequence[ChatModel]] | None = None,
    embeddings: EmbeddingConfig | None = None,
) -> AsyncIterator[Chat]:
    """A hub over ``store_url`` wired as bot/serve.py wires it (the fact deriver only with
    ``deriver_models``, semantic recall only with ``embeddings``), answering through ``fake``."""
    settings = load_settings(
        database_url=store_url,
        chathub_workspace=tmp_path / "workspace",
        chathub_timezone="UTC",
        _env_file=None,
    )
    config = AppConfig(
        settings=settings,
        models=(ModelConfig(name="primary", base_url=fake.base_url, timeout_s=10),),
        engine=EngineConfig(max_tool_rounds=4),
    )
    store = await Store.open(store_url, MEMORY_LAYERS)
    engine = await Engine.open(config, policy=AllowAll(), store=store)
    hub = ChatHub(engine, HubConfig())
    # bot/serve.py's wiring: the service starts before the hub, its tools and turn context.
    memory = MemoryService(
        engine.store.db, engine.bus, models=deriver_models, embeddings=embeddings
    )
    await memory.start()
    for tool in memory_tools(engine.store, memory):
        engine.tools.register(tool)
    hub.add_turn_context(memory.turn_context)
    await hub.start()
    try:
        yield Chat(hub, memory, fake)
    finally:
        await hub.close()
        await memory.close()
        await engine.close()


@pytest.fixture
async def chat(
    store_url: str, tmp_path: Path, fake_openai: FakeOpenAIServer
) -> AsyncIterator[Chat]:
    async with open_chat(store_url, tmp_path, fake_openai) as chat:
        yield chat


def tail(request: dict[str, Any]) -> str:
    """The dynamic system content: the last message, after the history."""
    last = request["messages"][-1]
    assert last["role"] == "system"
    return last["content"]


def profile_of(request: dict[str, Any]) -> list[str] | None:
    """The facts of the profile in ``request``'s dynamic tail; None without one."""
    text = tail(request)
    if not text.startswith(HEADING):
        assert HEADING not in json.dumps(request)
        return None
    profile, _, rest = text.partition("\n\n")
    assert rest.startswith("Current date and time: ")  # the profile leads the tail
    return [json.loads(line.removeprefix("- ")) for line in profile.split("\n")[1:]]


def tool_results(request: dict[str, Any]) -> list[Any]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


async def test_each_persons_turn_carries_their_own_facts_and_never_the_others(
    chat: Chat,
) -> None:
    await chat.fact(ANN, "Ann is vegetarian", f"telegram:{ANN}")
    await chat.fact(BOB, "Bob is allergic to peanuts", f"telegram:{BOB}")
    for reply in ("hi Ann", "hi Bob", "hi again Ann", "hi again Bob"):
        chat.fake.reply_text(reply)

    [ann] = await chat.turn(f"telegram:{ANN}", "what should I cook?", said_by(ANN, "Ann"))
    [bob] = await chat.turn(f"telegram:{BOB}", "what should I cook?", said_by(BOB, "Bob"))
    [ann_again] = await chat.turn(f"telegram:{ANN}", "and tomorrow?")  # no sender: the chat's
    [bob_again] = await chat.turn(f"telegram:{BOB}", "and tomorrow?", said_by(BOB, "Bob"))

    for request in (ann, ann_again):
        assert profile_of(request) == ["Ann is vegetarian"]
        assert "peanuts" not in json.dumps(request)
    for request in (bob, bob_again):
        assert profile_of(request) == ["Bob is allergic to peanuts"]
        assert "vegetarian" not in json.dumps(request)


async def test_a_group_never_sees_what_its_members_said_in_private(chat: Chat) -> None:
    await chat.fact(ANN, "Ann is pregnant", f"telegram:{ANN}")
    await chat.fact(ANN, "Ann runs the book club", GROUP)
    await chat.fact(BOB, "Bob owes Ann money", f"telegram:{BOB}")
    for reply in ("noted", "welcome", "sure"):
        chat.fake.reply_text(reply)
    # Ann told the bot in private too: the search index has it.
    await chat.turn(f"telegram:{ANN}", "I'm pregnant, keep it between us", said_by(ANN, "Ann"))

    [ann_in_group] = await chat.turn(GROUP, "what's next for the club?", said_by(ANN, "Ann", 2))
    [bob_in_group] = await chat.turn(GROUP, "hello all", said_by(BOB, "Bob", 3))

    assert profile_of(ann_in_group) == ["Ann runs the book club"]
    assert profile_of(bob_in_group) is None  # Bob told the group nothing to remember
    for request in (ann_in_group, bob_in_group):
        text = json.dumps(request)
        assert "pregnant" not in text and "owes" not in text

    # Nor through the search tool: the group's search sees the group's past only.
    chat.fake.reply_tool_calls(("c1", "search_sessions", {"query": "pregnant between us"}))
    chat.fake.reply_text("nothing found")
    _, after_search = await chat.turn(GROUP, "did Ann say anything?", said_by(BOB, "Bob", 4))
    assert tool_results(after_search) == [{"results": []}]
    assert profile_of(after_search) is None
    shown = [m for m in after_search["messages"] if m["role"] != "assistant"]  # not the query
    assert "pregnant" not in json.dumps(shown)


async def test_the_static_prefix_is_byte_identical_while_the_profile_changes(
    chat: Chat,
) -> None:
    await chat.fact(ANN, "Ann lives in Porto", f"telegram:{ANN}")
    chat.fake.reply_text("Porto, nice")
    chat.fake.reply_text("Lisbon, nice")
    [first] = await chat.turn(f"telegram:{ANN}", "where do I live?", said_by(ANN, "Ann"))
    await chat.fact(ANN, "Ann moved to Lisbon", f"telegram:{ANN}")
    [second] = await chat.turn(f"telegram:{ANN}", "and now?", said_by(ANN, "Ann", 2))

    assert profile_of(first) == ["Ann lives in Porto"]
    assert profile_of(second) == ["Ann lives in Porto", "Ann moved to Lisbon"]
    before_tail = first["messages"][:-1]
    assert json.dumps(second["messages"][: len(before_tail)]) == json.dumps(before_tail)
    assert second["messages"][0]["role"] == "system"
    assert HEADING not in json.dumps(second["messages"][:-1])  # only in the tail


async def test_an_opted_out_conversation_gets_no_profile(chat: Chat) -> None:
    await chat.fact(ANN, "Ann is vegetarian", f"telegram:{ANN}")
    chat.fake.reply_text("one")
    chat.fake.reply_text("two")
    await chat.memory.set_opt_out(f"telegram:{ANN}", opted_out=True)
    [off] = await chat.turn(f"telegram:{ANN}", "what do I eat?", said_by(ANN, "Ann"))
    assert profile_of(off) is None
    assert tail(off).startswith("Current date and time: ")
    assert "vegetarian" not in json.dumps(off)
    await chat.memory.set_opt_out(f"telegram:{ANN}", opted_out=False)
    [on] = await chat.turn(f"telegram:{ANN}", "and now?", said_by(ANN, "Ann", 2))
    assert profile_of(on) == ["Ann is vegetarian"]


async def test_an_opt_out_of_a_group_covers_its_topics(chat: Chat) -> None:
    """``/memory off`` in a Telegram group (a Discord channel, a Matrix room) said memory
    was off, and its topics (threads) went on learning and showing the profile (found by
    review)."""
    group, topic = "telegram:-1001", "telegram:-1001:7"
    await chat.fact(ANN, "Ann is vegetarian", topic)
    chat.fake.reply_text("one")
    chat.fake.reply_text("two")
    await chat.memory.set_opt_out(group, opted_out=True)
    assert topic in chat.memory.optouts and "telegram:-10017" not in chat.memory.optouts
    assert await chat.hub.engine.store.db.run(opted_out_in, topic)  # the indexer's check
    [off] = await chat.turn(topic, "what do I eat?", said_by(ANN, "Ann"))
    assert profile_of(off) is None
    await chat.memory.set_opt_out(group, opted_out=False)
    assert not await chat.hub.engine.store.db.run(opted_out_in, topic)
    [on] = await chat.turn(topic, "and now?", said_by(ANN, "Ann", 2))
    assert profile_of(on) == ["Ann is vegetarian"]


async def test_each_persons_search_finds_their_own_past_and_never_the_others(
    chat: Chat,
) -> None:
    chat.fake.reply_text("noted")
    chat.fake.reply_text("noted")
    await chat.turn(f"telegram:{ANN}", "my gym locker code is 4711", said_by(ANN, "Ann"))
    await chat.turn(f"telegram:{BOB}", "my pool locker code is 9090", said_by(BOB, "Bob"))

    for user, name, own, other in ((ANN, "Ann", "4711", "9090"), (BOB, "Bob", "9090", "4711")):
        chat.fake.reply_tool_calls(("c1", "search_sessions", {"query": "locker code"}))
        chat.fake.reply_text(f"it is {own}")
        asked, after_search = await chat.turn(
            f"telegram:{user}", "what was my locker code?", said_by(user, name, 2)
        )
        [found] = tool_results(after_search)
        snippets = [hit["snippet"] for hit in found["results"]]
        assert any(own in s for s in snippets), snippets
        assert all(other not in s for s in snippets), snippets
        assert other not in json.dumps(asked) and other not in json.dumps(after_search)
