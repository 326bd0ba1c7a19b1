"""The memory tools act for the person who wrote the session's latest message (in a group,
the one being answered), refuse where memory is off, answer bad arguments with sentences,
and ``forget_user`` deletes one person's memory and nobody else's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.bus.chat import ChatEventBus
from engine.store import Store
from engine.store.schema import chat_history, utcnow
from engine.tools.base import ToolError
from engine.tools.protocols import ToolContext
from memory.indexer import Indexer
from memory.service import MemoryService
from memory.tables import memory_documents
from memory.tools import memory_tools
from memory.users import Identity
from tests.memory.conftest import MEMORY_LAYERS
from tests.memory.test_isolation import (  # noqa: F401 (the fixture)
    ANN,
    BOB,
    GROUP,
    Chat,
    chat,
    said_by,
    tool_results,
)


async def say(
    store: Store, session_id: int, rows: Sequence[tuple[str, str, dict[str, Any] | None]]
) -> list[int]:
    """Append ``(role, content, metadata)`` rows to the session's root frame."""
    frame = await store.sessions.root_frame(session_id)

    def write(conn: Connection) -> list[int]:
        return [
            int(
                conn.execute(
                    chat_history.insert().values(
                        session_stack_id=frame.id,
                        role=role,
                        content=content,
                        metadata=metadata,
                        created_at=utcnow(),
                    )
                ).inserted_primary_key[0]
            )
            for role, content, metadata in rows
        ]

    return await store.db.run(write)


class Tools:
    """The memory tools over a service that is not consuming the bus (none is needed)."""

    def __init__(self, store: Store, tmp_path: Path) -> None:
        self.memory = MemoryService(store.db, ChatEventBus())
        self.by_name = {tool.name: tool for tool in memory_tools(store, self.memory)}
        self._tmp = tmp_path

    async def call(
        self, name: str, session_id: int, *, asked_in: int | None = None, **args: Any
    ) -> Any:
        ctx = ToolContext(
            session_id=session_id,
            stack_id=0,
            agent_id="default",
            depth=0,
            working_directory=self._tmp,
            scratchpad=None,  # type: ignore[arg-type]  # the memory tools never touch it
            asked_in=asked_in,
        )
        return json.loads(await self.by_name[name].run(args, ctx))

    async def refused(self, name: str, session_id: int, **args: Any) -> str:
        with pytest.raises(ToolError) as refused:
            await self.call(name, session_id, **args)
        message = str(refused.value)
        assert message.startswith(f"{name}: ")
        assert "Traceback" not in message and "Error" not in message
        return message


@pytest.fixture
def tools(store: Store, tmp_path: Path) -> Tools:
    return Tools(store, tmp_path)


async def test_in_a_group_the_tools_act_for_whoever_wrote_the_latest_message(
    store: Store, tools: Tools
) -> None:
    group = await store.sessions.create(GROUP)
    await say(store, group.id, [("user", "I like tea", said_by(ANN, "Ann"))])
    saved = await tools.call("memory_save", group.id, fact="Ann likes tea")
    await say(store, group.id, [("assistant", "noted", None), ("user", "hi", said_by(BOB, "Bob"))])
    assert await tools.call("memory_list", group.id) == {"facts": []}  # Bob has none
    await tools.refused("memory_forget", group.id, id=saved["saved"]["id"])  # not Bob's to forget
    await tools.call("memory_save", group.id, fact="Bob likes coffee")

    ann = await tools.memory.user_for(Identity("telegram", ANN))
    bob = await tools.memory.user_for(Identity("telegram", BOB))
    [ann_fact] = await tools.memory.facts.list(ann)
    [bob_fact] = await tools.memory.facts.list(bob)
    assert (ann_fact.body, ann_fact.origin_source, ann_fact.created_by) == (
        "Ann likes tea",
        GROUP,
        "tool",
    )
    assert (bob_fact.body, bob_fact.origin_source) == ("Bob likes coffee", GROUP)
    assert await tools.call("memory_list", group.id) == {
        "facts": [{"id": bob_fact.id, "fact": "Bob likes coffee"}]
    }
    assert await tools.call("memory_forget", group.id, id=bob_fact.id) == {"forgotten": bob_fact.id}
    assert await tools.memory.facts.list(bob) == []
    assert await tools.memory.facts.list(ann) == [ann_fact]


async def test_in_a_group_a_tool_acts_for_whom_its_call_answers_not_who_wrote_since(
    store: Store, tools: Tools
) -> None:
    """Bob's line joined Ann's turn between its rounds: the save the model made for Ann
    was stored as Bob's fact (found by review)."""
    group = await store.sessions.create(GROUP)
    [_, asking] = await say(
        store,
        group.id,
        [("user", "remember I am vegetarian", said_by(ANN, "Ann")), ("assistant", "", None)],
    )
    await say(store, group.id, [("user", "lol", said_by(BOB, "Bob"))])  # joins the turn
    await tools.call("memory_save", group.id, asked_in=asking, fact="Ann is vegetarian")
    ann = await tools.memory.user_for(Identity("telegram", ANN))
    bob = await tools.memory.user_for(Identity("telegram", BOB))
    assert [f.body for f in await tools.memory.facts.list(ann)] == ["Ann is vegetarian"]
    assert await tools.memory.facts.list(bob) == []


