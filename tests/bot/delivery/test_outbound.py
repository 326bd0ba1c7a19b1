"""``Outbound`` against a fake platform: what a bad answer does to a delivery.

A 429's retry-after as a platform (or a proxy in front of it) may send it — 0, negative,
huge, NaN, not a number — read through ``clamp_retry_after``, then waited by the pacer;
a 429 storm from many conversations at once; a conversation that no longer exists. The
outbox is a real SQLite file; time is fake.
"""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta
from typing import Any

import pytest

from bot.delivery import (
    ANSWER,
    RETRY_AFTER_MAX_S,
    OutboxStore,
    Pacing,
    Redelivery,
    Refused,
    RetryLater,
    Unavailable,
    clamp_retry_after,
)
from bot.delivery.errors import RETRY_AFTER_DEFAULT_S, RETRY_AFTER_MIN_S
from bot.delivery.redelivery import BATCH
from engine.store import Store
from engine.store.fencing import fenced
from engine.store.leases import Leases, lease_fence
from tests.bot.delivery.fakes import FAKE, make_outbound, outbox_rows, wall
from tests.clock import settle

ALICE, BOB = "alice", "bob"

#: The pacer waits what the 429 said, up to the clamp's own cap (``Outbound``'s is lower).
CLAMPED_ONLY = Pacing(max_retry_after_s=RETRY_AFTER_MAX_S)


async def waited_after_a_429(outbox: OutboxStore, retry_after: Any) -> float:
    """Send to ALICE, whose first answer is a 429 carrying ``retry_after``; returns how long
    ALICE was paused before the retry (checked: one pause, then the retry got through)."""
    out, client, time = make_outbound(outbox, CLAMPED_ONLY)
    client.throttle(ALICE, retry_after)
    answer = await out.send(ALICE, {"text": "hello"})
    first, retry = client.tries_to(ALICE)
    assert isinstance(first.error, RetryLater)
    assert first.error.seconds == clamp_retry_after(retry_after)
    assert retry.error is None and answer["id"] == retry.message_id
    assert time.sleeps == [pytest.approx(retry.at - first.at)]  # the pause, nothing else
    assert (out.stats.retry_after, out.stats.sent) == (1, 1)
    paused = retry.at - first.at
    assert 0 < paused <= RETRY_AFTER_MAX_S
    return paused


# -- a retry-after as sent -------------------------------------------------------------------


async def test_a_retry_after_of_zero_still_pauses_the_conversation(outbox: OutboxStore) -> None:
    """ "Retry after 0 s" would hammer a server that just said it is overloaded."""
    assert await waited_after_a_429(outbox, 0) == pytest.approx(RETRY_AFTER_MIN_S)


async def test_a_negative_retry_after_pauses_the_minimum(outbox: OutboxStore) -> None:
    assert await waited_after_a_429(outbox, -30) == pytest.approx(RETRY_AFTER_MIN_S)


# 10**400: past a float's range, it was "not a number" (5 s; found by review).
@pytest.mark.parametrize(
    "huge", [10**9, "1e400", math.inf, 10**400], ids=["1e9", "overflow", "inf", "huge-int"]
)
async def test_a_huge_retry_after_pauses_no_longer_than_the_cap(
    outbox: OutboxStore, huge: Any
) -> None:
    assert await waited_after_a_429(outbox, huge) == pytest.approx(RETRY_AFTER_MAX_S)
    # And Outbound's own cap (a minute by default) is lower still.
    out, client, time = make_outbound(outbox)
    client.throttle(BOB, huge)
    await out.send(BOB, {"text": "hello"})
    assert time.sleeps == [pytest.approx(Pacing().max_retry_after_s)]
    assert out.stats.retry_after_capped == 1


async def test_a_nan_retry_after_pauses_the_default(outbox: OutboxStore) -> None:
    assert await waited_after_a_429(outbox, math.nan) == pytest.approx(RETRY_AFTER_DEFAULT_S)


async def test_a_retry_after_that_is_not_a_number_pauses_the_default(
    outbox: OutboxStore,
) -> None:
    for junk in ("soon", None, True, {"seconds": 3}):
        assert await waited_after_a_429(outbox, junk) == pytest.approx(RETRY_AFTER_DEFAULT_S)


