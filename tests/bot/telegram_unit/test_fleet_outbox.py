"""A fleet's outbox: a reply is sent by the process that took it, while its membership
holds; a process paused past its membership lease hands its rows back instead of sending
them a second time, and a dead process's rows (recorded or claimed) are sent by another.

Two processes, A and B, share one database: each has its own ``TelegramStore`` (its
process id; its outbox is ``store.outbox``), ``Outbound`` and fake Bot API. Their memberships are real ``process:<id>``
leases; A's tenure (what its ``SourceOwnership`` would say) is a switch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.delivery import (
    Delivery,
    Outbound,
    OutboxRow,
    OutboxStore,
    Pacing,
    Redelivery,
    RetrySchedule,
)
from bot.delivery.tables import platform_outbox
from bot.telegram.sending.api import Json, ServerError
from bot.telegram.sending.delivery import TelegramClient
from bot.telegram.store import TelegramStore
from engine.store import Store
from engine.store.leases import PROCESS_LEASE_PREFIX, Leases
from tests.bot.telegram_unit.fakes import FakeBotApi
from tests.clock import FakeTime
from tests.pg import BACKENDS, database_url

CHAT = 42
CHAT_KEY = str(CHAT)  # the conversation, as the outbox keys it
NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


class SwitchTenure:
    """A fleet process's tenure, switched by the test: marks count up; ``lapsed_after``
    marks taken at or before it no longer hold (the membership broke after them)."""

    def __init__(self) -> None:
        self.marks = 0
        self.lapsed_after: int | None = None
        #: False: broken for every mark, those taken from now on too (not joined again).
        self.holding = True

    def mark(self) -> float:
        self.marks += 1
        return float(self.marks)

    def tenure_holds(self, mark: float) -> bool:
        return self.holding and (self.lapsed_after is None or mark > self.lapsed_after)

    def lapse(self) -> None:
        self.lapsed_after = self.marks


@dataclass
class Process:
    name: str
    store: TelegramStore
    api: FakeBotApi
    out: Outbound
    tenure: SwitchTenure
    redelivery: Redelivery

    @property
    def outbox(self) -> OutboxStore:
        return self.store.outbox

    def sent(self) -> list[str]:
        return [
            call.kwargs.get("text") or call.args[1] for call in self.api.calls_to("send_message")
        ]


@dataclass
class Fleet:
    db: Store
    leases: Leases
    #: The wall clock every process reads (a test moves it on).
    wall: list[datetime] = field(default_factory=lambda: [NOW])

    def now(self) -> datetime:
        return self.wall[0]

    def process(self, name: str, pacing: Pacing | None = None) -> Process:
        store = TelegramStore(self.db.db, process_id=name)
        time = FakeTime()
        api = FakeBotApi(clock=time)
        tenure = SwitchTenure()
        out = Outbound(
            TelegramClient(api),
            store.outbox,
            pacing or Pacing.unpaced(max_attempts=1),
            clock=time,
            sleep=time.sleep,
            now=self.now,
            schedule=RetrySchedule(),
            tenure=tenure,
        )
        redelivery = Redelivery(out, store.outbox, now=self.now, sleep=time.sleep)
        return Process(name, store, api, out, tenure, redelivery)

    async def join(self, name: str) -> None:
        assert await self.leases.acquire(PROCESS_LEASE_PREFIX + name, name, 60.0)

    async def die(self, name: str) -> None:
        """``name``'s membership ends, as its expiry would end it."""
        lease = await self.leases.holder(PROCESS_LEASE_PREFIX + name)
        assert lease is not None
        assert await self.leases.release(lease)

    async def rows(self) -> list[dict[str, Any]]:
        def read(conn: sa.Connection) -> list[dict[str, Any]]:
            o = platform_outbox
            return [dict(r._mapping) for r in conn.execute(sa.select(o).order_by(o.c.id))]

        return await self.db.db.run(read)


@pytest.fixture(params=BACKENDS)
async def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Fleet]:
    async with database_url(request.param, tmp_path, migrated=True) as url:
        store = await Store.open(url)
        try:
            fleet = Fleet(store, Leases(store.db))
            await fleet.join("A")
            await fleet.join("B")
            yield fleet
        finally:
            await store.close()