async def test_in_a_group_the_tools_see_only_what_was_learned_in_that_group(
    store: Store, tools: Tools
) -> None:
    """Nothing told in private reaches a room others read: the profile and /memory held
    to it, but memory_list, which runs unasked, gave the whole group Ann's private facts,
    and memory_forget could delete them from there (found by review)."""
    ann = await tools.memory.user_for(Identity("telegram", ANN))
    private = await tools.memory.facts.add(
        ann,
        "Ann is pregnant and has not told anyone",
        origin_source=f"telegram:{ANN}",
        created_by="deriver",
    )
    group = await store.sessions.create(GROUP)
    await say(store, group.id, [("user", "hi all", said_by(ANN, "Ann"))])
    learned = await tools.call("memory_save", group.id, fact="Ann likes tea")

    assert await tools.call("memory_list", group.id) == {
        "facts": [{"id": learned["saved"]["id"], "fact": "Ann likes tea"}]
    }
    await tools.refused("memory_forget", group.id, id=private.id)
    assert private in await tools.memory.facts.list(ann)


async def test_in_a_private_chat_the_tools_act_for_its_person(store: Store, tools: Tools) -> None:
    session = await store.sessions.create(f"telegram:{ANN}")
    await say(store, session.id, [("user", "remember this", {"telegram_message_id": 1})])
    saved = await tools.call("memory_save", session.id, fact="  likes\n long walks ")
    assert saved["saved"]["fact"] == "likes long walks"
    assert await tools.call("memory_list", session.id) == {
        "facts": [{"id": saved["saved"]["id"], "fact": "likes long walks"}]
    }


async def test_the_tools_refuse_where_memory_is_off_and_where_nobody_can_be_told_apart(
    store: Store, tools: Tools
) -> None:
    session = await store.sessions.create(f"telegram:{ANN}")
    await say(store, session.id, [("user", "hi", said_by(ANN, "Ann"))])
    await tools.call("memory_save", session.id, fact="likes tea")
    await tools.memory.set_opt_out(f"telegram:{ANN}", opted_out=True)
    for name, args in (
        ("memory_list", {}),
        ("memory_save", {"fact": "x"}),
        ("memory_forget", {"id": 1}),
    ):
        message = await tools.refused(name, session.id, **args)
        assert message.endswith("memory is switched off in this conversation")
    ann = await tools.memory.user_for(Identity("telegram", ANN))
    assert [f.body for f in await tools.memory.facts.list(ann)] == ["likes tea"]  # kept

    anonymous = await store.sessions.create(GROUP)
    await say(store, anonymous.id, [("user", "hi", None)])  # a group message without a sender
    assert "nobody in this chat" in await tools.refused("memory_list", anonymous.id)
    assert "nobody in this chat" in await tools.refused("memory_list", 999_999)  # no session


async def test_bad_arguments_are_answered_with_sentences(store: Store, tools: Tools) -> None:
    session = await store.sessions.create(f"telegram:{ANN}")
    await say(store, session.id, [("user", "hi", said_by(ANN, "Ann"))])
    refused = tools.refused
    assert "id" in await refused("memory_forget", session.id, id="3")
    assert "id" in await refused("memory_forget", session.id, id=True)
    assert "id" in await refused("memory_forget", session.id, id=2.5)
    assert "id" in await refused("memory_forget", session.id)
    assert await refused("memory_forget", session.id, id=424242) == (
        "memory_forget: there is no fact 424242 about this person"
    )
    assert await refused("memory_save", session.id, fact="x" * 100_000) == (
        "memory_save: A fact is at most 500 characters; this one is 100000."
    )
    assert await refused("memory_save", session.id, fact="   ") == (
        "memory_save: A fact cannot be empty."
    )
    assert "fact" in await refused("memory_save", session.id, fact=5)
    assert "fact" in await refused("memory_save", session.id)
    assert "other" in await refused("memory_save", session.id, fact="x", other=1)
    assert await tools.call("memory_list", session.id) == {"facts": []}
    # Dates at the edge of time: valid, but out of range in UTC (the database's bind
    # overflowed, and the model read "internal error"; found by review).
    for since in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:00:00-05:00", "yesterday"):
        assert "not an ISO date" in await refused(
            "search_sessions", session.id, query="hotel", since=since
        )