async def test_a_429_on_a_taps_answer_is_waited_out_before_it_is_tried_again(
    outbox: OutboxStore,
) -> None:
    """A tap's answer waits for no conversation's pause (it is no message of theirs), so
    the pause its own 429 set held it back not at all: it was tried again at once, 20
    times through a flood wait, and the tap was left unanswered (found by review)."""
    out, _client, time = make_outbound(outbox, CLAMPED_ONLY)
    tried_at: list[float] = []

    async def answer_the_tap() -> bool:
        tried_at.append(time())
        if len(tried_at) == 1:
            raise RetryLater(5)
        return True

    assert await out.call(ALICE, answer_the_tap, kind=ANSWER)
    assert len(tried_at) == 2 and tried_at[1] - tried_at[0] == pytest.approx(5)
    assert time.sleeps == [pytest.approx(5)]  # the wait, once


@pytest.mark.parametrize("waits", [[30.0], [2.0, 2.0]], ids=["long", "twice"])
async def test_a_taps_answer_is_given_up_rather_than_held_through_a_flood(
    outbox: OutboxStore, waits: list[float]
) -> None:
    """Its caller decides the tap after it, in the chat's lane: waiting each retry-after
    out (up to a minute, 20 times) held the approval and the chat for 20 minutes (found
    by review). A long wait, or a second 429, gives it up at once."""
    out, _client, time = make_outbound(outbox, CLAMPED_ONLY)
    answers = [RetryLater(seconds) for seconds in waits]

    async def answer_the_tap() -> bool:
        raise answers.pop(0)

    with pytest.raises(RetryLater):
        await out.call(ALICE, answer_the_tap, kind=ANSWER)
    assert answers == [] and sum(time.sleeps) <= 2.0


# -- a 429 storm -----------------------------------------------------------------------------


async def test_a_429_storm_from_many_conversations_pauses_everything_and_loses_nothing(
    store: Store, outbox: OutboxStore
) -> None:
    """Ten conversations get a 429 at once: the platform's limit was hit, not theirs. Every
    call waits (a flood), even one to a conversation that got none; then every reply goes
    out exactly once and is recorded sent."""
    out, client, time = make_outbound(outbox, auto=False)
    chats = [f"chat{i}" for i in range(10)]
    rows = []
    for i, chat in enumerate(chats):
        client.throttle(chat, 5)
        row = await outbox.enqueue(chat, f"final:{i}:0", {"text": f"reply {i}"})
        assert row is not None
        rows.append(row)
    quiet = await outbox.enqueue("quiet", "final:99:0", {"text": "no 429 here"})
    assert quiet is not None

    storm = [asyncio.create_task(out.deliver_row(row)) for row in rows]
    await settle()
    assert [t.conversation for t in client.tries] == chats  # each tried once, each a 429
    assert all(isinstance(t.error, RetryLater) for t in client.tries)
    assert out.pacer.global_pauses >= 1
    assert out.stats.global_pauses == out.pacer.global_pauses
    bystander = asyncio.create_task(out.deliver_row(quiet))
    await settle()
    assert client.tries_to("quiet") == []  # the flood holds it too

    await time.advance(4.9)
    assert client.delivered() == [] and not any(t.done() for t in [*storm, bystander])
    await time.advance(0.1)
    await asyncio.gather(*storm, bystander)
    await out.flush()

    delivered = client.delivered()
    assert sorted(t.conversation for t in delivered) == sorted([*chats, "quiet"])  # once each
    assert min(t.at for t in delivered) == pytest.approx(5.0)
    stored = await outbox_rows(store)
    assert [(r["status"], r["attempts"]) for r in stored] == [("sent", 1)] * 11
    by_chat = {t.conversation: t.message_id for t in delivered}
    assert {r["conversation"]: r["message_id"] for r in stored} == by_chat
    assert [task.result() for task in storm] == [by_chat[chat] for chat in chats]
    assert await outbox.pending() == []


# -- a conversation that is gone ------------------------------------------------------------