async def record(process: Process, key: str, *texts: str) -> list[OutboxRow]:
    """Rows recorded the way a turn records its answer: marked, then enqueued."""
    mark = process.out.mark()
    rows = [
        await process.outbox.enqueue(CHAT_KEY, f"{key}:{i}", {"text": t})
        for i, t in enumerate(texts)
    ]
    return process.out.taken([row for row in rows if row is not None], mark)


def gate(process: Process, text: str, *, fail: bool = False) -> tuple[asyncio.Event, asyncio.Event]:
    """``process``'s first send of ``text`` waits (the platform took it, its answer is on
    the way) until the second event is set; ``fail``: the answer is then a 502."""
    taken, answer = asyncio.Event(), asyncio.Event()
    send = process.api.send_message
    gated = [True]

    async def slow(chat_id: int, sent: str, **kwargs: Any) -> Json:
        if sent == text and gated[0]:
            gated[0] = False
            taken.set()
            await answer.wait()
            if fail:
                raise ServerError("Bad Gateway")
        return await send(chat_id, sent, **kwargs)

    process.api.send_message = slow  # type: ignore[method-assign]
    return taken, answer


async def test_a_reply_is_sent_by_its_recorder_while_its_membership_holds(fleet: Fleet) -> None:
    a = fleet.process("A")
    rows = await record(a, "final:1", "the answer")
    await a.out.deliver_rows(rows)
    await a.out.flush()
    assert a.sent() == ["the answer"]
    [row] = await fleet.rows()
    assert (row["status"], row["recorded_by"]) == ("sent", "A")


async def test_a_paused_recorder_hands_its_reply_back_and_another_sends_it_once(
    fleet: Fleet,
) -> None:
    """A recorded a two-part answer, then was paused past its membership lease: when it
    goes on it sends nothing; both parts are due for the fleet, and B sends them, in order."""
    a, b = fleet.process("A"), fleet.process("B")
    rows = await record(a, "final:1", "part one", "part two")
    a.tenure.lapse()
    await a.out.deliver_rows(rows)
    assert a.sent() == []
    assert a.out.stats.released == 2
    assert [(r["status"], r["next_attempt_at"] is not None) for r in await fleet.rows()] == [
        ("pending", True),
        ("pending", True),
    ]
    assert await b.redelivery.run_due() == 2
    assert b.sent() == ["part one", "part two"]
    assert [(r["status"], r["recorded_by"], r["sending_by"]) for r in await fleet.rows()] == [
        ("sent", "A", "B"),
        ("sent", "A", "B"),
    ]
    assert await a.redelivery.run_due() == 0  # nothing is left for A to send again
    assert a.sent() == []


async def turns_until(check: Callable[[], object], turns: int = 100_000) -> None:
    """Let the event loop run until ``check()`` holds (no wall-clock time: the loops
    under test sleep on a fake clock)."""
    for _ in range(turns):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("never came true")


async def test_a_member_whose_tenure_is_broken_claims_nothing_until_it_holds_again(
    fleet: Fleet,
) -> None:
    """Its membership lapsed and not joined again yet: each row its retry loop claimed
    was handed straight back and claimed again, a busy loop of the database (found by
    review on 2026-12-06). It pauses instead, and sends once the tenure holds again."""
    a = fleet.process("A")
    rows = await record(a, "final:1", "the answer")
    a.tenure.holding = False
    await a.out.deliver_rows(rows)  # handed back: due for the fleet
    claims = 0
    claim_due = a.outbox.claim_due

    async def counted(*args: Any, **kwargs: Any) -> list[OutboxRow]:
        nonlocal claims
        claims += 1
        return await claim_due(*args, **kwargs)

    a.outbox.claim_due = counted  # type: ignore[method-assign]
    sleeps = a.redelivery._sleep.__self__.sleeps  # type: ignore[attr-defined]
    loop = asyncio.create_task(a.redelivery.run())
    try:
        await turns_until(lambda: claims >= 20 or sum(sleeps) >= 5.0)
        assert claims <= 1 and a.sent() == []
        a.tenure.holding = True
        await turns_until(a.sent)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert a.sent() == ["the answer"]