async def test_memory_save_through_a_group_turn_stores_the_fact_as_the_groups(chat: Chat) -> None:  # noqa: F811
    chat.fake.reply_tool_calls(("c1", "memory_save", {"fact": "Ann chairs the book club"}))
    chat.fake.reply_text("noted, Ann")
    chat.fake.reply_tool_calls(("c2", "memory_list", {}))
    chat.fake.reply_text("nothing about you, Bob")
    await chat.turn(GROUP, "remember I chair the club", said_by(ANN, "Ann", 1))
    _, after_list = await chat.turn(GROUP, "what do you know about me?", said_by(BOB, "Bob", 2))

    saved, listed = tool_results(after_list)  # the group's history has Ann's save too
    assert saved == {"saved": {"id": saved["saved"]["id"], "fact": "Ann chairs the book club"}}
    assert listed == {"facts": []}  # Bob asked: Ann's fact is not his
    ann = await chat.memory.user_for(Identity("telegram", ANN))
    [fact] = await chat.memory.facts.list(ann)
    assert (fact.body, fact.origin_source, fact.created_by) == (
        "Ann chairs the book club",
        GROUP,
        "tool",
    )


# -- forget_user -------------------------------------------------------------------------------


async def test_forget_user_deletes_their_facts_and_documents_and_keeps_the_rest(
    store: Store, tools: Tools
) -> None:
    memory = tools.memory
    ann_chat = await store.sessions.create(f"telegram:{ANN}")
    bob_chat = await store.sessions.create(f"telegram:{BOB}")
    group = await store.sessions.create(GROUP)
    await say(
        store,
        ann_chat.id,
        [("user", "ann private words", None), ("assistant", "reply to ann", None)],
    )
    await say(
        store,
        bob_chat.id,
        [("user", "bob private words", None), ("assistant", "reply to bob", None)],
    )
    await say(
        store,
        group.id,
        [
            ("user", "ann group words", said_by(ANN, "Ann")),
            ("assistant", "reply in group", None),
            ("user", "bob group words", said_by(BOB, "Bob")),
        ],
    )
    await Indexer(store.db).catch_up()
    ann = await memory.user_for(Identity("telegram", ANN))
    bob = await memory.user_for(Identity("telegram", BOB))
    for user, source in ((ann, f"telegram:{ANN}"), (ann, GROUP), (bob, f"telegram:{BOB}")):
        await memory.facts.add(
            user, f"fact of {user} in {source}", origin_source=source, created_by="tool"
        )
    await memory.profiles.profile(ann)
    history_before = await count_history(store)

    forgotten = await memory.forget_user(ann)

    assert (forgotten.facts, forgotten.documents) == (2, 3)
    assert await memory.facts.list(ann) == []
    assert [f.body for f in await memory.facts.list(bob)] == [f"fact of {bob} in telegram:{BOB}"]
    assert await memory.profiles.profile(ann) is None  # the cached profile went too
    assert await bodies(store) == [
        "bob private words",
        "reply to bob",
        "reply in group",
        "bob group words",
    ]
    assert await count_history(store) == history_before  # the chat history is kept
    assert (await memory.forget_user(ann)) == type(forgotten)(0, 0)


async def bodies(store: Store) -> list[str]:
    def read(conn: Connection) -> list[str]:
        d = memory_documents.c
        return list(conn.execute(sa.select(d.body).order_by(d.id)).scalars())

    return await store.db.run(read)


async def count_history(store: Store) -> int:
    def read(conn: Connection) -> int:
        return int(conn.execute(sa.select(sa.func.count()).select_from(chat_history)).scalar_one())

    return await store.db.run(read)


async def test_in_a_fleet_what_another_process_changed_is_read_again(
    store: Store, store_url: str
) -> None:
    """Two processes over one database: a /forget_me and a /memory off taken by one (the
    receiver's) left the other's cached profile and opt-outs as they were, for good
    (found by review)."""
    other_store = await Store.open(store_url, MEMORY_LAYERS)
    here = MemoryService(store.db, ChatEventBus(), reread_s=0.05)
    there = MemoryService(other_store.db, ChatEventBus(), reread_s=0.05)
    await here.start()
    await there.start()
    try:
        ann = await here.user_for(Identity("telegram", ANN))
        await here.facts.add(
            ann, "Ann likes tea", origin_source=f"telegram:{ANN}", created_by="tool"
        )
        metadata = said_by(ANN, "Ann")
        assert "Ann likes tea" in str(await here.turn_context(f"telegram:{ANN}", metadata))
        await there.forget_user(ann)
        await there.set_opt_out(GROUP, opted_out=True)
        for _ in range(200):
            if (
                GROUP in here.optouts
                and await here.turn_context(f"telegram:{ANN}", metadata) is None
            ):
                break
            await asyncio.sleep(0.01)
        assert await here.turn_context(f"telegram:{ANN}", metadata) is None
        assert GROUP in here.optouts
    finally:
        await here.close()
        await there.close()
        await other_store.close()