async def test_a_row_for_a_conversation_that_no_longer_exists_fails_once_for_good(
    store: Store, outbox: OutboxStore
) -> None:
    """The platform refuses: the row is failed with the platform's reason after one try,
    and neither a restart's recovery nor the retry loop ever sends it again."""
    out, client, time = make_outbound(outbox)
    client.gone(BOB, "Not Found: the conversation was deleted")
    assert await out.deliver(BOB, "final:1:0", {"text": "too late"}) is None
    [tried] = client.tries_to(BOB)
    assert isinstance(tried.error, Refused)
    [row] = await outbox_rows(store)
    assert (row["status"], row["attempts"], row["message_id"]) == ("failed", 1, None)
    assert row["error"] == "Not Found: the conversation was deleted"
    assert out.stats.deliveries_failed == 1 and out.stats.postponed == 0

    redelivery = Redelivery(out, outbox, now=wall(time), sleep=time.sleep)
    assert await out.recover() == 0  # nothing pending: a restart does not try it
    time.now += 3600
    assert await redelivery.run_due() == 0
    assert await outbox.next_attempt_at() is None
    assert len(client.tries_to(BOB)) == 1
    [again] = await outbox_rows(store)
    assert (again["status"], again["attempts"]) == ("failed", 1)


async def test_a_conversation_that_refuses_for_good_is_noted_until_a_delivery_gets_through(
    store: Store, outbox: OutboxStore
) -> None:
    """Blocked, removed, deleted (``Gone``): the conversation is noted as taking nothing
    more from the bot (its scheduled jobs pause on it), until a delivery there goes through
    again; a refusal of one message (``Refused``) notes nothing."""
    out, client, _ = make_outbound(outbox)
    client.gone(BOB, "Forbidden: bot was blocked by the user")
    assert await out.deliver(BOB, "final:1:0", {"text": "your briefing"}) is None
    assert await outbox.gone_reason(BOB) == "Forbidden: bot was blocked by the user"
    client.fail(ALICE, Refused("Bad Request: message is too long"))
    assert await out.deliver(ALICE, "final:2:0", {"text": "x" * 5000}) is None
    assert await outbox.gone_reason(ALICE) is None
    assert await OutboxStore(store.db, "other").gone_reason(BOB) is None  # its platform's

    client.back(BOB)  # unblocked: they write, the bot answers
    assert await out.deliver(BOB, "final:3:0", {"text": "welcome back"}) is not None
    await out.flush()
    assert await outbox.gone_reason(BOB) is None


async def test_a_refusal_the_fallback_fixes_is_sent_plain_once(
    store: Store, outbox: OutboxStore
) -> None:
    """A refusal of the markup (not of the conversation) is tried once more, plainer."""
    out, client, _ = make_outbound(outbox)
    client.fail(ALICE, Refused("Bad Request: markup is invalid"))
    payload = {"text": "buttons", "markup": {"keyboard": [["yes", "no"]]}}
    message_id = await out.deliver(ALICE, "final:1:0", payload)
    await out.flush()
    first, plain = client.tries_to(ALICE)
    assert first.payload == payload and plain.payload == {"text": "buttons", "markup": None}
    assert message_id == plain.message_id
    [row] = await outbox_rows(store)
    assert (row["status"], row["message_id"], row["payload"]) == ("sent", message_id, payload)


async def test_a_message_refused_twice_for_two_reasons_is_sent_plainer_twice(
    store: Store, outbox: OutboxStore
) -> None:
    """Its markup refused, then its reference: the fallback was tried once, and the reply
    was lost (a Discord voice reply whose speech failed, in a channel refusing replies;
    found by review on 2026-12-07)."""
    out, client, _ = make_outbound(outbox)
    client.fail(
        ALICE, Refused("Bad Request: markup is invalid"), Refused("Cannot reply without history")
    )
    payload = {"text": "hi", "markup": {"keyboard": [["ok"]]}, "reply_to": "7"}
    message_id = await out.deliver(ALICE, "final:1:0", payload)
    await out.flush()
    assert [t.payload for t in client.tries_to(ALICE)] == [
        payload,
        {"text": "hi", "markup": None, "reply_to": "7"},
        {"text": "hi", "markup": None},
    ]
    assert message_id == client.tries_to(ALICE)[-1].message_id