async def test_a_tenure_broken_during_the_retry_wait_sends_no_second_try(fleet: Fleet) -> None:
    """The first try fails with a 500; while A waits to try again its membership lapses:
    the retry is not sent, and the row goes back to the fleet."""
    a = fleet.process("A", Pacing.unpaced(max_attempts=3))
    a.api.fail("send_message", ServerError("Bad Gateway"))
    original_sleep = a.out._sleep

    async def sleep_and_lapse(delay: float) -> None:  # the backoff: A is paused there
        a.tenure.lapse()
        await original_sleep(delay)

    a.out._sleep = sleep_and_lapse
    [row] = await record(a, "final:1", "the answer")
    outcome, _ = await a.out.attempt(row)
    assert outcome is Delivery.RELEASED
    assert len(a.api.calls_to("send_message")) == 1  # the failed try only
    [stored] = await fleet.rows()
    assert stored["status"] == "pending" and stored["next_attempt_at"] is not None


async def test_a_row_another_process_already_took_is_not_handed_back(fleet: Fleet) -> None:
    """B took A's row for an orphan (A had lapsed) and claimed it; A, going on, must not
    make B's claim due again: it sends nothing and the row stays B's."""
    a, b = fleet.process("A"), fleet.process("B")
    [row] = await record(a, "final:1", "the answer")
    await fleet.die("A")
    assert await b.out.recover_orphans() == 1
    claimed = await b.outbox.claim_due(NOW, NOW, 10)
    assert [r.id for r in claimed] == [row.id]
    a.tenure.lapse()
    assert await a.outbox.release(row.id, NOW) is False
    outcome, _ = await a.out.attempt(row)
    assert outcome is Delivery.RELEASED  # not sent
    assert a.sent() == []
    [stored] = await fleet.rows()
    assert (stored["sending_by"], stored["next_attempt_at"]) == ("B", None)


async def test_a_dead_processs_recorded_rows_are_sent_by_another_and_a_live_ones_are_not(
    fleet: Fleet,
) -> None:
    a, b = fleet.process("A"), fleet.process("B")
    await record(a, "final:1", "A's answer")
    await record(b, "final:2", "B's own answer")  # B's in-flight row: never its own orphan
    assert await b.out.recover_orphans() == 0  # A is a live member: its row stays A's
    await fleet.die("A")
    assert await b.out.recover_orphans() == 1
    assert await b.redelivery.run_due() == 1
    assert b.sent() == ["A's answer"]


async def test_a_later_reply_waits_for_an_earlier_one_a_dead_process_left(fleet: Fleet) -> None:
    """A recorded the chat's first answer and died before sending it; the chat moved to B,
    which answers the next message: B holds its reply until A's is sent (by whoever takes
    it for an orphan), so the chat reads them in order."""
    a, b = fleet.process("A"), fleet.process("B")
    await record(a, "final:1", "first answer")
    later = await record(b, "final:2", "second answer", "its second part")
    await b.out.deliver_rows(later)
    assert b.sent() == []  # held behind A's row, and its second part behind the first
    assert b.out.stats.held >= 1
    assert await b.redelivery.run_due() == 0  # held a moment: not due yet
    await fleet.die("A")
    assert await b.out.recover_orphans() == 1
    assert await b.redelivery.run_due() == 1  # A's row, due at once
    fleet.wall[0] = NOW + timedelta(seconds=5)
    assert await b.redelivery.run_due() == 2
    await b.out.flush()
    assert b.sent() == ["first answer", "second answer", "its second part"]
    assert [r["status"] for r in await fleet.rows()] == ["sent", "sent", "sent"]


async def test_a_reply_waits_for_an_earlier_one_this_process_is_redelivering(
    fleet: Fleet,
) -> None:
    """B took a dead A's reply to the chat and is sending it when B's own next reply comes:
    the next one waits until the earlier one is out, never overtaking it (a kill loop read
    message 2's answer before message 1's)."""
    a, b = fleet.process("A"), fleet.process("B")
    await record(a, "final:1", "first answer")
    await fleet.die("A")
    assert await b.out.recover_orphans() == 1
    taken, answer = asyncio.Event(), asyncio.Event()
    send = b.api.send_message

    async def slow_first(chat_id: int, text: str, **kwargs: Any) -> Json:
        if text == "first answer":
            taken.set()
            await answer.wait()  # Telegram took it; its answer is on the way
        return await send(chat_id, text, **kwargs)

    b.api.send_message = slow_first  # type: ignore[method-assign]
    redelivering = asyncio.create_task(b.redelivery.run_due())
    await taken.wait()
    later = await record(b, "final:2", "second answer")
    await b.out.deliver_rows(later)
    assert b.sent() == []  # held behind the row on its way
    answer.set()
    assert await redelivering == 1
    fleet.wall[0] = NOW + timedelta(seconds=5)
    assert await b.redelivery.run_due() == 1
    await b.out.flush()
    assert b.sent() == ["first answer", "second answer"]


