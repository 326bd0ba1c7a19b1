# ruff: noqa: F811  (pytest fixtures imported from tests/memory/conftest.py)
"""``/search``, ``/memory`` and ``/forget_me`` as text: the web chat's and the terminal's,
in the same words as Telegram's, over a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bot.platform.commands import CommandContext, CommandRegistry
from bot.platform.memory import MEMORY_OFF, MemoryFront
from bot.terminal import terminal_commands
from bot.webchat.actions import web_commands
from engine.bus.chat import ChatEventBus
from engine.store import Store
from memory.service import MemoryService
from memory.users import Identity
from tests.memory.conftest import backend, store, store_url, write_history  # noqa: F401

FRONTS: dict[str, tuple[Callable[[MemoryService | None], CommandRegistry], str]] = {
    "web chat": (lambda memory: web_commands(memory), "web:c1"),
    "terminal": (lambda memory: terminal_commands(memory=memory), "console"),
}


@pytest.fixture(params=list(FRONTS))
def front(request: pytest.FixtureRequest) -> tuple[Callable, str]:
    return FRONTS[request.param]


async def run(commands: CommandRegistry, source: str, text: str) -> str:
    name, _, argument = text.removeprefix("/").partition(" ")
    context = CommandContext(None, source, argument, None, is_owner=True)  # type: ignore[arg-type]
    reply = await commands.run(name, context)
    assert reply is not None
    return reply


async def test_memory_lists_switches_and_forgets(store: Store, front) -> None:
    make, source = front
    memory = MemoryService(store.db, ChatEventBus())
    commands = make(memory)
    operator = await memory.user_of(source, None)
    assert operator is not None
    await memory.facts.add(operator, "Likes green tea", origin_source=source, created_by="user")
    await memory.facts.add(
        operator, "Said in a group", origin_source="telegram:-5", created_by="user"
    )
    other = await memory.user_for(Identity("telegram", "222"))
    await memory.facts.add(other, "Bob's secret", origin_source="telegram:222", created_by="user")

    listing = await run(commands, source, "/memory")
    # The operator's own conversation: every fact of theirs, numbered; never another's.
    assert "1. Likes green tea\n2. Said in a group" in listing and "Bob" not in listing
    assert "/memory off" in listing

    assert "Memory is off in this chat" in await run(commands, source, "/memory off")
    assert source in memory.optouts
    assert "Memory is off in this chat" in await run(commands, source, "/memory")
    assert await run(commands, source, "/memory on") == "Memory is on in this chat again."
    assert source not in memory.optouts
    assert (await run(commands, source, "/memory sideways")).startswith("Usage: /memory")

    asked = await run(commands, source, "/forget_me")
    assert "2 facts" in asked and "Send /forget_me yes" in asked
    assert "chat history itself is kept" in asked
    assert len(await memory.facts.list(operator)) == 2  # asking deletes nothing
    done = await run(commands, source, "/forget_me yes")
    assert done.startswith("Done: I deleted 2 facts and 0 search entries.")
    assert await memory.facts.list(operator) == []
    assert len(await memory.facts.list(other)) == 1


async def test_search_finds_this_chat_s_conversations_only(store: Store, front) -> None:
    make, source = front
    memory = MemoryService(store.db, ChatEventBus())
    commands = make(memory)
    mine = await store.sessions.create(source, title="Trip planning")
    await write_history(
        store, mine.id, [("user", "Lisbon in May, then Porto"), ("assistant", "ok")]
    )
    theirs = await store.sessions.create("telegram:222", title="Not yours")
    await write_history(store, theirs.id, [("user", "Lisbon is lovely")])
    await memory.indexer.catch_up()

    found = await run(commands, source, "/search lisbon")
    assert found.startswith("Found in this chat's past conversations:")
    assert "Trip planning" in found and "[Lisbon]" in found and "Not yours" not in found
    assert "Nothing about that" in await run(commands, source, "/search zanzibar")
    assert (await run(commands, source, "/search")).startswith("Usage: /search")
    # Query syntax is words: nothing here is an error.
    assert await run(commands, source, '/search "unbalanced ( NEAR * AND')


async def test_with_memory_switched_off_every_command_says_so(front) -> None:
    make, source = front
    commands = make(None)
    for text in ("/memory", "/memory off", "/search tea", "/forget_me", "/forget_me yes"):
        assert await run(commands, source, text) == MEMORY_OFF
    assert "/search <words>" in commands.help_text() and "/forget_me" in commands.help_text()


async def test_in_a_group_the_listing_is_the_group_s_and_switching_is_the_owner_s(
    store: Store,
) -> None:
    memory = MemoryService(store.db, ChatEventBus())
    front = MemoryFront(memory)
    alice = await front.person("telegram:-5", "111")
    assert alice == await memory.user_for(Identity("telegram", "111"))
    await memory.facts.add(alice, "Private", origin_source="telegram:111", created_by="user")
    await memory.facts.add(alice, "Group one", origin_source="telegram:-5", created_by="user")
    listing = await front.listing("telegram:-5", alice)
    assert [f.body for f in listing.facts] == ["Group one"] and "from this group" in listing.text
    assert "only the bot's owner" in await front.switch("telegram:-5", "off", is_owner=False)
    assert "telegram:-5" not in memory.optouts
    await front.switch("telegram:-5", "off", is_owner=True)
    assert "telegram:-5" in memory.optouts
    # A person's own private chat is theirs to switch.
    await front.switch("telegram:111", "off", is_owner=False)
    assert "telegram:111" in memory.optouts
    # The group's topics are off with it; one cannot be switched on alone.
    assert "telegram:-5:9" in memory.optouts
    said = await front.switch("telegram:-5:9", "on", is_owner=True)
    assert "switch it on there" in said and "telegram:-5:9" in memory.optouts
    await front.switch("telegram:-5", "on", is_owner=True)
    assert "telegram:-5:9" not in memory.optouts


async def test_forget_me_in_a_group_tells_the_room_no_counts(store: Store) -> None:
    """The prompt and the answer said how many facts and search entries there were of the
    person, private ones too, to the whole room (found by review)."""
    memory = MemoryService(store.db, ChatEventBus())
    front = MemoryFront(memory)
    ann = await front.person("telegram:-5", "111")
    for n in range(7):
        await memory.facts.add(ann, f"private {n}", origin_source="telegram:111", created_by="user")
    prompt = await front.forget_prompt(ann, "Are you sure?", "telegram:-5")
    assert "7 facts" not in prompt and "everything I remember about you" in prompt
    done = await front.forget(ann, "telegram:-5")
    assert done.startswith("Done: I deleted everything I remembered about you.")
    assert await memory.facts.list(ann) == []
    assert "you: 0 facts" in await front.forget_prompt(ann, "?", "telegram:111")  # counted there
