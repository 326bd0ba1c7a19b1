"""A fleet member's leases: its membership is renewed on time even while renewing its
chats' leases is slow (a lapsed member is taken for dead and its replies sent again), and
the chats' leases are renewed in one statement."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from engine.hub.ownership import PROCESS_LEASE_PREFIX, FleetConfig, SourceOwnership
from engine.store import Store
from engine.store.leases import Lease, Leases
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