async def test_a_row_this_process_claimed_waits_for_its_turn_without_being_due_again(
    fleet: Fleet,
) -> None:
    """B claimed two waiting replies of the chat and sends the first; its next reply comes
    meanwhile and queues behind them: the second, claimed and waiting for its turn, is not
    made due again (A would claim it and send it while B does: a kill loop read one reply
    twice from two live processes)."""
    a, b = fleet.process("A"), fleet.process("B")
    a_rows = await record(a, "final:0", "A's earlier answer")
    first = await record(b, "final:1", "first answer")
    await b.out.deliver_rows(first)  # held behind A's row, on its way with A
    second = await record(b, "final:2", "second answer")
    await b.out.deliver_rows(second)  # queued behind the first
    assert b.sent() == [] and b.out.postponements.waiting(CHAT_KEY) == {
        first[0].id,
        second[0].id,
    }
    await a.out.deliver_rows(a_rows)
    await a.out.flush()
    fleet.wall[0] = NOW + timedelta(seconds=1)  # the hold is over

    released = {"first answer": asyncio.Event(), "second answer": asyncio.Event()}
    taken = {text: asyncio.Event() for text in released}
    send = b.api.send_message

    async def slow(chat_id: int, text: str, **kwargs: Any) -> Json:
        if text in released:
            taken[text].set()
            await released[text].wait()  # Telegram took it; its answer is on the way
        return await send(chat_id, text, **kwargs)

    b.api.send_message = slow  # type: ignore[method-assign]
    redelivering = asyncio.create_task(b.redelivery.run_due())
    await taken["first answer"].wait()
    third = await record(b, "final:3", "third answer")
    await b.out.deliver_rows(third)  # queued behind what B still holds of the chat
    released["first answer"].set()
    await taken["second answer"].wait()
    await a.redelivery.run_due()  # A claims what is due of the chat now
    released["second answer"].set()
    assert await redelivering == 2
    fleet.wall[0] = NOW + timedelta(seconds=5)
    await a.redelivery.run_due()
    await b.redelivery.run_due()
    await a.out.flush()
    await b.out.flush()
    sent = b.sent() + a.sent()
    assert sorted(sent) == sorted(
        ["A's earlier answer", "first answer", "second answer", "third answer"]
    )
    assert b.sent()[:2] == ["first answer", "second answer"]


async def test_a_row_another_process_claimed_is_never_made_due_again_by_this_one(
    fleet: Fleet,
) -> None:
    """A held its reply (an earlier one of the chat was with B); B claimed it when it came
    due and is sending it. A's next reply to the chat queues behind the rows A still holds:
    B's claim is not moved (it would be due again, and sent a second time), and A stops
    waiting for it."""
    a, b = fleet.process("A"), fleet.process("B")
    await record(b, "final:0", "B's earlier answer")
    [held] = await record(a, "final:1", "the answer")
    await a.out.deliver_rows([held])
    assert a.sent() == [] and a.out.postponements.waiting(CHAT_KEY) == {held.id}
    fleet.wall[0] = NOW + timedelta(seconds=1)
    [claimed] = await b.outbox.claim_due(fleet.now(), fleet.now(), 10)
    assert claimed.id == held.id
    [later] = await record(a, "final:2", "the next answer")
    await a.out.deliver_rows([later])
    assert a.out.postponements.waiting(CHAT_KEY) == {later.id}  # B's row let go
    rows = {r["id"]: r for r in await fleet.rows()}
    assert (rows[held.id]["sending_by"], rows[held.id]["next_attempt_at"]) == ("B", None)
    assert await a.outbox.reschedule([held.id], NOW) == set()


