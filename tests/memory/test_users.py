"""People: who said a message (``identity_of``), whose conversation a source is
(``is_personal``), one user per identity however many resolve it at once, and the
operator's front ends linked to the owner's Telegram user."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from engine.bus.chat import ChatEventBus
from engine.store import SENDER_KEY, Store
from memory.service import MemoryService
from memory.tables import memory_identities, memory_users
from memory.users import (
    EXTERNAL_ID_CHARS,
    Identity,
    PersonalSources,
    Users,
    identity_of,
    is_personal,
    is_personal_in,
    personal_sources_in,
    resolve_in,
)


def sender(user_id: str, name: str | None = None) -> dict[str, object]:
    """The metadata bot/telegram/dispatch/messages.py stores with a message."""
    return {"telegram_message_id": 7, SENDER_KEY: {"id": user_id, "name": name}}


async def count(store: Store, table: sa.Table) -> int:
    def read(conn: sa.Connection) -> int:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())

    return await store.db.run(read)


# -- identity_of and is_personal -------------------------------------------------------------


def test_a_telegram_private_chat_is_its_user_with_or_without_a_sender() -> None:
    assert identity_of("telegram:111", sender("111", "Ann")) == Identity("telegram", "111", "Ann")
    assert identity_of("telegram:111", None) == Identity("telegram", "111")
    assert identity_of("telegram:111", {"telegram_message_id": 3}) == Identity("telegram", "111")
    assert identity_of("telegram:111:thread", None) == Identity("telegram", "111")


def test_a_group_message_is_its_sender_and_nobody_without_one() -> None:
    assert identity_of("telegram:-100", sender("111", "Ann")) == Identity("telegram", "111", "Ann")
    assert identity_of("telegram:-100", sender("222")) == Identity("telegram", "222")
    assert identity_of("telegram:-100", None) is None
    assert identity_of("telegram:-100", {SENDER_KEY: {"id": ""}}) is None
    assert identity_of("telegram:-100", {SENDER_KEY: "111"}) is None  # not a mapping


def test_a_sender_name_that_is_not_text_is_dropped() -> None:
    assert identity_of("telegram:-100", {SENDER_KEY: {"id": 5, "name": ["x"]}}) == Identity(
        "telegram", "5"
    )


def test_the_web_chat_and_the_console_speak_for_their_owner() -> None:
    assert identity_of("web:abc", None) == Identity("web", "owner")
    assert identity_of("console", None) == Identity("console", "owner")
    assert identity_of("console", {}) == Identity("console", "owner")


def test_an_unknown_platform_is_nobody_unless_its_message_names_a_sender() -> None:
    assert identity_of("matrix:!room", None) is None
    assert identity_of("matrix:!room", sender("@ann")) == Identity("matrix", "@ann")


def test_personal_conversations_are_private_chats_and_the_operators_front_ends() -> None:
    assert is_personal("telegram:111")
    assert is_personal("telegram:111:5")  # a topic of a private chat
    assert is_personal("web:abc") and is_personal("console")
    assert not is_personal("telegram:-100")
    assert not is_personal("telegram:-1001234:7")
    assert not is_personal("telegram")
    assert not is_personal("matrix:!room")
    assert is_personal("slack:D0123ABC") and is_personal("slack:D0123ABC:1700000000.000100")
    assert not is_personal("slack:C0123ABC") and not is_personal("slack:G0123ABC:1.2")


async def test_a_conversation_its_platform_recorded_as_one_persons_is_personal(
    store: Store,
) -> None:
    """A Discord DM's source reads as a server channel's: its platform records it, and
    every process reads it so (the deriver's and the indexer's units through
    ``is_personal_in``; until 2026-12-07 a DM counted as a group)."""
    dm, channel = "discord:1111", "discord:2222"
    first, second = PersonalSources(store.db), PersonalSources(store.db)
    await first.record(dm)
    await first.record(dm)  # once
    await first.record("matrix:!room")  # its form is read where it tells; not recorded
    assert dm in first and channel not in first and "telegram:111" in first
    assert dm not in second  # another process learns it when it reads them again
    await second.load()
    assert dm in second
    assert await store.db.run(is_personal_in, dm)
    assert not await store.db.run(is_personal_in, channel)
    assert await store.db.run(personal_sources_in) == {dm}


# -- Users -------------------------------------------------------------------------------------


async def test_an_identity_gets_one_user_created_once(store: Store) -> None:
    users = Users(store.db)
    ann = await users.resolve(Identity("telegram", "111", "Ann"))
    assert await users.resolve(Identity("telegram", "111")) == ann
    assert await Users(store.db).resolve(Identity("telegram", "111")) == ann  # not the cache
    bob = await users.resolve(Identity("telegram", "222"))
    assert bob != ann
    assert await count(store, memory_users) == 2
    assert await count(store, memory_identities) == 2
    assert await users.identities(ann) == [Identity("telegram", "111")]


async def test_two_tasks_resolving_one_identity_get_one_user(store: Store) -> None:
    users = Users(store.db)
    identity = Identity("telegram", "111")
    first, second = await asyncio.gather(users.resolve(identity), users.resolve(identity))
    assert first == second
    assert await count(store, memory_identities) == 1
    # (Whether the two interleave is up to the pool; the next test makes them.)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_two_connections_resolving_one_identity_get_one_user(
    store: Store, store_url: str
) -> None:
    # A holds its new identity row uncommitted; B's insert of the same identity waits on it,
    # then finds A's row: both answer A's user.
    engine = create_async_engine(store_url)
    identity = Identity("telegram", "111")
    try:
        async with engine.connect() as a, engine.connect() as b, engine.connect() as watch:
            await a.begin()
            first = await a.run_sync(resolve_in, identity)

            async def other() -> int:
                async with b.begin():
                    return await b.run_sync(resolve_in, identity)

            waiting = asyncio.create_task(other())
            await asyncio.wait_for(blocked_on_a_lock(watch), 10)
            await a.commit()
            second = await asyncio.wait_for(waiting, 10)
    finally:
        await engine.dispose()
    assert first == second
    assert await count(store, memory_identities) == 1
    assert await Users(store.db).resolve(identity) == first
    assert await count(store, memory_users) == 1  # B's own new user is not left behind


async def blocked_on_a_lock(watch: AsyncConnection) -> None:
    """Until another connection of this database waits for a lock (PostgreSQL)."""
    query = sa.text(
        "select count(*) from pg_stat_activity "
        "where datname = current_database() and wait_event_type = 'Lock'"
    )
    while not (await watch.execute(query)).scalar_one():
        await watch.rollback()  # pg_stat_activity is a snapshot per transaction
        await asyncio.sleep(0)


async def test_the_operator_front_ends_are_linked_to_the_owners_telegram_user(
    store: Store,
) -> None:
    service = MemoryService(store.db, ChatEventBus())
    owner = await service.user_for(Identity("telegram", "42"))
    await service.link_operator(Identity("telegram", "42"))
    assert await service.user_of("web:main", None) == owner
    assert await service.user_of("console", None) == owner
    assert await Users(store.db).resolve(Identity("web", "owner")) == owner  # stored, not cached
    assert await service.users.identities(owner) == [
        Identity("console", "owner"),
        Identity("telegram", "42"),
        Identity("web", "owner"),
    ]


async def test_linking_never_moves_an_identity_that_has_its_own_user(store: Store) -> None:
    users = Users(store.db)
    web = await users.resolve(Identity("web", "owner"))  # spoke before the owner was set
    owner = await users.resolve(Identity("telegram", "42"))
    assert await users.link(Identity("web", "owner"), to=Identity("telegram", "42")) == web
    assert await users.resolve(Identity("web", "owner")) == web
    assert await Users(store.db).resolve(Identity("web", "owner")) == web
    assert await users.identities(owner) == [Identity("telegram", "42")]


def test_a_sender_id_longer_than_any_platforms_is_nobody() -> None:
    """Past the column (PostgreSQL refuses it) the person's row could not be written, and
    each round of indexing failed at their session (found by review on 2026-12-07)."""
    longest = "@" + "x" * 242 + ":example.org"
    assert len(longest) == EXTERNAL_ID_CHARS
    assert identity_of("matrix:!r:example.org", {SENDER_KEY: {"id": longest}}) is not None
    assert identity_of("matrix:!r:example.org", {SENDER_KEY: {"id": longest + "x"}}) is None
