"""Postponed outbox deliveries retried by the running process — in fake time.

``Outbound`` postpones a delivery that its in-line retries could not get through;
``Redelivery`` sends it when due (1 s doubling to 5 min), without a restart. A 403 or a
400 marks it failed with Telegram's reason, and it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from bot.delivery import Outbound, Pacing, Redelivery, RetrySchedule, delivery_summary
from bot.delivery.tables import platform_outbox
from bot.http.metrics import read_snapshot
from bot.http.prometheus import render_text
from bot.telegram.sending.api import BadRequest, Forbidden, NetworkError, RetryAfter, ServerError
from bot.telegram.sending.delivery import TelegramClient
from bot.telegram.sending.errors import Unauthorized
from bot.telegram.store import TELEGRAM, TelegramStore
from tests.bot.telegram_unit.fakes import FakeBotApi
from tests.clock import FakeTime

CHAT = 42
OTHER = 43
#: The same chats as the outbox keys them.
CHAT_KEY, OTHER_KEY = str(CHAT), str(OTHER)
BASE = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

#: No pacing; Telegram's own in-line retries as in production (6 attempts, 0.5..8 s).
UNPACED = Pacing.unpaced()
#: One call per attempt: each postponement is one failed sendMessage.
ONE_CALL = Pacing.unpaced(max_attempts=1)


@dataclass
class Rig:
    out: Outbound
    api: FakeBotApi
    time: FakeTime
    store: TelegramStore
    redelivery: Redelivery
    tasks: list[asyncio.Task[None]]

    def start_retrier(self) -> None:
        self.tasks.append(asyncio.create_task(self.redelivery.run()))

    def wall(self) -> datetime:
        return BASE + timedelta(seconds=self.time.now)

    def send_times(self) -> list[float]:
        return [c.at for c in self.api.calls_to("send_message")]

    async def rows(self) -> list[dict[str, Any]]:
        await self.out.flush()

        def read(conn: sa.Connection) -> list[dict[str, Any]]:
            o = platform_outbox
            return [dict(r._mapping) for r in conn.execute(sa.select(o).order_by(o.c.id))]

        return await self.store._db.run(read)

    async def until(self, predicate: Callable[[], Any], rounds: int = 2000) -> None:
        """Let the loop run until ``predicate()`` holds (fake time moves only by sleeps)."""
        for _ in range(rounds):
            if predicate():
                return
            await asyncio.sleep(0.001)  # the database thread answers in real time
        raise AssertionError("condition not met")


@pytest.fixture
async def make(sqlite_tg_store: TelegramStore) -> AsyncIterator[Callable[..., Rig]]:
    tasks: list[asyncio.Task[None]] = []

    def build(pacing: Pacing = ONE_CALL, *, run: bool = True) -> Rig:
        time = FakeTime()
        api = FakeBotApi(clock=time)

        def wall() -> datetime:
            return BASE + timedelta(seconds=time.now)

        out = Outbound(
            TelegramClient(api),
            sqlite_tg_store.outbox,
            pacing,
            clock=time,
            sleep=time.sleep,
            now=wall,
            schedule=RetrySchedule(),
        )
        redelivery = Redelivery(out, sqlite_tg_store.outbox, now=wall, sleep=time.sleep)
        rig = Rig(out, api, time, sqlite_tg_store, redelivery, tasks)
        if run:
            rig.start_retrier()
        return rig

    yield build
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_eight_failures_then_the_reply_arrives_without_a_restart(make) -> None:
    """The issue's outage: eight 500s in a row on sendMessage (in-line retries as deployed)."""
    rig = make(UNPACED, run=False)
    rig.api.fail("send_message", *[ServerError("Internal Server Error") for _ in range(8)])
    assert await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "the answer"}) is None
    [row] = await rig.rows()
    assert (row["status"], row["attempts"]) == ("pending", 1)  # postponed, not dropped
    assert row["next_attempt_at"] == rig.wall() + timedelta(seconds=1)
    assert "Internal Server Error" in row["error"]

    rig.start_retrier()
    await rig.until(lambda: len(rig.api.calls_to("send_message")) == 9)
    [row] = await rig.rows()
    assert (row["status"], row["message_id"]) == ("sent", "101")
    # 6 in-line attempts (0.5 + 1 + 2 + 4 + 8 s), the 1 s schedule, then 2 more in-line
    assert rig.send_times()[-1] == pytest.approx(15.5 + 1.0 + 0.5 + 1.0)
    assert rig.send_times()[-1] < RetrySchedule().cap_s
    assert rig.out.stats.postponed == 1
    assert (rig.out.stats.redelivery_attempts, rig.out.stats.redelivered) == (1, 1)


