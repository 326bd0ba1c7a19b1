"""``/search``, ``/memory`` and ``/forget_me`` in Telegram, against the fake Bot API.

The service (engine, hub, memory) runs as ``chathub serve`` builds it, without Telegram;
the adapter is built here with the service's memory and polls the fake like the real bot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.delivery import Outbound
from bot.platform.memory import MEMORY_OFF, NOT_YOURS
from bot.serve import Service
from bot.telegram.adapter import TelegramAdapter
from bot.telegram.bindings.factory import make_bot_api
from bot.telegram.config import TelegramConfig
from bot.telegram.dispatch.memory import BAD_BUTTON
from bot.telegram.inbound.poller import Poller
from bot.telegram.sending.api import BotApi
from bot.telegram.sending.delivery import TelegramClient
from bot.telegram.store import TelegramStore
from engine.llm.registry import ModelRegistry
from memory.profile import HEADING
from memory.service import MemoryService
from memory.users import Identity
from tests.bot.telegram.conftest import TOKEN
from tests.bot.telegram_contract.conftest import FAST, app_config, eventually
from tests.engine.hub.conftest import EchoModel
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage
from tests.pg import migrated_sqlite

ALICE, BOB, OWNER = 111, 222, 999
GROUP = -100_123
ALICE_SOURCE, GROUP_SOURCE = f"telegram:{ALICE}", f"telegram:{GROUP}"


@dataclass
class Bot:
    service: Service
    adapter: TelegramAdapter
    model: EchoModel

    @property
    def memory(self) -> MemoryService:
        assert self.service.memory is not None
        return self.service.memory

    async def user(self, telegram_id: int) -> int:
        return await self.memory.user_for(Identity("telegram", str(telegram_id)))


async def run_bot(
    tmp_path: Path, api: BotApi, fake: FakeTelegramServer, **settings: object
) -> AsyncIterator[Bot]:
    model = EchoModel(name="primary")
    config = app_config(migrated_sqlite(tmp_path / "chathub.db"), tmp_path / "ws", **settings)
    service = Service(config, models=ModelRegistry([model]), http=False)
    await service.start()
    assert service.hub is not None and service.engine is not None
    store = TelegramStore(service.engine.store.db)
    adapter = TelegramAdapter(
        service.hub,
        api,
        store,
        Outbound(TelegramClient(api), store.outbox, FAST),
        TelegramConfig(
            allowed_user_ids=frozenset({ALICE, BOB}),
            owner_id=OWNER,
            workspace=tmp_path / "ws",
        ),
        memory=service.memory,
    )
    await adapter.start()
    me = await api.get_me()
    adapter.bot_id, adapter.bot_username = me["id"], me["username"]
    polling = asyncio.create_task(Poller(api, store, adapter, max_backoff_s=0.05).run())
    try:
        yield Bot(service, adapter, model)
    finally:
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        await adapter.close()
        await service.stop()


@pytest.fixture
def fake() -> Iterator[FakeTelegramServer]:
    """A server per test: a long poll left over from another test would confirm (drop)
    this test's updates, whose ids start at 1 again."""
    with FakeTelegramServer() as server:
        yield server


@pytest.fixture(params=["ptb", "aiogram"])
async def api(request: pytest.FixtureRequest, fake: FakeTelegramServer) -> AsyncIterator[BotApi]:
    bot_api = make_bot_api(request.param, TOKEN, fake.base_url)
    try:
        yield bot_api
    finally:
        await bot_api.close()


@pytest.fixture
async def bot(tmp_path: Path, api: BotApi, fake: FakeTelegramServer) -> AsyncIterator[Bot]:
    async for running in run_bot(tmp_path, api, fake):
        yield running


def sent(fake: FakeTelegramServer, chat_id: int, needle: str) -> SentMessage | None:
    for message in fake.messages(chat_id):
        if needle in (message.text or ""):
            return message
    return None


def buttons(message: SentMessage) -> list[dict]:
    return [b for row in (message.reply_markup or {}).get("inline_keyboard", []) for b in row]


async def answer_to(fake: FakeTelegramServer, update: dict) -> str | None:
    """The text the callback query of ``update`` was answered with."""
    query_id = update["callback_query"]["id"]
    found = await eventually(
        lambda: [a for a in fake.callback_answers if a["callback_query_id"] == query_id]
    )
    return found[0].get("text")


