"""The outbox in a fleet, on a real SQLite file: a claimed row whose process died, two
processes claiming one row at once, and platforms that never see each other's rows.

Fleet membership is real ``process:<id>`` leases (``engine.store.leases``), as the
fleet's members hold them; each process is an ``OutboxStore`` with its process id.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.delivery import OutboxStore, Pacing, Redelivery
from bot.schema import LAYERS
from engine.store import Store
from engine.store.leases import PROCESS_LEASE_PREFIX, Leases
from tests.bot.delivery.fakes import FAKE, make_outbound, outbox_rows
from tests.pg import BACKENDS, database_url

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
LEASE = timedelta(minutes=15)


class HeldTenure:
    """A fleet process whose membership never broke."""

    def __init__(self) -> None:
        self.marks = 0

    def mark(self) -> float:
        self.marks += 1
        return float(self.marks)

    def tenure_holds(self, mark: float) -> bool:
        return True


@pytest.fixture
async def leases(store: Store) -> Leases:
    leases = Leases(store.db)
    for process in ("A", "B"):
        assert await leases.acquire(PROCESS_LEASE_PREFIX + process, process, 60.0)
    return leases


@pytest.fixture(params=BACKENDS)
async def any_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """SQLite, and PostgreSQL when configured (``CHATHUB_TEST_POSTGRES_URL``): SQLite runs
    one writer at a time, so only PostgreSQL can interleave two claims' statements."""
    async with database_url(request.param, tmp_path, migrated=True) as url:
        yield url


async def die(leases: Leases, process: str) -> None:
    """``process``'s membership ends, as its lease's expiry would end it."""
    lease = await leases.holder(PROCESS_LEASE_PREFIX + process)
    assert lease is not None
    assert await leases.release(lease)


async def test_a_row_claimed_by_a_process_that_died_is_sent_by_another_once(
    store: Store, leases: Leases
) -> None:
    """B postponed a reply; A claimed it to retry it (in flight with A: no schedule) and
    died before sending. While A is a member the row stays A's; once A's lease is gone,
    B's orphan scan makes it due, and B sends it, once."""
    a = OutboxStore(store.db, FAKE, process_id="A")
    b = OutboxStore(store.db, FAKE, process_id="B")
    row = await b.enqueue("alice", "final:1:0", {"text": "the answer"})
    assert row is not None
    await b.postpone(row.id, "Unavailable: down", NOW, NOW)
    [claimed] = await a.claim_due(NOW, NOW + LEASE, 10)
    assert claimed.id == row.id
    [stored] = await outbox_rows(store)
    assert (stored["sending_by"], stored["next_attempt_at"]) == ("A", None)

    assert await b.recover_orphans(NOW) == 0  # A is alive: its claim holds
    assert await b.claim_due(NOW + LEASE * 100, NOW + LEASE * 101, 10) == []  # never due

    await die(leases, "A")
    assert await b.recover_orphans(NOW) == 1
    assert await b.recover_orphans(NOW) == 0  # due now: not in flight any more

    out, client, time = make_outbound(b, Pacing.unpaced(), tenure=HeldTenure())
    redelivery = Redelivery(out, b, now=lambda: NOW, sleep=time.sleep)
    assert await redelivery.run_due() == 1
    [sent] = client.delivered()
    assert (sent.conversation, sent.payload) == ("alice", {"text": "the answer"})
    [stored] = await outbox_rows(store)
    assert (stored["status"], stored["message_id"]) == ("sent", sent.message_id)
    assert (stored["recorded_by"], stored["sending_by"]) == ("B", "B")
    assert await redelivery.run_due() == 0
    assert await a.claim_due(NOW + LEASE, NOW + LEASE, 10) == []  # nothing left to send
    assert len(client.tries) == 1


async def test_two_processes_claiming_one_row_at_once_get_it_once(any_db_url: str) -> None:
    """A and B, each with its own connection to the database, claim the same due row at
    the same moment: exactly one of them gets it, and the row is in flight with that one."""
    store = await Store.open(any_db_url, LAYERS)
    other = await Store.open(any_db_url, LAYERS)
    try:
        a = OutboxStore(store.db, FAKE, process_id="A")
        b = OutboxStore(other.db, FAKE, process_id="B")
        for round_ in range(10):
            row = await a.enqueue(f"chat{round_}", f"final:{round_}:0", {"text": "x"})
            assert row is not None
            await a.postpone(row.id, "Unavailable: down", NOW, NOW)  # due now, for anyone
            by_a, by_b = await asyncio.gather(
                a.claim_due(NOW, NOW + LEASE, 10), b.claim_due(NOW, NOW + LEASE, 10)
            )
            assert sorted(r.id for r in [*by_a, *by_b]) == [row.id], round_
            winner = "A" if by_a else "B"
            stored = {r["id"]: r for r in await outbox_rows(store)}[row.id]
            assert (stored["sending_by"], stored["next_attempt_at"]) == (winner, None)
    finally:
        await other.close()
        await store.close()


async def test_one_process_alone_claims_under_a_lease_and_two_claimers_share_nothing(
    store: Store,
) -> None:
    """Outside a fleet a claim is a lease (due again at its end): two claimers at once on
    one database still never both get a row."""
    first, second = OutboxStore(store.db, FAKE), OutboxStore(store.db, FAKE)
    ids = []
    for i in range(20):
        row = await first.enqueue(f"chat{i % 4}", f"final:{i}:0", {"text": str(i)})
        assert row is not None
        ids.append(row.id)
    assert await first.recover(NOW) == 20
    got = await asyncio.gather(
        first.claim_due(NOW, NOW + LEASE, 50), second.claim_due(NOW, NOW + LEASE, 50)
    )
    claimed = [r.id for rows in got for r in rows]
    assert sorted(claimed) == ids  # each once
    assert await first.claim_due(NOW + LEASE - timedelta(seconds=1), NOW, 50) == []
    again = await second.claim_due(NOW + LEASE, NOW + LEASE * 2, 50)
    assert [r.id for r in again] == ids  # the lease ended: due again


async def test_platforms_share_the_tables_but_never_each_others_rows(store: Store) -> None:
    fake, other = OutboxStore(store.db, FAKE), OutboxStore(store.db, "other")
    mine = await fake.enqueue("room", "final:1:0", {"text": "fake's"})
    theirs = await other.enqueue("room", "final:1:0", {"text": "other's"})  # same key: fine
    assert mine is not None and theirs is not None
    assert await fake.enqueue("room", "final:1:0", {"text": "again"}) is None
    assert [r.id for r in await fake.pending()] == [mine.id]
    assert [r.id for r in await other.pending()] == [theirs.id]
    assert await fake.recover(NOW) == 1
    assert [r.id for r in await fake.claim_due(NOW, NOW + LEASE, 10)] == [mine.id]
    assert await other.claim_due(NOW, NOW + LEASE, 10) == []  # not recovered: not due
    await fake.mark_failed(mine.id, "Refused: gone")
    assert await other.pending() == [theirs]
    assert [r["platform"] for r in await outbox_rows(store, "other")] == ["other"]
