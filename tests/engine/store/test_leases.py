"""Leases on both back ends: acquire, renew, release, take-over after expiry, the fencing
epoch, a renewal after losing, racing acquirers on separate connections, and clock skew
(the process's clock is never asked)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

import engine.store.db as db_module
from engine.store import Store
from engine.store.db import connect
from engine.store.leases import Leases
from tests.engine.store.conftest import backend, store  # noqa: F401 (fixtures)
from tests.pg import database_url


async def expire(on: Store, name: str) -> None:
    """Move ``name``'s expiry into the past through the database (no waiting)."""
    await on.db.run(
        lambda conn: conn.execute(
            sa.text("UPDATE leases SET expires_at = expires_at - 3600 WHERE name = :n"),
            {"n": name},
        )
    )


async def test_a_free_lease_is_taken_and_refused_to_others_until_released(
    store: Store,  # noqa: F811
) -> None:
    leases = Leases(store.db)
    before = await leases.now()
    mine = await leases.acquire("r", "a", 30)
    assert mine is not None and (mine.owner, mine.epoch) == ("a", 1)
    assert before <= mine.acquired_at and mine.expires_at == pytest.approx(
        mine.acquired_at + 30, abs=0.5
    )
    assert await leases.acquire("r", "b", 30) is None
    assert await leases.holder("r") == mine
    assert await leases.release(mine)
    assert await leases.holder("r") is None
    theirs = await leases.acquire("r", "b", 30)
    assert theirs is not None and (theirs.owner, theirs.epoch) == ("b", 2)


async def test_renewing_extends_and_acquiring_again_keeps_the_epoch(
    store: Store,  # noqa: F811
) -> None:
    leases = Leases(store.db)
    mine = await leases.acquire("r", "a", 5)
    assert mine is not None
    assert await leases.renew(mine, 60)
    held = await leases.holder("r")
    assert held is not None and held.expires_at > mine.expires_at + 50
    again = await leases.acquire("r", "a", 5)  # already ours: ours, same token
    assert again is not None and again.epoch == mine.epoch
    assert again.acquired_at == mine.acquired_at


async def test_an_expired_lease_is_taken_over_and_the_old_owner_cannot_renew_or_release(
    store: Store,  # noqa: F811
) -> None:
    leases = Leases(store.db)
    old = await leases.acquire("r", "a", 30)
    assert old is not None
    await expire(store, "r")
    assert await leases.holder("r") is None
    new = await leases.acquire("r", "b", 30)
    assert new is not None and new.epoch == old.epoch + 1
    assert not await leases.renew(old, 30)
    assert not await leases.release(old)
    assert await leases.holder("r") == new
    # Every change of owner moves the token on, back to an old owner included.
    await expire(store, "r")
    back = await leases.acquire("r", "a", 30)
    assert back is not None and back.epoch == new.epoch + 1


async def test_an_expired_lease_cannot_be_renewed_even_by_its_owner(
    store: Store,  # noqa: F811
) -> None:
    leases = Leases(store.db)
    mine = await leases.acquire("r", "a", 30)
    assert mine is not None
    await expire(store, "r")
    assert not await leases.renew(mine, 30)


async def test_one_statement_renews_what_is_still_held_and_nothing_else(
    store: Store,  # noqa: F811
) -> None:
    leases = Leases(store.db)
    held = [await leases.acquire(name, "a", 5) for name in ("s1", "s2", "s3", "s4")]
    assert all(lease is not None for lease in held)
    s1, s2, s3, s4 = held  # type: ignore[misc]
    await expire(store, "s2")  # lapsed: not renewed, even by its owner
    await expire(store, "s3")
    assert await leases.acquire("s3", "b", 30) is not None  # taken over meanwhile
    await expire(store, "s4")
    back = await leases.acquire("s4", "a", 5)  # lapsed and taken again: a new epoch
    assert back is not None and back.epoch == s4.epoch
    assert await leases.renew_all([s1, s2, s3, s4], 60) == {"s1", "s4"}
    renewed = await leases.holder("s1")
    assert renewed is not None and renewed.expires_at > s1.expires_at + 50
    assert await leases.holder("s2") is None
    assert (await leases.holder("s3")).owner == "b"  # type: ignore[union-attr]
    assert await leases.renew_all([], 60) == set()
    with pytest.raises(ValueError):
        await leases.renew_all([s1, await leases.acquire("x", "b", 5)], 60)  # type: ignore[list-item]


async def test_a_short_lease_expires_on_the_databases_clock(store: Store) -> None:  # noqa: F811
    leases = Leases(store.db)
    mine = await leases.acquire("r", "a", 0.2)
    assert mine is not None and await leases.acquire("r", "b", 0.2) is None
    # Until the database's clock passes the expiry (about 0.2 s); a little more for
    # SQLite's millisecond clock.
    await asyncio.sleep(max(0.0, mine.expires_at - await leases.now()) + 0.01)
    theirs = await leases.acquire("r", "b", 0.2)
    assert theirs is not None and theirs.owner == "b"


async def test_names_are_independent_and_a_ttl_must_be_positive(store: Store) -> None:  # noqa: F811
    leases = Leases(store.db)
    assert await leases.acquire("one", "a", 30) is not None
    assert await leases.acquire("two", "b", 30) is not None
    with pytest.raises(ValueError, match="positive"):
        await leases.acquire("three", "a", 0)


async def test_racing_acquirers_on_their_own_connections_get_exactly_one_winner(
    backend: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    async with database_url(backend, tmp_path, migrated=True) as url:
        databases = [connect(url) for _ in range(10)]
        try:
            last = None
            for _ in range(3):
                results = await asyncio.gather(
                    *(Leases(db).acquire("race", f"p{i}", 30) for i, db in enumerate(databases))
                )
                winners = [r for r in results if r is not None]
                assert len(winners) == 1, results
                (winner,) = winners
                if last is not None:  # the token moves on with every change of owner
                    assert winner.epoch == last.epoch + (winner.owner != last.owner)
                last = winner
                await databases[0].run(
                    lambda conn: conn.execute(sa.text("UPDATE leases SET expires_at = 0"))
                )
        finally:
            for db in databases:
                await db.close()


async def test_ten_tasks_on_one_database_get_exactly_one_winner(store: Store) -> None:  # noqa: F811
    leases = Leases(store.db)
    results = await asyncio.gather(*(leases.acquire("race", f"t{i}", 30) for i in range(10)))
    assert len([r for r in results if r is not None]) == 1


async def test_a_process_clock_far_off_changes_nothing(
    store: Store,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    leases = Leases(store.db)
    mine = await leases.acquire("r", "a", 30)
    assert mine is not None

    # This process now believes it is an hour later (and every datetime with it): were the
    # expiry judged by it, "b" would take the lease at once.
    skew = 3600.0
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)

    class Later(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime.fromtimestamp(real_time() + skew, tz or UTC)

    monkeypatch.setattr(db_module.time, "time", lambda: real_time() + skew)
    monkeypatch.setattr("engine.store.schema.datetime", Later)
    assert await leases.acquire("r", "b", 30) is None
    assert await leases.holder("r") == mine
    assert abs(await leases.now() - real_time()) < 60  # the database's clock, not ours
    assert await leases.renew(mine, 30)
