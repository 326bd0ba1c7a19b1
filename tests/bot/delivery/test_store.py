"""The outbox in a fleet, on a real SQLite file: a claimed row whose process died, two
processes claiming one row at once, and platforms that never see each other's rows.

Fleet membership is real ``process:<id>`` leases (``engine.store.leases``), as the
fleet's members hold them; each process is an ``OutboxStore`` with its process id.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.delivery import OutboxStore, Pacing, Redelivery
from bot.delivery.store import OutboxRow
from bot.schema import LAYERS
from engine.store import Store
from engine.store.leases import PROCESS_LEASE_PREFIX, Leases
from tests.bot.delivery.fakes import FAKE, make_outbound, outbox_rows, wall
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


# -- a conversation's order in a fleet ------------------------------------------------------


async def enqueue(outbox: OutboxStore, conversation: str, *texts: str) -> list[OutboxRow]:
    rows = []
    for text in texts:
        row = await outbox.enqueue(conversation, f"final:{text}:0", {"text": text})
        assert row is not None
        rows.append(row)
    return rows


async def test_a_reply_waits_for_an_earlier_one_its_own_process_left_for_the_fleet(
    store: Store, leases: Leases
) -> None:
    """A's first reply waits for a retry (due later, for whichever process claims it first);
    its second is due now. A's retry loop finds only the second due: it holds it instead of
    sending it before the first. Once both are due they go out in order."""
    a = OutboxStore(store.db, FAKE, process_id="A")
    out, client, time = make_outbound(a, Pacing.unpaced(), tenure=HeldTenure())
    now = wall(time)
    first, second = await enqueue(a, "alice", "one", "two")
    await a.postpone(first.id, "Unavailable: down", now(), now() + timedelta(seconds=5))
    await a.reschedule([second.id], now())
    redelivery = Redelivery(out, a, now=now, sleep=time.sleep)

    assert await redelivery.run_due() == 1  # the second alone was due
    assert client.delivered() == []
    assert out.stats.held == 1
    assert [r["status"] for r in await outbox_rows(store)] == ["pending", "pending"]

    await time.sleep(5)
    while await redelivery.run_due():
        pass
    assert [t.payload["text"] for t in client.delivered("alice")] == ["one", "two"]


async def test_a_reply_waits_for_an_earlier_one_another_process_is_sending(
    store: Store, leases: Leases
) -> None:
    """B claimed A's first reply to retry it; A's second waits until B has sent it."""
    a = OutboxStore(store.db, FAKE, process_id="A")
    b = OutboxStore(store.db, FAKE, process_id="B")
    out, client, time = make_outbound(a, Pacing.unpaced(), tenure=HeldTenure())
    first, second = await enqueue(a, "alice", "one", "two")
    await a.postpone(first.id, "Unavailable: down", NOW, NOW)
    assert [r.id for r in await b.claim_due(NOW, NOW + LEASE, 10)] == [first.id]

    await out.deliver_rows(out.taken([second], out.mark()))
    assert client.delivered() == []
    assert out.stats.held == 1

    await b.mark_sent(first.id, "m0")
    await time.sleep(1)
    await Redelivery(out, a, now=wall(time), sleep=time.sleep).run_due()
    assert [t.payload["text"] for t in client.delivered("alice")] == ["two"]


async def test_one_answers_parts_go_out_back_to_back_in_a_fleet(
    store: Store, leases: Leases
) -> None:
    """Parts recorded together: each earlier part is on its way from this very process,
    so none is held behind another, though none is recorded sent yet."""
    a = OutboxStore(store.db, FAKE, process_id="A")
    out, client, _time = make_outbound(a, Pacing.unpaced(), tenure=HeldTenure())
    rows = await enqueue(a, "alice", "part 1", "part 2", "part 3")
    await out.deliver_rows(out.taken(rows, out.mark()))
    assert [t.payload["text"] for t in client.delivered("alice")] == ["part 1", "part 2", "part 3"]
    assert out.stats.held == 0
    await out.flush()
    assert [r["status"] for r in await outbox_rows(store)] == ["sent"] * 3


class MarksFailOnce(OutboxStore):
    """An outbox whose first "sent" record fails (the database away for a moment)."""

    failures = 1

    async def mark_sent_many(self, sent: Sequence[tuple[int, str | None]]) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the database is away")
        await super().mark_sent_many(sent)


class MarksFailTwice(MarksFailOnce):
    """The first record and the one more try of a stop's flush fail."""

    failures = 2


async def test_a_reply_sent_but_not_yet_recorded_holds_back_no_later_one(
    store: Store, leases: Leases
) -> None:
    """The first reply went out but its record failed: it is sent, not waiting, so the
    second goes out at once, and both records are written with it."""
    a = MarksFailTwice(store.db, FAKE, process_id="A")
    out, client, _time = make_outbound(a, Pacing.unpaced(), tenure=HeldTenure())
    [first] = await enqueue(a, "alice", "one")
    await out.deliver_rows(out.taken([first], out.mark()))
    await out.flush()
    assert [r["status"] for r in await outbox_rows(store)] == ["pending"]

    [second] = await enqueue(a, "alice", "two")
    await out.deliver_rows(out.taken([second], out.mark()))
    await out.flush()
    assert [t.payload["text"] for t in client.delivered("alice")] == ["one", "two"]
    assert out.stats.held == 0
    assert [r["status"] for r in await outbox_rows(store)] == ["sent", "sent"]


