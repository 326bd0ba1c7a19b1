"""Pacing as the delivery layer does it for any platform: a fleet's share of the
platform's cap, and calls that take no token but still wait out a 429's pause.

Sends go through ``Outbound`` to the fake platform, which records when each arrived;
time is fake.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bot.delivery import (
    EDIT,
    OTHER,
    SEND,
    Cap,
    OutboxStore,
    Pacing,
    PacingPolicy,
    Rate,
    RetryLater,
    TenureLost,
    Unavailable,
)
from bot.delivery.pacing import FLEET_HEADROOM, MAX_UNDER_WAY_S, Pacer
from tests.bot.delivery.fakes import make_outbound
from tests.clock import FakeTime, settle

#: The platform's cap: 30 sends in any second, for the whole fleet.
OVERALL = Cap(30, 1.0)
FLEET_POLICY = Pacing(policy=PacingPolicy(overall=OVERALL))


def most_in_a_second(times: Sequence[float]) -> int:
    """The most sends that arrived within any one second."""
    ordered = sorted(times)
    return max(sum(1 for t in ordered[i:] if t < start + 1.0) for i, start in enumerate(ordered))


async def test_a_member_of_a_fleet_of_three_keeps_to_its_share_of_the_cap(
    outbox: OutboxStore,
) -> None:
    """Three processes share the platform's 30 a second: this one sends at most a third
    (less the fleet's headroom) in any second, to however many conversations."""
    out, client, _ = make_outbound(outbox, FLEET_POLICY, members=lambda: 3)
    for i in range(40):  # different conversations: only the overall cap binds
        await out.send(f"chat{i}", {"text": "hi"})
    times = [t.at for t in client.delivered()]
    assert len(times) == 40
    assert out.pacer.overall_limit == int(OVERALL.limit * FLEET_HEADROOM) // 3
    assert most_in_a_second(times) == out.pacer.overall_limit <= 10
    assert times[-1] > 4.0  # 40 at 9 a second: the fifth second


async def test_the_share_follows_the_fleet_as_members_join(outbox: OutboxStore) -> None:
    members = [1]
    out, client, time = make_outbound(outbox, FLEET_POLICY, members=lambda: members[0])
    for i in range(60):
        await out.send(f"alone{i}", {"text": "hi"})
    alone = [t.at for t in client.delivered()]
    assert out.pacer.overall_limit == OVERALL.limit
    assert most_in_a_second(alone) == OVERALL.limit  # the whole cap: 30 a second

    time.now += 5.0  # quiet; then two more processes join the fleet
    members[0] = 3
    for i in range(30):
        await out.send(f"shared{i}", {"text": "hi"})
    shared = [t.at for t in client.delivered()[60:]]
    assert out.pacer.overall_limit < OVERALL.limit
    assert most_in_a_second(shared) == out.pacer.overall_limit <= 10

    members[0] = 1  # and when they leave, the whole cap again
    time.now += 5.0
    start = time.now
    for i in range(30):
        await out.send(f"again{i}", {"text": "hi"})
    assert [t.at for t in client.delivered()[90:]] == [start] * 30


async def test_calls_held_up_on_the_way_are_counted_until_they_are_answered() -> None:
    """The platform counts a call when it arrives, anywhere between its turn and its
    answer: calls held up on the way (this process stalled, or the network) and the next
    second's must not arrive together. Counted from their turns alone, 8 held up for 3 s
    were forgotten and 8 more went out as they arrived: 16 in one second, and a fleet of
    three sent 31 in a second at Telegram's 30 (found by the fleet test on a loaded machine)."""
    time = FakeTime(auto=False)
    pacer = Pacer(PacingPolicy(overall=OVERALL), clock=time, sleep=time.sleep, members=lambda: 3)
    limit = pacer.overall_limit
    held = [await pacer.turn(f"chat{i}") for i in range(limit)]
    await time.advance(3.0)  # the calls are still on their way
    late = asyncio.create_task(pacer.turn("late"))
    await time.advance(1.5)
    assert not late.done()  # a second after their turns, and still counted
    for ticket in held:
        ticket.answered()  # they arrived just now: the platform counts them in this second
    answered_at = time.now
    while not late.done():
        await time.advance(0.05)
    (await late).answered()
    assert time.now >= answered_at + OVERALL.seconds


async def test_a_turn_cancelled_while_it_waits_leaves_no_call_under_way() -> None:
    """A send to a group takes its place in the group's window, then waits for the
    platform's: cancelled there (a stop, a lost lease), it made no call. It stayed under
    way for good, and five of them stopped the group's sends forever (found by review)."""
    time = FakeTime(auto=False)
    policy = PacingPolicy(group=Rate(100, 100.0), group_cap=Cap(5, 5.0), overall=Cap(1, 1.0))
    pacer = Pacer(policy, clock=time, sleep=time.sleep, is_group=lambda c: c == "group")
    for _ in range(5):
        blocker = await pacer.turn("someone")  # the platform's window full, under way
        waiting = asyncio.create_task(pacer.turn("group"))
        await settle()
        waiting.cancel()
        await settle()
        blocker.answered()
        await time.advance(10.0)
    late = asyncio.create_task(pacer.turn("group"))
    await time.advance(1.1)
    assert late.done()
    (await late).answered()


async def test_a_call_never_answered_stops_counting_after_a_while() -> None:
    """A client whose call never ends (no timeout) must not hold the window for good."""
    time = FakeTime()
    pacer = Pacer(PacingPolicy(overall=Cap(1, 1.0)), clock=time, sleep=time.sleep)
    await pacer.turn("lost")  # never answered
    (await pacer.turn("next")).answered()
    assert MAX_UNDER_WAY_S < time.now <= MAX_UNDER_WAY_S + 1.1


async def test_a_call_that_failed_or_was_never_made_is_not_counted_as_under_way(
    outbox: OutboxStore,
) -> None:
    """``Outbound`` tells the ticket in every outcome: a 429, a platform error and a
    call never made (its sender's tenure lost) are not counted as under way forever,
    which would hold every later send back."""
    out, client, time = make_outbound(outbox, FLEET_POLICY, members=lambda: 3)
    limit = out.pacer.overall_limit
    for i in range(limit):
        client.fail(f"chat{i}", RetryLater(0.5), Unavailable("down"))
    with pytest.raises(TenureLost):
        await out.send("lost", {"text": "hi"}, may_send=lambda: False)
    for i in range(limit):
        await out.send(f"chat{i}", {"text": "hi"})
    time.now += 5.0
    start = time.now
    for i in range(limit):
        await asyncio.wait_for(out.send(f"again{i}", {"text": "hi"}), 5.0)
    assert [t.at for t in client.delivered()[limit:]] == [start] * limit


async def test_a_call_of_another_kind_takes_no_token_but_waits_out_a_429() -> None:
    """A tap's answer or the typing indicator (``OTHER``) does not use up a conversation's
    messages; a 429 for the conversation holds it all the same (and only that one)."""
    time = FakeTime()
    pacer = Pacer(
        PacingPolicy(private=Rate(1, 1.0), edits=Rate(1, 1.0)), clock=time, sleep=time.sleep
    )
    (await pacer.turn("alice", SEND)).answered()  # the bucket's only token
    (await pacer.turn("alice", EDIT)).answered()  # and the edits' only one
    for _ in range(5):
        (await pacer.turn("alice", OTHER)).answered()
    assert (time.now, time.sleeps) == (0.0, [])  # none waited for a token
    (await pacer.turn("alice", SEND)).answered()
    assert time.now == pytest.approx(1.0)  # the next message: one refill, not six

    pacer.retry_after("alice", 7.0)
    (await pacer.turn("bob", OTHER)).answered()  # another conversation: not paused
    assert time.now == pytest.approx(1.0)
    (await pacer.turn("alice", OTHER)).answered()
    assert time.now == pytest.approx(8.0)  # the pause, waited out
    assert pacer.global_pauses == 0


async def test_a_call_of_another_kind_through_outbound_counts_no_send(
    outbox: OutboxStore,
) -> None:
    """``Outbound.call(kind=OTHER)``: paused with its conversation, never counted as a
    message sent, and never waiting for the conversation's bucket."""
    policy = PacingPolicy(private=Rate(1, 1.0))
    out, _, time = make_outbound(outbox, Pacing(policy=policy))
    await out.send("alice", {"text": "hi"})  # the bucket is empty now
    ran: list[float] = []

    async def typing() -> None:
        ran.append(time.now)

    await out.call("alice", typing, kind=OTHER)
    out.pacer.retry_after("alice", 3.0)
    await out.call("alice", typing, kind=OTHER)
    assert ran == pytest.approx([0.0, 3.0])
    assert out.stats.sent == 1


async def test_where_each_method_is_limited_apart_a_429_holds_only_its_own_calls(
    outbox: OutboxStore,
) -> None:
    """Slack limits each method apart: a 429 on opening a modal or a DM (no conversation)
    paused the whole app, and one on a status or a card's edit held the channel's
    messages (found by review). With ``per_method`` such a call waits alone, and an
    edit's 429 holds the edits."""
    policy = PacingPolicy(private=Rate(100, 100.0), edits=Rate(100, 100.0), per_method=True)
    out, client, time = make_outbound(outbox, Pacing(policy=policy), auto=False)
    asked: list[float] = []

    async def limited_once() -> str:
        asked.append(time.now)
        if len(asked) % 2:
            raise RetryLater(6.0, "ratelimited")
        return "done"

    for conversation in (None, "alice"):  # views.open; setStatus in alice's channel
        call = asyncio.create_task(out.call(conversation, limited_once, kind=OTHER))
        await settle()
        started = time.now
        assert asked[-1] == started  # met its 429
        await out.send("alice", {"text": "hi"})
        assert client.delivered()[-1].at == started  # at once: nothing else paused
        assert not call.done()
        await time.advance(6.0)
        assert await call == "done" and asked[-1] == started + 6.0  # it waited alone
    assert out.pacer.global_pauses == 0

    out.pacer.retry_after("alice", 5.0, EDIT)  # chat.update's 429
    await out.send("alice", {"text": "and again"})
    assert client.delivered()[-1].at == time.now
    edit = asyncio.create_task(out.pacer.turn("alice", EDIT))
    await settle()
    assert not edit.done()  # the edits wait it out
    await time.advance(5.0)
    (await edit).answered()


def test_a_429_on_any_call_holds_the_conversation_where_limits_are_per_chat() -> None:
    """Telegram's flood control is per chat, whatever the method: there it still holds
    everything of the conversation."""
    time = FakeTime()
    pacer = Pacer(PacingPolicy(), clock=time, sleep=time.sleep)
    pacer.retry_after("alice", 5.0, EDIT)
    assert not pacer.waits_alone("alice", OTHER) and not pacer.waits_alone(None, OTHER)
    pacer.retry_after(None, 5.0, OTHER)
    assert pacer.global_pauses == 1


async def test_where_each_method_is_limited_apart_an_edit_waiting_out_a_429_holds_no_reply(
    outbox: OutboxStore,
) -> None:
    """The edit's 429 paused only the edits, but the edit waited it out in the
    conversation's lane (and under its lock), and the replies behind it waited as long
    (found by review of the change)."""
    policy = PacingPolicy(private=Rate(100, 100.0), edits=Rate(100, 100.0), per_method=True)
    out, client, time = make_outbound(outbox, Pacing(policy=policy), auto=False)
    tries: list[float] = []

    async def update() -> None:
        tries.append(time.now)
        if len(tries) == 1:
            raise RetryLater(30.0, "ratelimited")

    edit = asyncio.create_task(out.edit("alice", "m1", update))
    await settle()
    assert tries == [0.0] and not edit.done()  # waiting out its 30 s
    await out.send("alice", {"text": "the reply"})
    assert client.delivered()[-1].at == 0.0  # not behind the edit
    await time.advance(30.0)
    assert await edit and tries == [0.0, 30.0]