async def test_an_outage_postpones_and_the_retry_loop_delivers_once(
    store: Store, outbox: OutboxStore
) -> None:
    """``Unavailable`` through the in-line retries: postponed (not failed, not dropped),
    then sent by ``Redelivery`` when due, once."""
    out, client, time = make_outbound(outbox, Pacing.unpaced(max_attempts=2))
    client.fail(ALICE, Unavailable("502 Bad Gateway"), Unavailable("502 Bad Gateway"))
    assert await out.deliver(ALICE, "final:1:0", {"text": "patience"}) is None
    [row] = await outbox_rows(store)
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert row["next_attempt_at"] == wall(time)() + timedelta(seconds=1)
    assert row["error"] == "Unavailable: 502 Bad Gateway"

    redelivery = Redelivery(out, outbox, now=wall(time), sleep=time.sleep)
    assert await redelivery.run_due() == 0  # not due yet
    time.now += 1
    assert await redelivery.run_due() == 1
    [row] = await outbox_rows(store)
    [sent] = client.delivered(ALICE)
    assert (row["status"], row["message_id"], row["attempts"]) == ("sent", sent.message_id, 2)
    time.now += 3600
    assert await redelivery.run_due() == 0
    assert len(client.delivered()) == 1


async def test_a_reply_after_a_restart_waits_behind_every_row_of_a_failed_retry_round(
    store: Store, outbox: OutboxStore
) -> None:
    """After a restart two replies to a chat are due; the first fails again and the second
    waits with it. A new reply queues behind both: the chat reads one, two, three (it read
    three before two, the second having been left out of what the chat waits for)."""
    out, client, time = make_outbound(outbox, Pacing.unpaced(max_attempts=1))
    for n, text in enumerate(["one", "two"]):
        assert await outbox.enqueue(ALICE, f"final:{n}:0", {"text": text}) is not None
    assert await out.recover() == 2  # the restart: both due
    client.fail(ALICE, Unavailable("502 Bad Gateway"))
    redelivery = Redelivery(out, outbox, now=wall(time), sleep=time.sleep)
    assert await redelivery.run_due() == 2  # one postponed, two waiting with it
    assert await out.deliver(ALICE, "final:3:0", {"text": "three"}) is None  # queued
    await redelivery.run_due()
    time.now += 300
    await redelivery.run_due()
    await out.flush()
    assert [t.payload["text"] for t in client.delivered(ALICE)] == ["one", "two", "three"]


async def test_a_redelivery_in_flight_when_the_service_stops_is_recorded_not_sent_again(
    store: Store, outbox: OutboxStore
) -> None:
    """The platform took a redelivered row and its answer was on the way when the
    service stopped (the redelivery loop cancelled): the stop lets the attempt end and
    record it, so after the restart nothing is due and nothing is sent twice."""
    out, client, time = make_outbound(outbox, Pacing.unpaced(max_attempts=1))
    client.fail(ALICE, Unavailable("502 Bad Gateway"))
    assert await out.deliver(ALICE, "final:1:0", {"text": "late"}) is None  # postponed
    time.now += 1
    taken, answer = client.hold(ALICE)
    redelivery = Redelivery(out, outbox, now=wall(time), sleep=time.sleep)
    running = asyncio.create_task(redelivery.run())
    await taken.wait()
    running.cancel()  # the stop
    stopping = asyncio.create_task(out.flush())
    answer.set()
    await stopping
    [row] = await outbox_rows(store)
    assert row["status"] == "sent"
    time.now += 3600  # past any lease: a restart's redelivery finds nothing due
    assert await Redelivery(out, outbox, now=wall(time), sleep=time.sleep).run_due() == 0
    assert len(client.delivered(ALICE)) == 1