async def test_memory_lists_the_facts_with_a_delete_button_each(bot, fake):
    alice = await bot.user(ALICE)
    tea = await bot.memory.facts.add(
        alice, "Likes green tea", origin_source=ALICE_SOURCE, created_by="user"
    )
    await bot.memory.facts.add(
        alice, "Lives in *Turin*", origin_source=GROUP_SOURCE, created_by="user"
    )
    fake.user_message(ALICE, ALICE, "/memory")
    panel = await eventually(lambda: sent(fake, ALICE, "What I remember"))
    # A private chat shows every fact, as plain text (a fact is never read as markup).
    assert "1. Likes green tea" in panel.text and "2. Lives in *Turin*" in panel.text
    assert not panel.entities
    data = [b["callback_data"] for b in buttons(panel)]
    assert data[0] == f"mm1:d:{ALICE}:{tea.id}:0" and len(data) == 2
    assert all(len(d.encode()) <= 64 for d in data)

    press = fake.callback(ALICE, ALICE, panel.message_id, data[0])
    assert await answer_to(fake, press) == "Deleted."
    edited = await eventually(
        lambda: "Likes green tea" not in (fake.message(ALICE, panel.message_id).text or "")
    )
    assert edited
    shown = fake.message(ALICE, panel.message_id)
    assert "1. Lives in *Turin*" in shown.text and len(buttons(shown)) == 1
    assert [f.body for f in await bot.memory.facts.list(alice)] == ["Lives in *Turin*"]


async def test_in_a_group_only_its_own_facts_and_only_their_owner_deletes_them(bot, fake):
    alice = await bot.user(ALICE)
    await bot.memory.facts.add(
        alice, "Private thing", origin_source=ALICE_SOURCE, created_by="user"
    )
    said = await bot.memory.facts.add(
        alice, "Said in the group", origin_source=GROUP_SOURCE, created_by="user"
    )
    fake.user_message(GROUP, ALICE, "/memory", chat_type="group")
    panel = await eventually(lambda: sent(fake, GROUP, "What I remember"))
    assert "Said in the group" in panel.text and "Private thing" not in panel.text
    [button] = buttons(panel)

    press = fake.callback(GROUP, BOB, panel.message_id, button["callback_data"], first_name="Bob")
    assert await answer_to(fake, press) == NOT_YOURS
    assert [f.id for f in await bot.memory.facts.list(alice) if f.id == said.id] == [said.id]
    # Even with Bob's own id in the data, the delete names Bob's user: Alice's fact stays.
    forged = fake.callback(GROUP, BOB, panel.message_id, f"mm1:d:{BOB}:{said.id}:0")
    assert await answer_to(fake, forged) == "That one was already gone."
    assert len(await bot.memory.facts.list(alice)) == 2

    mine = fake.callback(GROUP, ALICE, panel.message_id, button["callback_data"])
    assert await answer_to(fake, mine) == "Deleted."
    assert [f.body for f in await bot.memory.facts.list(alice)] == ["Private thing"]


@pytest.mark.parametrize(
    "data",
    ["mm1:d:111:abc:0", "mm1:d:111:5", "mm1:x:111", "mm1:d:0111:5:0", "mm1:d:111:5:0:9",
     "mm1:d:111:99999999999999999999:0", "mm1:f", "mm1:p:111:-1", "mm1:d:١١١:5:0"],
)  # fmt: skip
async def test_bad_callback_data_is_answered_in_a_sentence_and_deletes_nothing(bot, fake, data):
    alice = await bot.user(ALICE)
    await bot.memory.facts.add(alice, "Keep me", origin_source=ALICE_SOURCE, created_by="user")
    press = fake.callback(ALICE, ALICE, 1, data)
    assert await answer_to(fake, press) == BAD_BUTTON
    assert len(await bot.memory.facts.list(alice)) == 1


async def test_forget_me_asks_first_and_only_its_asker_confirms(bot, fake):
    alice = await bot.user(ALICE)
    await bot.memory.facts.add(alice, "Likes tea", origin_source=GROUP_SOURCE, created_by="user")
    fake.user_message(GROUP, ALICE, "/forget_me", chat_type="group")
    question = await eventually(lambda: sent(fake, GROUP, "This deletes everything"))
    # In a group no counts: the room would learn how much is remembered of her elsewhere.
    assert "1 fact" not in question.text and "chat history itself is kept" in question.text
    yes, _cancel = buttons(question)
    assert yes["callback_data"] == f"mm1:f:{ALICE}"

    bob = fake.callback(GROUP, BOB, question.message_id, yes["callback_data"], first_name="Bob")
    assert await answer_to(fake, bob) == NOT_YOURS
    assert len(await bot.memory.facts.list(alice)) == 1

    press = fake.callback(GROUP, ALICE, question.message_id, yes["callback_data"])
    assert await answer_to(fake, press) == "Forgotten."
    done = await eventually(
        lambda: (fake.message(GROUP, question.message_id).text or "").startswith("Done")
    )
    assert done
    text = fake.message(GROUP, question.message_id).text
    assert "I deleted everything I remembered about you" in text and not buttons(
        fake.message(GROUP, question.message_id)
    )
    assert await bot.memory.facts.list(alice) == []