async def test_a_reply_waits_for_an_earlier_one_of_its_own_process_not_on_its_way(
    fleet: Fleet,
) -> None:
    """An earlier row of B's own that B is not sending (waiting for a retry, due for the
    whole fleet) holds the next one back as another process's would: B's own rows are
    not in order by themselves (the kill loop read message 3's answer before message 2's
    when they were taken to be). Once the earlier one is out, the next follows."""
    b = fleet.process("B")
    earlier = await record(b, "final:1", "an earlier answer, not on its way yet")
    later = await record(b, "final:2", "the next answer")
    await b.out.deliver_rows(later)
    assert b.sent() == []
    assert b.out.stats.held == 1

    await b.out.deliver_rows(earlier)  # queued behind what waits in its conversation
    fleet.wall[0] = NOW + timedelta(seconds=1)  # the hold is over
    assert await b.redelivery.run_due() == 2
    assert b.sent() == ["an earlier answer, not on its way yet", "the next answer"]


async def test_a_member_that_joined_again_keeps_what_it_took_since(fleet: Fleet) -> None:
    """Membership is read by the recovering statement itself: A lapsed, then joined again
    and recorded a reply; B's recovery after that leaves the reply to A."""
    a, b = fleet.process("A"), fleet.process("B")
    await fleet.die("A")
    await fleet.join("A")
    await record(a, "final:1", "the answer")
    assert await b.out.recover_orphans() == 0


async def test_a_dead_processs_claimed_retry_is_due_again_within_a_lease(fleet: Fleet) -> None:
    """A claimed a postponed reply to retry it and died before sending: the claim makes the
    row A's in flight, so B's next orphan scan makes it due (a single process's claim lease
    would have held it for 15 minutes)."""
    a, b = fleet.process("A"), fleet.process("B")
    [row] = await record(b, "final:1", "the answer")
    await b.outbox.postpone(row.id, "Bad Gateway", NOW, NOW)
    [claimed] = await a.outbox.claim_due(NOW, NOW, 10)
    stored = (await fleet.rows())[0]
    assert (stored["recorded_by"], stored["sending_by"], stored["next_attempt_at"]) == (
        "B",
        "A",
        None,
    )
    assert await b.redelivery.run_due() == 0  # in flight with A: not B's to send
    await fleet.die("A")
    assert await b.out.recover_orphans() == 1
    assert await b.redelivery.run_due() == 1
    assert b.sent() == ["the answer"]
    assert claimed.id == row.id


async def test_a_row_handed_back_while_the_database_was_away_is_recovered_later(
    fleet: Fleet,
) -> None:
    a = fleet.process("A")
    [row] = await record(a, "final:1", "the answer")
    a.tenure.lapse()

    async def away(outbox_id: int, now: datetime) -> bool:
        raise ConnectionError("the database is away")

    real_release = a.outbox.release
    a.outbox.release = away  # type: ignore[method-assign]
    outcome, _ = await a.out.attempt(row)
    assert outcome is Delivery.RELEASED
    assert a.out.handback is not None
    assert a.out.handback.stranded == {row.id}
    a.outbox.release = real_release  # type: ignore[method-assign]
    assert await a.out.recover_orphans() == 1  # its own row, handed back now
    assert a.out.handback.stranded == set()
    assert await a.redelivery.run_due() == 1  # claimed anew, under a new mark
    assert a.sent() == ["the answer"]


async def test_a_row_taken_without_a_mark_is_never_sent_unchecked_in_a_fleet(
    fleet: Fleet,
) -> None:
    a = fleet.process("A")
    row = await a.outbox.enqueue(CHAT_KEY, "final:1:0", {"text": "the answer"})
    assert row is not None and row.taken_at is None
    outcome, _ = await a.out.attempt(row)
    assert outcome is Delivery.RELEASED
    assert a.sent() == []


async def test_a_row_stranded_and_then_taken_by_another_process_stays_with_that_one(
    fleet: Fleet,
) -> None:
    """A lapsed and could not hand its row back (the database away): stranded. B took it
    for an orphan and is sending it when A is back: A's orphan scan leaves B's claim
    alone (made due, A would claim it and send it too)."""
    a, b = fleet.process("A"), fleet.process("B")
    [row] = await record(a, "final:1", "the answer")
    a.tenure.lapse()
    release = a.outbox.release

    async def away(outbox_id: int, now: datetime) -> bool:
        raise ConnectionError("the database is away")

    a.outbox.release = away  # type: ignore[method-assign]
    await a.out.deliver_rows([row])
    a.outbox.release = release  # type: ignore[method-assign]
    await fleet.die("A")
    assert await b.out.recover_orphans() == 1
    taken, answer = gate(b, "the answer")
    sending = asyncio.create_task(b.redelivery.run_due())
    await taken.wait()  # B claimed it and is sending it
    await fleet.join("A")
    assert await a.out.recover_orphans() == 0
    assert await a.redelivery.run_due() == 0
    answer.set()
    assert await sending == 1
    assert (a.sent(), b.sent()) == ([], ["the answer"])