async def test_a_chat_held_by_a_429_storm_holds_up_no_other_chats_redelivery(
    store: Store, outbox: OutboxStore
) -> None:
    """Alice's redelivered reply meets 429s of a minute each; Bob's postponed reply comes
    due meanwhile and goes when due, not after Alice's storm (the round waited for its
    slowest chat, up to 20 minutes; found by review)."""
    out, client, time = make_outbound(outbox, Pacing.unpaced(max_attempts=1), auto=False)
    assert await outbox.enqueue(ALICE, "final:1:0", {"text": "for alice"}) is not None
    assert await out.recover() == 1  # a restart: alice's reply is due
    client.fail(BOB, Unavailable("502 Bad Gateway"))
    assert await out.deliver(BOB, "final:2:0", {"text": "for bob"}) is None  # due in 1 s
    client.throttle(ALICE, 60)
    client.throttle(ALICE, 60)
    redelivery = Redelivery(out, outbox, now=wall(time), sleep=time.sleep)
    running = asyncio.create_task(redelivery.run())

    async def until(condition: Any, what: str) -> None:  # the database answers from a thread
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"never: {what}")

    await until(lambda: len(time.sleeps) == 2, "alice paused and the loop waiting for bob")
    assert sorted(time.sleeps) == [1.0, 60.0]
    await time.advance(1)
    await until(lambda: client.delivered(BOB), "bob's reply sent when due")
    assert client.delivered(ALICE) == []
    await time.advance(60)
    await time.advance(60)
    await until(lambda: client.delivered(ALICE), "alice's reply sent after the storm")
    running.cancel()
    await out.flush()
    stored = await outbox_rows(store)
    assert [(r["conversation"], r["status"]) for r in stored] == [
        (ALICE, "sent"),
        (BOB, "sent"),
    ]


async def test_a_stop_ends_every_chat_delivery_those_queued_behind_another_too(
    store: Store, outbox: OutboxStore
) -> None:
    """Alice's "one" is on its way, "two" behind it in the same task; "three" comes due
    and is claimed behind them. The stop cancelled only the chat's newest task: the first
    went on after the stop, and "two" was sent by a service that had stopped (found by
    review)."""
    out, client, time = make_outbound(outbox, Pacing.unpaced(max_attempts=1), auto=False)
    for n, text in enumerate(["one", "two"]):
        assert await outbox.enqueue(ALICE, f"final:{n}:0", {"text": text}) is not None
    assert await out.recover() == 2  # a restart: both due
    taken, answer = client.hold(ALICE)  # "one" taken, its answer slow
    redelivery = Redelivery(out, outbox, now=wall(time), sleep=time.sleep)
    running = asyncio.create_task(redelivery.run())

    async def until(condition: Any, what: str) -> None:  # the database answers from a thread
        for _ in range(500):
            if await condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"never: {what}")

    async def one_taken() -> bool:
        return taken.is_set()

    await until(one_taken, "one taken")
    assert await outbox.enqueue(ALICE, "final:3:0", {"text": "three"}) is not None
    await outbox.recover(wall(time)())  # due now
    out.postponed.set()  # the loop looks again

    async def three_claimed() -> bool:
        three = [r for r in await outbox_rows(store) if r["payload"]["text"] == "three"]
        return three[0]["next_attempt_at"] > wall(time)()

    await until(three_claimed, "three claimed, queued behind the chat's first task")
    running.cancel()  # the stop
    await asyncio.gather(running, return_exceptions=True)
    stopping = asyncio.create_task(out.flush())
    answer.set()
    await stopping
    await settle()
    for _ in range(3):
        await time.advance(60)
    assert [t.payload["text"] for t in client.delivered(ALICE)] == ["one"]


async def test_a_delivery_is_recorded_before_it_returns(store: Store, outbox: OutboxStore) -> None:
    """The record of a sent reply was written by a task of its own after ``deliver``
    returned: a kill in that commit's few ms sent the reply again at the next start, a
    double outside the one no client can close (found by review)."""
    out, client, _time = make_outbound(outbox)
    assert await out.deliver(ALICE, "final:1:0", {"text": "once"}) is not None
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:  # the kill: whatever was still to run dies with the process
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)

    [row] = await outbox_rows(store)
    assert row["status"] == "sent"
    restarted, _client, _time = make_outbound(outbox)
    restarted.client = client
    assert await restarted.recover() == 0
    assert len(client.delivered(ALICE)) == 1


async def test_a_conversations_lane_is_forgotten_once_its_calls_are_done(
    outbox: OutboxStore,
) -> None:
    """A lane per conversation ever sent to was kept for the process's life (found by
    review): a bot that talks to many chats grew without bound."""
    out, _client, _time = make_outbound(outbox)
    for i in range(100):
        await out.send(f"chat{i}", {"text": "hi"})
        await out.edit(f"chat{i}", "1", _nothing)
    assert len(out._lanes) == 0


