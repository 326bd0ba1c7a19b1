"""Facts: checked before they are stored, scoped by user on every change, bounded per
user (the newest kept), and the profile cache told only after a change committed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from engine.store import Store
from memory.facts import FactError, FactLimits, FactStore, clean_fact
from memory.tables import memory_facts
from memory.users import Identity, Users

LIMITS = FactLimits()


async def two_users(store: Store) -> tuple[int, int]:
    users = Users(store.db)
    return (
        await users.resolve(Identity("telegram", "111")),
        await users.resolve(Identity("telegram", "222")),
    )


async def bodies(store: Store) -> list[tuple[int, str]]:
    def read(conn: sa.Connection) -> list[tuple[int, str]]:
        f = memory_facts.c
        return [tuple(r) for r in conn.execute(sa.select(f.user_id, f.body).order_by(f.id))]

    return await store.db.run(read)


def is_a_sentence(message: str) -> bool:
    return message[:1].isupper() and message.endswith(".") and "Error" not in message


# -- clean_fact -------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [None, 5, b"bytes", ["a fact"], {"fact": "x"}])
def test_a_fact_that_is_not_text_is_refused(body: object) -> None:
    with pytest.raises(FactError) as refused:
        clean_fact(body, LIMITS)
    assert str(refused.value) == "A fact must be text."


@pytest.mark.parametrize("body", ["", " ", "\n\t  \r\n", "\u00a0\u2003"])
def test_an_empty_fact_is_refused(body: str) -> None:
    with pytest.raises(FactError) as refused:
        clean_fact(body, LIMITS)
    assert str(refused.value) == "A fact cannot be empty."


def test_a_fact_of_100_kb_is_refused_with_its_length() -> None:
    with pytest.raises(FactError) as refused:
        clean_fact("x" * 100_000, LIMITS)
    message = str(refused.value)
    assert message == "A fact is at most 500 characters; this one is 100000."
    assert is_a_sentence(message)


def test_a_lone_surrogate_in_a_fact_is_a_replacement_character() -> None:
    """A model's JSON may hold "\\ud83d" (a token that cut an emoji): the commit failed,
    and the deriver retried the same batch forever (found by review)."""
    assert clean_fact("likes \ud83d tea", LIMITS) == "likes \ufffd tea"


def test_a_fact_is_one_line_and_its_length_is_counted_after_that() -> None:
    assert clean_fact("  likes\n\ntea   and\tcake ", LIMITS) == "likes tea and cake"
    assert clean_fact("a " * 250, LIMITS) == " ".join(["a"] * 250)  # 499 once joined
    with pytest.raises(FactError):
        clean_fact("a " * 251, LIMITS)  # 501 once joined


async def test_a_refused_fact_stores_nothing(store: Store) -> None:
    ann, _ = await two_users(store)
    facts = FactStore(store.db)
    for body in ("", "x" * 100_000, 7):
        with pytest.raises(FactError):
            await facts.add(ann, body, origin_source="telegram:111", created_by="tool")  # type: ignore[arg-type]
    assert await bodies(store) == []


# -- scoped by user --------------------------------------------------------------------------


async def test_nobody_can_update_or_delete_another_users_fact(store: Store) -> None:
    ann, bob = await two_users(store)
    changed: list[int] = []
    facts = FactStore(store.db, on_change=changed.append)
    fact = await facts.add(
        ann, "Ann is vegetarian", origin_source="telegram:111", created_by="user"
    )
    changed.clear()

    assert not await facts.update(bob, fact.id, "Ann eats meat")
    assert not await facts.delete(bob, fact.id)
    assert await facts.get(bob, fact.id) is None
    assert await facts.list(bob) == []
    assert await facts.get(ann, fact.id) == fact
    assert await bodies(store) == [(ann, "Ann is vegetarian")]
    assert changed == []  # nothing changed: nobody's profile is dropped


async def test_a_deleted_fact_stays_deleted_when_an_update_comes_after(store: Store) -> None:
    ann, _ = await two_users(store)
    facts = FactStore(store.db)
    fact = await facts.add(
        ann, "lives in Porto", origin_source="telegram:111", created_by="deriver"
    )
    assert await facts.delete(ann, fact.id)
    assert not await facts.update(ann, fact.id, "lives in Lisbon", message_ids=[9])
    assert await facts.list(ann) == []
    assert not await facts.delete(ann, fact.id)  # twice deletes once


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_an_update_in_flight_when_the_fact_is_deleted_does_not_bring_it_back(
    store: Store, store_url: str
) -> None:
    # The delete holds the row (uncommitted) while the update reads it and then waits for
    # its row lock; once the delete commits, the update finds no row to change.
    ann, _ = await two_users(store)
    changed: list[int] = []
    facts = FactStore(store.db, on_change=changed.append)
    fact = await facts.add(
        ann, "lives in Porto", origin_source="telegram:111", created_by="deriver"
    )
    changed.clear()
    engine = create_async_engine(store_url)
    try:
        async with engine.connect() as deleting, engine.connect() as watch:
            await deleting.begin()
            f = memory_facts.c
            await deleting.execute(memory_facts.delete().where(f.id == fact.id))
            update = asyncio.create_task(facts.update(ann, fact.id, "lives in Lisbon"))
            await asyncio.wait_for(blocked_on_a_lock(watch), 10)
            await deleting.commit()
            updated = await asyncio.wait_for(update, 10)
    finally:
        await engine.dispose()
    assert await facts.list(ann) == []  # not resurrected
    assert updated is False  # the deriver is told: nothing was updated
    assert changed == []


async def blocked_on_a_lock(watch: Any) -> None:
    query = sa.text(
        "select count(*) from pg_stat_activity "
        "where datname = current_database() and wait_event_type = 'Lock'"
    )
    while not (await watch.execute(query)).scalar_one():
        await watch.rollback()  # pg_stat_activity is a snapshot per transaction
        await asyncio.sleep(0)


# -- bounds and merging ----------------------------------------------------------------------


async def test_beyond_max_facts_the_oldest_are_dropped_and_the_newest_kept(store: Store) -> None:
    ann, bob = await two_users(store)
    facts = FactStore(store.db, limits=FactLimits(max_facts=3))
    await facts.add(bob, "Bob's only fact", origin_source="telegram:222", created_by="tool")
    added = [
        await facts.add(ann, f"fact {n}", origin_source="telegram:111", created_by="tool")
        for n in range(5)
    ]
    assert [f.body for f in await facts.list(ann)] == ["fact 2", "fact 3", "fact 4"]

    # An update makes a fact new again: it outlives the ones not touched since.
    assert await facts.update(ann, added[2].id, "fact 2, updated")
    await facts.add(ann, "fact 5", origin_source="telegram:111", created_by="tool")
    assert [f.body for f in await facts.list(ann)] == ["fact 2, updated", "fact 4", "fact 5"]
    assert [f.body for f in await facts.list(bob)] == ["Bob's only fact"]  # not trimmed by Ann's


async def test_an_update_merges_the_message_ids_and_keeps_their_order(store: Store) -> None:
    ann, _ = await two_users(store)
    facts = FactStore(store.db)
    fact = await facts.add(
        ann, "works at Acme", origin_source="telegram:111", created_by="deriver", message_ids=[3, 5]
    )
    assert fact.message_ids == (3, 5)
    assert await facts.update(ann, fact.id, "works at Acme since 2024", message_ids=[5, 8, 3, 9])
    updated = await facts.get(ann, fact.id)
    assert updated is not None
    assert updated.body == "works at Acme since 2024"
    assert updated.message_ids == (3, 5, 8, 9)
    assert updated.created_at == fact.created_at and updated.updated_at >= fact.updated_at
    assert updated.origin_source == "telegram:111" and updated.created_by == "deriver"


# -- on_change -------------------------------------------------------------------------------


class Recording:
    """A database that notes when each unit of work has committed."""

    def __init__(self, db: Any, log: list[str]) -> None:
        self._db = db
        self._log = log

    @property
    def dialect(self) -> str:
        return self._db.dialect

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = await self._db.run(fn, *args, **kwargs)
        self._log.append(f"committed {fn.__name__}")
        return result


async def test_on_change_is_called_after_each_change_committed_and_only_then(
    store: Store,
) -> None:
    ann, _ = await two_users(store)
    log: list[str] = []
    facts = FactStore(
        Recording(store.db, log), on_change=lambda user: log.append(f"changed {user}")
    )  # type: ignore[arg-type]
    fact = await facts.add(ann, "likes tea", origin_source="telegram:111", created_by="tool")
    await facts.update(ann, fact.id, "likes green tea")
    await facts.list(ann)
    await facts.delete(ann, fact.id)
    await facts.delete(ann, fact.id)  # nothing left: no change
    await facts.update(ann, fact.id, "likes coffee")  # nor here
    await facts.delete_all(ann)
    assert log == [
        "committed add_in",
        f"changed {ann}",
        "committed update_in",
        f"changed {ann}",
        "committed list_in",
        "committed delete_in",
        f"changed {ann}",
        "committed delete_in",
        "committed update_in",
        "committed _delete_all",
        f"changed {ann}",
    ]
