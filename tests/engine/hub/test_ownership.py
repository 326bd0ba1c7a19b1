"""A fleet member's leases: its membership is renewed on time even while renewing its
chats' leases is slow (a lapsed member is taken for dead and its replies sent again), and
the chats' leases are renewed in one statement."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from engine.hub.fleet.ownership import FleetConfig, SourceOwnership
from engine.store import Store
from engine.store.leases import PROCESS_LEASE_PREFIX, Lease, Leases
from tests.pg import BACKENDS, database_url


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with database_url(request.param, tmp_path, migrated=True) as url:
        opened = await Store.open(url)
        try:
            yield opened
        finally:
            await opened.close()


class SlowSources(Leases):
    """Renewing the chats' leases hangs until let go; every other call counts."""

    def __init__(self, store: Store) -> None:
        super().__init__(store.db)
        self.let_go = asyncio.Event()
        self.batches = 0
        self.membership_renewals = 0

    async def renew_all(self, leases: Sequence[Lease], ttl_s: float) -> set[str]:
        self.batches += 1
        await self.let_go.wait()
        return await super().renew_all(leases, ttl_s)

    async def renew(self, lease: Lease, ttl_s: float) -> bool:
        if lease.name.startswith(PROCESS_LEASE_PREFIX):
            self.membership_renewals += 1
        return await super().renew(lease, ttl_s)


async def test_the_membership_is_renewed_while_the_chats_renewal_hangs(store: Store) -> None:
    leases = SlowSources(store)
    rounds = asyncio.Event()
    slept = 0

    async def sleep(_: float) -> None:  # each loop's wait, injected: no wall-clock time
        nonlocal slept
        slept += 1
        if slept > 20:
            rounds.set()
        await asyncio.sleep(0)

    ownership = SourceOwnership(leases, FleetConfig("a", lease_ttl_s=30), sleep=sleep)
    await ownership.join()
    for n in range(10):
        assert await ownership.claim(f"telegram:{n}")
    keeping = asyncio.create_task(ownership.keep(lambda lost: None))
    await asyncio.wait_for(rounds.wait(), 10)
    assert leases.batches == 1  # the chats' round is stuck in its one statement
    assert leases.membership_renewals >= 10  # and the membership goes on regardless
    leases.let_go.set()
    keeping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await keeping
    assert len(ownership.owned()) == 10


async def test_chats_renewed_together_and_the_lapsed_ones_reported_lost(store: Store) -> None:
    leases = Leases(store.db)
    ownership = SourceOwnership(leases, FleetConfig("a", lease_ttl_s=30))
    for n in range(3):
        assert await ownership.claim(f"telegram:{n}")
    await store.db.run(  # telegram:1 lapsed, and another process took it
        lambda conn: conn.exec_driver_sql(
            "UPDATE leases SET expires_at = expires_at - 3600 WHERE name = 'source:telegram:1'"
        )
    )
    assert await leases.acquire("source:telegram:1", "b", 30) is not None
    assert await ownership.renew_sources() == ["telegram:1"]
    assert ownership.owned() == ["telegram:0", "telegram:2"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class SwitchedRenewals(Leases):
    """The membership's renewals answer as the test says: kept, lapsed, or the database
    away (``fail``)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store.db)
        self.answer: bool | None = True  # None: raise

    async def renew(self, lease: Lease, ttl_s: float) -> bool:
        if self.answer is None:
            raise ConnectionError("the database is away")
        return self.answer and await super().renew(lease, ttl_s)

    async def acquire(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        if self.answer is None:
            raise ConnectionError("the database is away")
        return await super().acquire(name, owner, ttl_s)


def tenured(store: Store) -> tuple[SourceOwnership, SwitchedRenewals, Clock]:
    leases, clock = SwitchedRenewals(store), Clock()
    return (
        SourceOwnership(leases, FleetConfig("a", lease_ttl_s=4.0), monotonic=clock),
        leases,
        clock,
    )


async def test_what_is_taken_holds_until_a_quarter_lease_before_the_membership_could_end(
    store: Store,
) -> None:
    ownership, _, clock = tenured(store)
    assert not ownership.tenure_holds(ownership.mark())  # not a member yet
    await ownership.join()
    taken = ownership.mark()
    clock.now += 2.9
    assert ownership.tenure_holds(taken)
    clock.now += 0.2  # 3.1 s after the join: less than a quarter of the 4 s lease is left
    assert not ownership.tenure_holds(taken)
    await ownership.renew_membership()  # renewed (late, but unexpired): the tenure goes on
    assert ownership.tenure_holds(taken)


async def test_a_lapsed_membership_ends_the_tenure_of_what_was_taken_before(store: Store) -> None:
    """Paused past the lease: the renewal finds it lapsed and joins again. What was taken
    before may have been sent by another process by now; what is taken after is its own."""
    ownership, leases, clock = tenured(store)
    await ownership.join()
    before = ownership.mark()
    clock.now += 10.0
    leases.answer = False
    await ownership.renew_membership()
    after = ownership.mark()
    assert not ownership.tenure_holds(before)
    assert ownership.tenure_holds(after)


async def test_the_database_away_ends_the_tenure_until_joined_again(store: Store) -> None:
    ownership, leases, clock = tenured(store)
    await ownership.join()
    before = ownership.mark()
    leases.answer = None
    with pytest.raises(ConnectionError):
        await ownership.renew_membership()  # the renewal and the joining again both fail
    assert not ownership.tenure_holds(before)
    leases.answer = True
    clock.now += 1.0
    await ownership.join()
    assert not ownership.tenure_holds(before)
    assert ownership.tenure_holds(ownership.mark())


async def test_after_a_failed_joining_again_the_next_round_joins_rather_than_renews(
    store: Store,
) -> None:
    """The database away for a moment: the renewal and the joining again both fail, but
    the membership lease has not expired yet. The next round's renewal would keep it, and
    the tenure stayed broken for good: every reply the live member took was handed back,
    none sent (found by review on 2026-12-06). The round joins again instead."""
    ownership, leases, clock = tenured(store)
    await ownership.join()
    before = ownership.mark()
    leases.answer = None
    with pytest.raises(ConnectionError):
        await ownership.renew_membership()
    leases.answer = True
    clock.now += 1.0  # back well within the 4 s lease
    await ownership.renew_membership()
    assert not ownership.tenure_holds(before)  # taken before the break: not its own
    assert ownership.tenure_holds(ownership.mark())
    await ownership.renew_membership()  # and it goes on being renewed
    assert ownership.tenure_holds(ownership.mark())


async def test_leaving_ends_the_tenure(store: Store) -> None:
    ownership, _, _ = tenured(store)
    await ownership.join()
    taken = ownership.mark()
    await ownership.leave()
    assert not ownership.tenure_holds(taken)