async def test_the_schedule_doubles_from_one_second_to_five_minutes(make) -> None:
    rig = make()
    rig.api.fail("send_message", *[NetworkError("reset") for _ in range(12)])
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "patience"})
    await rig.until(lambda: len(rig.api.calls_to("send_message")) == 13)
    times = rig.send_times()
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(times)]
    assert gaps == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]
    [row] = await rig.rows()
    assert (row["status"], row["attempts"]) == ("sent", 13)


async def test_each_attempt_is_stored_on_the_row(make) -> None:
    rig = make(run=False)
    rig.api.fail("send_message", ServerError("a"), ServerError("b"), ServerError("c"))
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "x"})
    for expected_attempts, delay in [(2, 2), (3, 4)]:
        rig.time.now += 3600  # long after it was due
        assert await rig.redelivery.run_due() == 1
        [row] = await rig.rows()
        assert row["attempts"] == expected_attempts
        assert row["last_attempt_at"] == rig.wall()
        assert row["next_attempt_at"] == rig.wall() + timedelta(seconds=delay)
    rig.time.now += 3600
    await rig.redelivery.run_due()
    [row] = await rig.rows()
    assert row["status"] == "sent"
    assert await rig.redelivery.run_due() == 0  # nothing left to claim


@pytest.mark.parametrize(
    "error",
    [
        Forbidden("Forbidden: bot was blocked by the user"),
        BadRequest("Bad Request: chat not found"),
    ],
    ids=["blocked", "chat-not-found"],
)
async def test_a_delivery_that_cannot_succeed_is_failed_with_its_reason_and_stops(
    make, error: Exception
) -> None:
    rig = make()
    rig.api.fail("send_message", ServerError("down"), error)
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "x"})
    await rig.until(lambda: len(rig.api.calls_to("send_message")) == 2)
    await rig.until(lambda: rig.out.stats.deliveries_failed == 1)
    [row] = await rig.rows()
    assert row["status"] == "failed"
    assert row["error"] == str(error)
    rig.time.now += 3600
    assert await rig.redelivery.run_due() == 0
    assert len(rig.api.calls_to("send_message")) == 2  # never tried again


async def test_a_429_storm_postpones_instead_of_failing(make) -> None:
    pacing = Pacing.unpaced(max_retry_afters=2)
    rig = make(pacing, run=False)
    rig.api.fail("send_message", *[RetryAfter(1) for _ in range(3)])
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "x"})
    [row] = await rig.rows()
    assert (row["status"], row["attempts"]) == ("pending", 1)


async def test_a_revoked_token_postpones_rather_than_losing_the_reply(make) -> None:
    rig = make(run=False)
    rig.api.fail("send_message", Unauthorized("Unauthorized"))
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "x"})
    [row] = await rig.rows()
    assert row["status"] == "pending"


async def test_an_unsendable_payload_is_failed_not_retried(make) -> None:
    rig = make(run=False)
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"no text": True})
    [row] = await rig.rows()
    assert row["status"] == "failed"
    assert "unsendable" in row["error"]
    assert rig.api.calls_to("send_message") == []


async def test_a_chats_waiting_replies_keep_their_order(make) -> None:
    rig = make(run=False)
    rig.api.fail("send_message", ServerError("x"), ServerError("x"))
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "first"})  # fails: postponed
    await rig.out.deliver(CHAT_KEY, "final:2:0", {"text": "second"})  # queued behind "first"
    await rig.out.deliver(OTHER_KEY, "final:3:0", {"text": "elsewhere"})  # fails: postponed
    assert [c.args[1] for c in rig.api.calls_to("send_message")] == ["first", "elsewhere"]
    rows = {r["dedupe_key"]: r for r in await rig.rows()}
    assert rows["final:2:0"]["attempts"] == 0  # never sent ahead of "first"
    assert rows["final:2:0"]["next_attempt_at"] == rig.wall()  # both due at once

    rig.time.now += 10
    rig.api.fail("send_message", ServerError("still down"))
    await rig.redelivery.run_due()  # "first" fails again: "second" waits with it
    rows = {r["dedupe_key"]: r for r in await rig.rows()}
    assert rows["final:1:0"]["attempts"] == 2
    assert rows["final:2:0"]["attempts"] == 0
    assert rows["final:2:0"]["next_attempt_at"] == rows["final:1:0"]["next_attempt_at"]
    assert rows["final:3:0"]["status"] == "sent"  # another chat goes on

    rig.time.now += 10
    await rig.redelivery.run_due()
    sent = [c.args[1] for c in rig.api.calls_to("send_message") if c.args[0] == CHAT]
    assert sent == ["first", "first", "first", "second"]
    assert {r["status"] for r in await rig.rows()} == {"sent"}


