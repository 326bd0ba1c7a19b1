"""Token-bucket pacing with an injected clock: bursts, refill, group and overall limits,
429 pauses for one chat or (a global flood) for all. Nothing here waits for real time."""

from __future__ import annotations

import asyncio

import pytest

from bot.delivery.pacing import EDIT, SEND, Bucket, CallKind, Pacer, PacingPolicy, Rate
from bot.telegram.sending.delivery import TelegramClient

PRIVATE, OTHER, GROUP = "11", "12", "-100"

#: Which chats are groups, as Telegram says (negative ids); its API is not called here.
IS_GROUP = TelegramClient(None).is_group  # type: ignore[arg-type]


class Clock:
    """Time that moves only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def pacer(clock: Clock, **policy) -> Pacer:
    return Pacer(PacingPolicy(**policy), clock=clock, sleep=clock.sleep, is_group=IS_GROUP)


async def send_times(
    pacer: Pacer, clock: Clock, chat_id: str, n: int, kind: CallKind = SEND
) -> list[float]:
    start = clock.now
    times = []
    for _ in range(n):
        (await pacer.turn(chat_id, kind)).answered()
        times.append(round(clock.now - start, 6))
    return times


async def test_a_quiet_private_chat_gets_a_burst_then_one_per_second(clock):
    times = await send_times(pacer(clock), clock, PRIVATE, 6)
    assert times == [0, 0, 0, 0, 1, 2]


async def test_the_bucket_refills_while_the_chat_is_quiet(clock):
    p = pacer(clock)
    await send_times(p, clock, PRIVATE, 4)
    clock.now += 2.5
    assert await send_times(p, clock, PRIVATE, 3) == [0, 0, 0.5]


async def test_a_group_gets_twenty_a_minute(clock):
    times = await send_times(pacer(clock), clock, GROUP, 23)
    assert times[:4] == [0, 0, 0, 3]  # a burst of 3, then one every 3 s
    assert times[19] == pytest.approx(51.0)
    # The 21st would fit the bucket at 54 s, but 20 went in the last minute: it waits for
    # the first of them to be a minute old.
    assert times[20] == pytest.approx(60.01)
    for i, start in enumerate(times):
        assert sum(1 for t in times[i:] if t < start + 60) <= 20


async def test_chats_do_not_wait_for_each_other(clock):
    p = pacer(clock)
    await send_times(p, clock, PRIVATE, 4)
    assert await send_times(p, clock, OTHER, 1) == [0]


async def test_the_overall_rate_binds_a_burst_over_many_chats(clock):
    p = pacer(clock)
    start = clock.now
    times = []
    for chat in range(1, 101):
        (await p.turn(str(chat))).answered()
        times.append(clock.now - start)
    # 30 in any second, never 30 at once and 30 more in the same second.
    for i, first in enumerate(times):
        assert sum(1 for t in times[i:] if t < first + 1.0) <= 30
    assert times[-1] == pytest.approx(3 * 1.01)  # 30 at 0, 1.01, 2.02, the last 10 at 3.03


async def test_edits_have_their_own_bucket(clock):
    p = pacer(clock)
    await send_times(p, clock, PRIVATE, 4)
    assert await send_times(p, clock, PRIVATE, 3, EDIT) == [0, 0, 0]


async def test_a_429_pauses_only_its_chat(clock):
    p = pacer(clock)
    p.retry_after(PRIVATE, 7)
    assert await send_times(p, clock, OTHER, 1) == [0]
    start = clock.now
    (await p.turn(PRIVATE)).answered()
    assert clock.now - start == pytest.approx(7)
    assert p.global_pauses == 0


async def test_429s_from_several_chats_at_once_pause_everything(clock):
    p = pacer(clock)
    for chat in ("1", "2", "3"):
        p.retry_after(chat, 5)
    assert p.global_pauses == 1
    start = clock.now
    (await p.turn("99")).answered()  # a chat that got no 429 waits too
    assert clock.now - start == pytest.approx(5)


async def test_429s_spread_out_in_time_stay_per_chat(clock):
    p = pacer(clock)
    for chat in ("1", "2", "3"):
        p.retry_after(chat, 0.5)
        clock.now += 2
    assert p.global_pauses == 0


async def test_after_a_pause_one_message_at_a_time(clock):
    p = pacer(clock)
    p.retry_after(PRIVATE, 3)
    times = await send_times(p, clock, PRIVATE, 3)
    assert times == [3, 4, 5]  # no burst right after a 429


async def test_a_restart_starts_full(clock):
    first = pacer(clock)
    await send_times(first, clock, PRIVATE, 4)
    again = pacer(clock)  # nothing is kept: Telegram's own counters are per second
    assert await send_times(again, clock, PRIVATE, 4) == [0, 0, 0, 0]


async def test_idle_chats_are_forgotten(clock, monkeypatch):
    monkeypatch.setattr("bot.delivery.pacing._MAX_CHATS", 10)
    p = pacer(clock)
    for chat in range(1, 11):
        (await p.turn(str(chat))).answered()
    clock.now += 60
    (await p.turn("500")).answered()
    assert len(p._chats) == 1


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "1"])
def test_a_rate_must_be_a_positive_number(bad):
    with pytest.raises(ValueError, match="above 0"):
        Rate(bad, 1)
    with pytest.raises(ValueError, match="above 0"):
        Rate(1, bad)


def test_a_bucket_never_holds_more_than_its_burst():
    bucket = Bucket.full(Rate(2, 1), now=0)
    assert bucket.wait(1_000_000) == 0 and bucket.tokens == 2


@pytest.mark.parametrize(("limit", "seconds"), [(0, 1.0), (1.5, 1.0), (1, 0), (1, float("nan"))])
def test_a_cap_must_be_a_count_over_a_time(limit, seconds):
    from bot.delivery.pacing import Cap

    with pytest.raises(ValueError, match="above 0"):
        Cap(limit, seconds)


def test_a_rate_as_a_cap():
    from bot.delivery.pacing import Cap

    assert Cap.per_second(30) == Cap(30, 1.0)
    assert Cap.per_second(0.5) == Cap(1, 2.0)