async def _nothing() -> None:
    return None


async def test_a_replys_parts_stay_in_order_when_its_first_part_fails_again(
    store: Store, outbox: OutboxStore
) -> None:
    """The round's later rows were due again a few ms after a reply queued behind the
    failed one (the clock read twice, a commit apart), and that reply went between the
    parts (found by review)."""
    out, client, time = make_outbound(outbox, Pacing.unpaced(max_attempts=1))
    redelivery = Redelivery(out, outbox, now=wall(time), sleep=time.sleep)

    real_postpone = outbox.postpone

    async def postpone(*args: Any) -> bool:  # a database write takes a few ms
        moved = await real_postpone(*args)
        time.now += 0.005  # one commit's round trip
        return moved

    outbox.postpone = postpone  # type: ignore[method-assign]

    real_send = client.send
    sends = 0

    async def send(conversation: str, payload: dict[str, Any]) -> Any:
        nonlocal sends
        sends += 1
        if sends == 2:  # the retry of part 1: meanwhile alice writes again and is answered
            await out.deliver(ALICE, "final:2:0", {"text": "next reply"})
        return await real_send(conversation, payload)

    client.send = send  # type: ignore[method-assign]
    client.fail(ALICE, Unavailable("502"), Unavailable("502"))  # Telegram down a few s

    # A long answer in two parts, recorded with the answer and sent in line: part 1 fails
    # and is postponed, part 2 queues behind it (both due now).
    def record(conn: Any) -> Any:
        return out.record_in(conn, ALICE, "final:1", [{"text": "part 1"}, {"text": "part 2"}])

    rows = await store.db.run(record)
    await out.deliver_rows(rows)

    # Redelivery's loop: claim what is due, then sleep until the earliest due row.
    for _ in range(10):
        await redelivery.run_due()
        due = await outbox.next_attempt_at()
        if due is None:
            break
        time.now = max(time.now, (due - wall(time)()).total_seconds() + time.now)
    await out.flush()
    assert [t.payload["text"] for t in client.delivered(ALICE)] == [
        "part 1",
        "part 2",
        "next reply",
    ]


async def test_a_chats_replies_stay_in_order_when_pending_rows_exceed_one_claim(
    store: Store, outbox: OutboxStore
) -> None:
    """After a restart a chat's rows fell in two claims; the first failed again and the
    second claim's row went out before it (found by review)."""
    out, client, time = make_outbound(outbox, Pacing.unpaced(max_attempts=1))
    # Recorded before a crash / during an outage: alice's "one", 50 other chats' replies,
    # then alice's "two".
    assert await outbox.enqueue(ALICE, "final:1:0", {"text": "one"}) is not None
    for i in range(BATCH):
        assert await outbox.enqueue(f"chat{i}", f"final:{100 + i}:0", {"text": "x"}) is not None
    assert await outbox.enqueue(ALICE, "final:2:0", {"text": "two"}) is not None
    assert await out.recover() == BATCH + 2  # the restart: everything due

    client.fail(ALICE, Unavailable("502 Bad Gateway"))  # alice's first try fails once
    redelivery = Redelivery(out, outbox, now=wall(time), sleep=time.sleep)
    await redelivery.run_due()  # batch 1: "one" postponed
    await redelivery.run_due()  # batch 2: "two"
    time.now += 300
    await redelivery.run_due()  # "one", when due
    await out.flush()
    assert [t.payload["text"] for t in client.delivered(ALICE)] == ["one", "two"]


async def test_a_postponement_not_stored_is_still_retried_without_a_restart(
    store: Store, outbox: OutboxStore
) -> None:
    """One outage took the platform and the database: the row stayed pending with no
    schedule, and the reply waited for a restart (found by review)."""
    out, client, time = make_outbound(outbox, Pacing.unpaced(max_attempts=1))
    client.fail(ALICE, Unavailable("NetworkError: connection reset"))
    real_postpone = outbox.postpone
    calls = 0

    async def postpone_once_failing(*args: Any) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("database connection lost")
        return await real_postpone(*args)

    outbox.postpone = postpone_once_failing  # type: ignore[method-assign]
    assert await out.deliver(ALICE, "final:1:0", {"text": "the answer"}) is None
    redelivery = Redelivery(out, outbox, now=wall(time), sleep=time.sleep)
    for _ in range(12):  # an hour, in 5-minute steps: the network and database are back
        time.now += 300
        await redelivery.run_due()
    await out.flush()
    [row] = await outbox_rows(store)
    assert client.delivered(ALICE), f"never retried: {row['status']}, next={row['next_attempt_at']}"