async def test_a_try_that_failed_after_its_process_lapsed_does_not_postpone_anothers_claim(
    fleet: Fleet,
) -> None:
    """B's try was out when B lapsed; A took the row for an orphan and is sending it; B's
    try then fails (a 502): B's postponement leaves A's claim alone (due again, C would
    claim it and send it too)."""
    a, b, c = fleet.process("A"), fleet.process("B"), fleet.process("C")
    await fleet.join("C")
    rows = await record(b, "final:1", "the answer")
    b_taken, b_answer = gate(b, "the answer", fail=True)
    b_sending = asyncio.create_task(b.out.deliver_rows(rows))
    await b_taken.wait()
    b.tenure.lapse()
    await fleet.die("B")
    assert await a.out.recover_orphans() == 1
    a_taken, a_answer = gate(a, "the answer")
    a_sending = asyncio.create_task(a.redelivery.run_due())
    await a_taken.wait()  # A claimed it and is sending it
    b_answer.set()
    await b_sending  # B's 502
    fleet.wall[0] = NOW + timedelta(seconds=5)
    assert await c.redelivery.run_due() == 0
    a_answer.set()
    assert await a_sending == 1
    assert (a.sent(), c.sent()) == (["the answer"], [])
    assert [r["status"] for r in await fleet.rows()] == ["sent"]


async def test_a_row_being_sent_when_the_retry_loop_stops_stays_this_processs(
    fleet: Fleet,
) -> None:
    """B's retry loop is sending a row when B stops (the loop cancelled, the attempt carried
    to its end): a reply queued behind it meanwhile does not make it due, so A does not
    claim it and send it too."""
    a, b = fleet.process("A"), fleet.process("B")
    a_rows = await record(a, "final:0", "A's earlier answer")
    first = await record(b, "final:1", "first answer")
    await b.out.deliver_rows(first)  # held behind A's row
    await a.out.deliver_rows(a_rows)
    await a.out.flush()
    fleet.wall[0] = NOW + timedelta(seconds=1)
    taken, answer = gate(b, "first answer")
    redelivering = asyncio.create_task(b.redelivery.run_due())
    await taken.wait()
    redelivering.cancel()  # the stop
    await asyncio.gather(redelivering, return_exceptions=True)
    later = await record(b, "final:2", "second answer")
    await b.out.deliver_rows(later)  # an answer rendered within the stop's grace
    await a.redelivery.run_due()
    answer.set()
    await b.out.flush()
    assert (a.sent() + b.sent()).count("first answer") == 1


async def test_rows_whose_postponement_could_not_be_stored_are_sent_later(
    fleet: Fleet,
) -> None:
    """B retries a dead A's two-part reply; the first part fails again and storing the
    second's new schedule fails (the database away): the second is left in flight with B,
    and B's orphan scan makes it due, so both parts and B's next reply reach the chat, in
    order (they waited forever)."""
    a, b = fleet.process("A"), fleet.process("B")
    parts = await record(a, "final:1", "one", "two")
    await fleet.die("A")
    assert await b.out.recover_orphans() == 2
    b.api.fail("send_message", ServerError("Bad Gateway"))
    reschedule = b.outbox.reschedule

    async def away_once(ids: Any, at: datetime) -> set[int]:
        if list(ids) == [parts[1].id]:
            b.outbox.reschedule = reschedule  # type: ignore[method-assign]
            raise ConnectionError("the database is away")
        return await reschedule(ids, at)

    b.outbox.reschedule = away_once  # type: ignore[method-assign]
    assert await b.redelivery.run_due() == 2
    later = await record(b, "final:2", "three")
    await b.out.deliver_rows(later)
    for second in range(1, 60):
        fleet.wall[0] = NOW + timedelta(seconds=second)
        await b.out.recover_orphans()
        await b.redelivery.run_due()
    await b.out.flush()
    assert b.sent() == ["one", "one", "two", "three"]  # the 502's try first