async def test_a_failed_record_of_a_delivery_is_written_by_a_stops_flush(
    store: Store, leases: Leases
) -> None:
    """The reply went out but its record failed, and nothing else is sent: the stop's flush
    tries once more and writes it (left pending, it would be sent again by the fleet)."""
    a = MarksFailOnce(store.db, FAKE, process_id="A")
    out, client, _time = make_outbound(a, Pacing.unpaced(), tenure=HeldTenure())
    [row] = await enqueue(a, "alice", "the answer")
    await out.deliver_rows(out.taken([row], out.mark()))
    await out.flush()
    assert [t.payload["text"] for t in client.delivered("alice")] == ["the answer"]
    assert [r["status"] for r in await outbox_rows(store)] == ["sent"]


async def test_a_failed_record_of_a_delivery_is_tried_again_without_a_next_send(
    store: Store, leases: Leases
) -> None:
    """The record failed and no other reply comes: the writer tries again after a pause,
    on its own, and the row is recorded sent."""
    a = MarksFailOnce(store.db, FAKE, process_id="A")
    out, _client, _time = make_outbound(
        a, Pacing.unpaced(), tenure=HeldTenure(), mark_retry_s=0.001
    )  # the database's pause: real time, short
    [row] = await enqueue(a, "alice", "the answer")
    await out.deliver_rows(out.taken([row], out.mark()))
    async with asyncio.timeout(10):
        while [r["status"] for r in await outbox_rows(store)] != ["sent"]:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
    assert a.failures == 0


async def test_a_cards_reject_window_is_kept_until_the_card_closes(any_db_url: str) -> None:
    """Kept for a restart inside it (migration 0031); gone with the card, so a card shown
    again later starts without one (found by review on 2026-12-07)."""
    from bot.delivery import CardRow, CardStore

    store = await Store.open(any_db_url, LAYERS)
    try:
        cards = CardStore(store.db, "telegram")
        await cards.save(CardRow(7, "approval", "telegram:1", "1", "500", "Run ls?", None, "open"))
        window = {"until": NOW.isoformat(), "by": "Ann", "decider": ["1", False, True]}
        await cards.open_window(7, window)
        await cards.save(CardRow(7, "approval", "telegram:1", "1", "501", "Run ls?", None, "open"))
        [kept] = await cards.open()
        assert (kept.message_id, kept.reject_window) == ("501", window)  # a save keeps it
        assert await cards.close(7, "rejected")
        closed = await cards.get(7)
        assert closed is not None and closed.reject_window is None
    finally:
        await store.close()


async def test_a_conversation_refused_for_good_is_noted_until_a_delivery_there_is_sent(
    any_db_url: str,
) -> None:
    """Migration 0032: the latest refusal for good of a conversation is kept (one note, its
    newest reason), per platform, and a delivery sent there clears it."""
    store = await Store.open(any_db_url, LAYERS)
    try:
        fake, other = OutboxStore(store.db, FAKE), OutboxStore(store.db, "other")
        first, second, third = await enqueue(fake, "42", "one", "two", "three")
        [theirs] = await enqueue(other, "42", "theirs")
        assert await fake.mark_failed(first.id, "Forbidden: bot was kicked", gone=True)
        assert await fake.mark_failed(second.id, "Forbidden: bot was blocked", gone=True)
        assert await fake.gone_reason("42") == "Forbidden: bot was blocked"
        assert await other.gone_reason("42") is None
        await other.mark_sent_many([(theirs.id, "9")])  # another platform's chat 42
        assert await fake.gone_reason("42") == "Forbidden: bot was blocked"
        await fake.mark_sent_many([(third.id, "10")])
        assert await fake.gone_reason("42") is None
    finally:
        await store.close()


async def test_an_older_delivery_marked_late_does_not_clear_a_newer_refusal(
    any_db_url: str,
) -> None:
    """A sent mark is batched (and another process records its own): one of a row sent
    before the block, committed after the refusal, cleared the note (found by review)."""
    store = await Store.open(any_db_url, LAYERS)
    try:
        fake = OutboxStore(store.db, FAKE)
        earlier, later = await enqueue(fake, "42", "sent before the block", "refused after")
        # The platform took ``earlier``; its mark waits in the batch. Then she blocks the
        # bot, and ``later`` is refused for good: noted at once.
        assert await fake.mark_failed(later.id, "Forbidden: bot was blocked", gone=True)
        # The batch carrying the earlier delivery's mark commits now.
        await fake.mark_sent_many([(earlier.id, "7")])
        assert await fake.gone_reason("42") == "Forbidden: bot was blocked", (
            "a delivery older than the refusal cleared it"
        )
    finally:
        await store.close()
