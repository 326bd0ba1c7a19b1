"""The indexer copies committed chat text into the index once, resumes from its watermark,
and the service keeps up with the bus (lagged or not) without ever indexing twice."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import sqlalchemy as sa

from engine.bus.chat import ChatEvent, ChatEventBus, CompactionEvent
from engine.store import SENDER_KEY, Store
from engine.store.schema import chat_history
from memory.indexer import Indexer, IndexerLimits, SessionsFailed, chunks
from memory.service import MemoryService
from memory.tables import memory_documents, memory_watermarks
from memory.users import Identity
from tests.memory.conftest import MEMORY_LAYERS, write_history


async def documents(store: Store) -> list[tuple[str, int, int, str]]:
    def read(conn: sa.Connection) -> list[tuple[str, int, int, str]]:
        d = memory_documents.c
        rows = conn.execute(sa.select(d.kind, d.ref_id, d.chunk, d.role).order_by(d.id))
        return [tuple(row) for row in rows]

    return await store.db.run(read)


def event(session_id: int, message_id: int, role: str = "user") -> ChatEvent:
    return ChatEvent(
        session_id=session_id,
        stack_id=0,
        message_id=message_id,
        role=role,  # type: ignore[arg-type]
        content="",
        is_synthetic=False,
        is_interactive=True,
        is_ephemeral=False,
    )


async def test_user_and_assistant_text_and_summaries_are_indexed_once(store: Store) -> None:
    session = await store.sessions.create("telegram:1")
    ids = await write_history(
        store,
        session.id,
        [("user", "plan the trip"), ("assistant", "sure"), ("agent", "a report"), ("user", " ")],
    )
    await write_history(store, session.id, [("user", "tick")], synthetic=True)
    frame = await store.sessions.root_frame(session.id)
    summary = await store.summaries.add(frame.id, "they planned a trip to Lisbon", ids[1])
    indexer = Indexer(store.db)

    assert await indexer.catch_up() == 3
    assert await indexer.catch_up() == 0
    assert await indexer.index_session(session.id) == 0
    assert await documents(store) == [
        ("message", ids[0], 0, "user"),
        ("message", ids[1], 0, "assistant"),
        ("summary", summary.id, 0, "summary"),
    ]


async def test_sub_agent_frames_are_not_indexed(store: Store) -> None:
    session = await store.sessions.create("telegram:1")
    [call_parent] = await write_history(store, session.id, [("assistant", "delegating")])
    frame = await store.sessions.push_frame(
        session.id, agent_id="helper", depth=1, parent_tool_call_id=call_parent, agent_prompt="x"
    )
    await store.history.append_message(frame.id, "user", "sub-agent prompt")

    assert await Indexer(store.db).catch_up() == 1


async def test_a_restart_resumes_from_the_watermark(store_url: str) -> None:
    store = await Store.open(store_url, MEMORY_LAYERS)
    session = await store.sessions.create("telegram:1")
    await write_history(store, session.id, [("user", f"message {n}") for n in range(7)])
    # a batch of 3: the first call stops part way, as a process killed mid catch-up would
    limits = IndexerLimits(batch=3)
    assert (await store.db.run(_one_batch, session.id, limits))[0] == 3
    await store.close()

    store = await Store.open(store_url, MEMORY_LAYERS)
    await write_history(store, session.id, [("assistant", "later")])
    assert await Indexer(store.db, limits).catch_up() == 5
    docs = await documents(store)
    assert len(docs) == 8 == len(set(docs))

    def watermark(conn: sa.Connection) -> int:
        return conn.execute(sa.select(memory_watermarks.c.last_message_id)).scalar_one()

    assert await store.db.run(watermark) == docs[-1][1]
    await store.close()


def _one_batch(conn: sa.Connection, session_id: int, limits: IndexerLimits) -> tuple[int, bool]:
    from memory.indexer import _index_batch

    return _index_batch(conn, session_id, limits)


def test_long_text_is_cut_into_chunks_at_whitespace() -> None:
    text = "word " * 3000
    pieces = list(chunks(text, 4000))
    assert all(len(p) <= 4000 for p in pieces)
    assert " ".join(p.strip() for p in pieces).split() == text.split()
    assert list(chunks("x" * 9000, 4000)) == ["x" * 4000, "x" * 4000, "x" * 1000]
    assert list(chunks("   ", 10)) == []


async def test_the_service_indexes_what_the_bus_announces(store: Store) -> None:
    bus = ChatEventBus()
    service = MemoryService(store.db, bus)
    await service.start()
    session = await store.sessions.create("telegram:1")
    ids = await write_history(store, session.id, [("user", "hello"), ("assistant", "hi")])
    bus.user_message(event(session.id, ids[0]))
    bus.assistant_response(event(session.id, ids[1], "assistant"))
    frame = await store.sessions.root_frame(session.id)
    summary = await store.summaries.add(frame.id, "greetings", ids[1])
    bus.compaction_done(CompactionEvent(session.id, frame.id, summary.id, ids[1], 1000))
    bus.close()
    await service.drained()
    await service.close()

    assert [d[:2] for d in await documents(store)] == [
        ("message", ids[0]),
        ("message", ids[1]),
        ("summary", summary.id),
    ]


class SlowIndexer(Indexer):
    """Waits for ``gate`` before each session, counting the full catch-ups."""

    def __init__(self, *args: object, gate: asyncio.Event, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.gate = gate
        self.catch_ups = 0

    async def index_session(self, session_id: int) -> int:
        await self.gate.wait()
        return await super().index_session(session_id)

    async def catch_up(self) -> int:
        self.catch_ups += 1
        return await super().catch_up()


async def test_a_lagging_service_catches_up_from_the_database(store: Store) -> None:
    bus = ChatEventBus()
    gate = asyncio.Event()
    indexer = SlowIndexer(store.db, gate=gate)
    service = MemoryService(store.db, bus, indexer=indexer, capacity=8)
    await service.start()
    sessions = [(await store.sessions.create(f"telegram:{n}")).id for n in range(20)]
    published = []
    for session_id in sessions:
        ids = await write_history(
            store, session_id, [("user" if n % 2 else "assistant", f"m{n}") for n in range(500)]
        )
        published += [(session_id, i) for i in ids]
    for session_id, message_id in published:  # 10,000 events, far more than 8 fit
        bus.user_message(event(session_id, message_id))
    gate.set()
    bus.close()
    await service.drained()
    await service.close()

    docs = await documents(store)
    assert len(published) == 10_000
    assert sorted(d[1] for d in docs) == sorted(i for _, i in published)  # all, none twice
    assert indexer.catch_ups >= 2  # the start, and at least one Lagged


class FailingOnce(Indexer):
    """An indexer whose first index of a session (of ``only``, when given) fails."""

    def __init__(self, db: Any, only: int | None = None) -> None:
        super().__init__(db)
        self.only, self.failed = only, False

    async def index_session(self, session_id: int) -> int:
        if not self.failed and self.only in (None, session_id):
            self.failed = True
            raise RuntimeError("database went away")
        return await super().index_session(session_id)


async def test_a_failing_round_is_retried_with_the_next_event(store: Store) -> None:
    bus = ChatEventBus()
    service = MemoryService(store.db, bus, indexer=FailingOnce(store.db))
    await service.start()
    session = await store.sessions.create("telegram:1")
    [first] = await write_history(store, session.id, [("user", "one")])
    bus.user_message(event(session.id, first))
    [second] = await write_history(store, session.id, [("user", "two")])
    bus.user_message(event(session.id, second))
    bus.close()
    await service.drained()
    await service.close()

    assert sorted(d[1] for d in await documents(store)) == [first, second]


async def test_a_session_passed_over_in_a_catch_up_is_caught_up_at_the_next_event(
    store: Store,
) -> None:
    """A catch-up passes over a session whose rows fail and indexes the others; the
    round still counts as failed, so the next event catches up again (a review of the
    change found the passed-over session left until its own next message)."""
    early = await store.sessions.create("telegram:1")
    [missed] = await write_history(store, early.id, [("user", "one")])
    bus = ChatEventBus()
    service = MemoryService(store.db, bus, indexer=FailingOnce(store.db, only=early.id))
    await service.start()  # its first round catches up: the early session fails
    await service.settled()
    other = await store.sessions.create("telegram:2")
    [later] = await write_history(store, other.id, [("user", "two")])
    bus.user_message(event(other.id, later))
    bus.close()
    await service.drained()
    await service.close()

    assert sorted(d[1] for d in await documents(store)) == [missed, later]


@pytest.mark.parametrize("indexed_before", [True, False], ids=["after-the-forget", "index-behind"])
async def test_a_summary_of_a_forgotten_private_chat_is_never_indexed(
    store: Store, indexed_before: bool
) -> None:
    """The history is kept after /forget_me, so the conversation's next compaction
    summarises the forgotten words, and that summary (or one not indexed yet at the
    forget) was indexed: /search found them again (found by review)."""
    memory = MemoryService(store.db, ChatEventBus())
    source = "telegram:111"
    chat = await store.sessions.create(source)
    frame = await store.sessions.root_frame(chat.id)
    ids = await write_history(store, chat.id, [("user", "my secret diary"), ("assistant", "ok")])
    if indexed_before:
        await Indexer(store.db).catch_up()
    else:
        await store.summaries.add(frame.id, "Ann keeps a secret diary", ids[-1])
    await memory.forget_user(await memory.user_for(Identity("telegram", "111")))
    more = await write_history(store, chat.id, [("user", "the weather?"), ("assistant", "sun")])
    await store.summaries.add(frame.id, "Ann keeps a secret diary; asked about weather", more[-1])
    await Indexer(store.db).catch_up()
    assert await memory.search.sessions(source, "diary") == []
    assert [hit.snippet for hit in await memory.search.sessions(source, "weather")]


async def test_a_name_no_database_takes_or_a_row_that_fails_holds_no_other_session(
    store: Store,
) -> None:
    """A display name with a NUL or half an emoji, or a sender id past the column
    (PostgreSQL), stopped every round of indexing at its session (found by review)."""
    senders = [
        {"id": "@mallory:example.org", "name": "Mal\x00lory \ud83d"},
        {"id": "@" + "x" * 300 + ":example.org", "name": "X"},
        {"id": "@ann:example.org", "name": "Ann"},
    ]
    for n, sender in enumerate(senders):
        session = await store.sessions.create(f"matrix:!room{n}:example.org")
        [row] = await write_history(store, session.id, [("user", f"the lisbon hotel {n}")])

        def tag(conn: sa.Connection, row: int = row, sender: dict = sender) -> None:
            conn.execute(
                chat_history.update()
                .where(chat_history.c.id == row)
                .values(metadata={SENDER_KEY: sender})
            )

        await store.db.run(tag)

    with contextlib.suppress(SessionsFailed):  # the too long id's, on PostgreSQL
        await Indexer(store.db).catch_up()

    def indexed(conn: sa.Connection) -> set[str]:
        return {r.source for r in conn.execute(sa.select(memory_documents.c.source))}

    found = await store.db.run(indexed)
    assert {"matrix:!room0:example.org", "matrix:!room2:example.org"} <= found