async def test_forget_me_cancelled_deletes_nothing(bot, fake):
    alice = await bot.user(ALICE)
    await bot.memory.facts.add(alice, "Likes tea", origin_source=ALICE_SOURCE, created_by="user")
    fake.user_message(ALICE, ALICE, "/forget_me")
    question = await eventually(lambda: sent(fake, ALICE, "This deletes everything"))
    _, cancel = buttons(question)
    press = fake.callback(ALICE, ALICE, question.message_id, cancel["callback_data"])
    assert await answer_to(fake, press) == "Nothing was deleted."
    assert len(await bot.memory.facts.list(alice)) == 1


async def test_search_shows_hits_as_plain_text(bot, fake):
    fake.user_message(ALICE, ALICE, "We settled on *Lisbon* for the May trip")
    await eventually(lambda: sent(fake, ALICE, "echo: We settled"))
    await bot.memory.settled()
    fake.user_message(ALICE, ALICE, "/search lisbon trip")
    found = await eventually(lambda: sent(fake, ALICE, "Found in this chat"))
    assert "[Lisbon]" in found.text and "*" in found.text  # the asterisks are text
    assert not found.entities
    fake.user_message(ALICE, ALICE, "/search zanzibar")
    assert await eventually(lambda: sent(fake, ALICE, "Nothing about that"))
    fake.user_message(ALICE, ALICE, "/search")
    assert await eventually(lambda: sent(fake, ALICE, "Usage: /search"))
    # Another chat's conversations are not searched.
    fake.user_message(BOB, BOB, "/search lisbon", first_name="Bob")
    assert await eventually(lambda: sent(fake, BOB, "Nothing about that"))


async def test_memory_off_stops_indexing_and_the_profile(bot, fake):
    alice = await bot.user(ALICE)
    await bot.memory.facts.add(
        alice, "Likes green tea", origin_source=ALICE_SOURCE, created_by="user"
    )
    fake.user_message(ALICE, ALICE, "first about walruses")
    await eventually(lambda: sent(fake, ALICE, "echo: first"))
    assert HEADING in str(bot.model.requests[-1][0])  # the profile was in the turn

    fake.user_message(ALICE, ALICE, "/memory off")
    assert await eventually(lambda: sent(fake, ALICE, "Memory is off in this chat"))
    fake.user_message(ALICE, ALICE, "second about narwhals")
    await eventually(lambda: sent(fake, ALICE, "echo: second"))
    await bot.memory.settled()
    assert HEADING not in str(bot.model.requests[-1][0])
    assert await bot.memory.search.sessions(ALICE_SOURCE, "narwhals") == []
    assert await bot.memory.search.sessions(ALICE_SOURCE, "walruses")  # kept from before

    fake.user_message(ALICE, ALICE, "/memory")
    panel = await eventually(lambda: sent(fake, ALICE, "What I remember"))
    assert "Memory is off in this chat" in panel.text
    fake.user_message(ALICE, ALICE, "/memory on")
    assert await eventually(lambda: sent(fake, ALICE, "Memory is on in this chat again."))
    assert ALICE_SOURCE not in bot.memory.optouts


async def test_in_a_group_only_the_owner_switches_memory_off(bot, fake):
    fake.user_message(GROUP, BOB, "/memory off", chat_type="group", first_name="Bob")
    assert await eventually(lambda: sent(fake, GROUP, "only the bot's owner"))
    assert GROUP_SOURCE not in bot.memory.optouts


async def test_a_long_list_is_paged(bot, fake):
    alice = await bot.user(ALICE)
    for number in range(1, 12):
        await bot.memory.facts.add(
            alice, f"Fact {number} " + "x" * 480, origin_source=ALICE_SOURCE, created_by="user"
        )
    fake.user_message(ALICE, ALICE, "/memory")
    panel = await eventually(lambda: sent(fake, ALICE, "What I remember"))
    assert "page 1 of 2" in panel.text and len(panel.text) < 4096
    turn = buttons(panel)[-1]
    assert turn["text"] == "▶"
    press = fake.callback(ALICE, ALICE, panel.message_id, turn["callback_data"])
    await answer_to(fake, press)
    assert await eventually(
        lambda: "9. Fact 9" in (fake.message(ALICE, panel.message_id).text or "")
    )


async def test_with_memory_switched_off_the_commands_say_so(tmp_path, api, fake):
    async for bot in run_bot(tmp_path, api, fake, memory_enabled=False):
        assert bot.service.memory is None
        for command in ("/memory", "/search tea", "/forget_me"):
            fake.user_message(ALICE, ALICE, command)
        await eventually(lambda: sum(m.text == MEMORY_OFF for m in fake.messages(ALICE)) == 3)