async def test_a_new_reply_to_a_waiting_chat_retries_its_backlog_at_once(make) -> None:
    rig = make(run=False)
    rig.api.fail("send_message", ServerError("x"))
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "old"})
    [row] = await rig.rows()
    assert row["next_attempt_at"] == rig.wall() + timedelta(seconds=1)
    await rig.out.deliver(CHAT_KEY, "final:2:0", {"text": "new"})  # Telegram is back meanwhile
    assert rig.out.postponed.is_set()  # the retrier is woken ...
    assert await rig.redelivery.run_due() == 2  # ... and finds both due now, not in 1 s
    assert [c.args[1] for c in rig.api.calls_to("send_message")] == ["old", "old", "new"]
    assert {r["status"] for r in await rig.rows()} == {"sent"}
    await rig.out.deliver(CHAT_KEY, "final:3:0", {"text": "later"})  # nothing waits: sent at once
    assert rig.api.calls_to("send_message")[-1].args[1] == "later"


async def test_a_sleeping_retrier_wakes_for_a_new_postponement(make) -> None:
    rig = make()
    await asyncio.sleep(0.01)  # the retrier found nothing and waits
    rig.api.fail("send_message", NetworkError("reset"))
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "late"})
    await rig.until(lambda: len(rig.api.calls_to("send_message")) == 2)
    assert rig.send_times() == pytest.approx([0.0, 1.0])


async def test_at_start_every_pending_delivery_is_due_at_once(make) -> None:
    # A process died: one row recorded and never sent, one postponed far into the future.
    store = make(run=False).store.outbox
    await store.enqueue(CHAT_KEY, "final:1:0", {"text": "unsent"})
    postponed = await store.enqueue(OTHER_KEY, "final:2:0", {"text": "postponed"})
    assert postponed is not None
    await store.postpone(postponed.id, "down", BASE, BASE + timedelta(hours=2))
    rig = make()
    assert await rig.out.recover() == 2
    await rig.until(lambda: len(rig.api.calls_to("send_message")) == 2)
    rows = await rig.rows()
    assert [r["status"] for r in rows] == ["sent", "sent"]
    assert rig.send_times() == [0.0, 0.0]


async def test_a_row_claimed_by_a_retry_that_died_is_due_again_after_its_lease(make) -> None:
    rig = make(run=False)
    outbox = rig.store.outbox
    await outbox.enqueue(CHAT_KEY, "final:1:0", {"text": "x"})
    await rig.out.recover()
    [claimed] = await outbox.claim_due(rig.wall(), rig.wall() + timedelta(seconds=900))
    # ... and the claimer died: nobody else gets it until the lease ends
    assert await outbox.claim_due(rig.wall() + timedelta(seconds=899), rig.wall()) == []
    later = rig.wall() + timedelta(seconds=900)
    assert [r.id for r in await outbox.claim_due(later, later)] == [claimed.id]


async def test_deliveries_waiting_show_in_metrics_and_the_summary(make) -> None:
    rig = make(run=False)
    rig.api.fail("send_message", ServerError("Bad Gateway"), Forbidden("Forbidden: blocked"))
    await rig.out.deliver(CHAT_KEY, "final:1:0", {"text": "waits"})
    await rig.out.deliver(OTHER_KEY, "final:2:0", {"text": "blocked"})
    await rig.out.deliver(str(CHAT + 2), "final:3:0", {"text": "fine"})
    await rig.out.flush()
    summary = await rig.store._db.run(delivery_summary, 10)
    assert (summary.waiting, summary.failed, summary.sent) == (1, 1, 1)
    [waiting] = summary.rows
    assert (waiting.platform, waiting.conversation, waiting.attempts, waiting.error) == (
        TELEGRAM,
        CHAT_KEY,
        1,
        "ServerError: Bad Gateway",
    )
    assert waiting.next_attempt_at == rig.wall() + timedelta(seconds=1)
    assert summary.oldest_waiting_at is not None

    snapshot = await rig.store._db.run(read_snapshot)
    snapshot.telegram = rig.out.stats
    text = render_text(snapshot).decode()
    assert 'chathub_telegram_outbox{state="waiting"} 1.0' in text
    assert 'chathub_telegram_outbox{state="failed"} 1.0' in text
    assert "chathub_telegram_deliveries_postponed_total 1.0" in text
    assert "chathub_telegram_oldest_waiting_delivery_timestamp_seconds" in text