async def test_a_database_that_does_not_answer_holds_a_replys_next_part_only_a_moment(
    store: Store, outbox: OutboxStore
) -> None:
    """The sender waits for its delivery's record; a database that stops answering held a
    reply's later parts for good, one that refused held each for the retry pause (found by
    review of that change). It waits ``mark_wait_s`` at most, then goes on."""
    out, client, _time = make_outbound(outbox, mark_wait_s=0.01, mark_retry_s=60.0)

    def record(conn: Any) -> Any:
        return out.record_in(conn, ALICE, "final:1", [{"text": f"part {i}"} for i in range(3)])

    rows = await store.db.run(record)
    never = asyncio.Event()

    async def hangs(*_args: Any) -> None:
        await never.wait()

    outbox.mark_sent_many = hangs  # type: ignore[method-assign]
    try:
        await asyncio.wait_for(out.deliver_rows(rows), 5)
        assert [t.payload["text"] for t in client.delivered(ALICE)] == [
            "part 0",
            "part 1",
            "part 2",
        ]
    finally:
        never.set()


async def test_a_database_that_refuses_records_holds_no_part_for_the_retry_pause(
    store: Store, outbox: OutboxStore
) -> None:
    out, client, _time = make_outbound(outbox, mark_wait_s=30.0, mark_retry_s=60.0)

    def record(conn: Any) -> Any:
        return out.record_in(conn, ALICE, "final:1", [{"text": f"part {i}"} for i in range(3)])

    rows = await store.db.run(record)

    async def refuses(*_args: Any) -> None:
        raise OSError("the database is away")

    outbox.mark_sent_many = refuses  # type: ignore[method-assign]
    await asyncio.wait_for(out.deliver_rows(rows), 5)  # not a minute per part
    assert len(client.delivered(ALICE)) == 3


class _Holds:
    """A fleet member whose membership holds throughout."""

    def mark(self) -> float:
        return 0.0

    def tenure_holds(self, mark: float) -> bool:
        return True


async def test_a_send_inside_a_turns_lease_check_leaves_the_marks_free_of_it(
    store: Store,
) -> None:
    """A voice message a tool sent in a fleet turn started the marks' writer, which took
    the turn's lease check with it: once that chat was let go, every delivery record it
    wrote, any chat's, was refused for good (found by review on 2026-12-07)."""
    outbox = OutboxStore(store.db, FAKE, process_id="a")
    out, client, _time = make_outbound(outbox, tenure=_Holds(), mark_retry_s=0.05)
    leases = Leases(store.db)
    lease = await leases.acquire("source:telegram:5", "a", 30.0)
    assert lease is not None
    real, hiccups = outbox.mark_sent_many, [ConnectionError("the database was away")]

    async def hiccup_once(sent: Any) -> None:
        if hiccups:
            raise hiccups.pop()
        await real(sent)

    outbox.mark_sent_many = hiccup_once  # type: ignore[method-assign]
    with fenced(lease_fence(lease)):  # chat 5's turn sends a voice message
        assert await out.deliver("chat-5", "voice:1:0", {"text": "spoken"}) is not None
    assert await leases.release(lease)  # the turn ended, the idle chat let go
    assert await out.deliver("chat-6", "final:2:0", {"text": "hello"}) is not None
    assert len(client.delivered()) == 2
    for _ in range(200):  # the marks' retries, 50 ms apart
        rows = {row["dedupe_key"]: row["status"] for row in await outbox_rows(store)}
        if rows == {"voice:1:0": "sent", "final:2:0": "sent"}:
            break
        await asyncio.sleep(0.05)
    assert rows == {"voice:1:0": "sent", "final:2:0": "sent"}, rows
