"""Tests for the generic Broadcast channel (engine.bus.broadcast)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.bus.broadcast import DEFAULT_CAPACITY, Broadcast, BusClosed, Lagged, Subscription


async def drain(sub: Subscription[int]) -> list[int | Lagged]:
    """Read everything a subscription holds, ending at BusClosed (the bus must be closed)."""
    return [item async for item in sub]


async def take(sub: Subscription[int], n: int) -> list[int | Lagged]:
    """Read exactly n results (items or Lagged markers) without reaching BusClosed."""
    out: list[int | Lagged] = []
    for _ in range(n):
        try:
            out.append(await sub.recv())
        except Lagged as lagged:
            out.append(lagged)
    return out


async def test_two_subscribers_get_every_event_in_order() -> None:
    bus: Broadcast[int] = Broadcast()
    a, b = bus.subscribe(), bus.subscribe()
    for i in range(100):
        assert bus.publish(i) == 2
    bus.close()
    assert await drain(a) == list(range(100))
    assert await drain(b) == list(range(100))


async def test_default_and_per_subscription_capacity() -> None:
    bus: Broadcast[int] = Broadcast()
    assert bus.capacity == DEFAULT_CAPACITY == 256
    assert bus.subscribe().capacity == 256
    assert bus.subscribe(capacity=4).capacity == 4
    assert Broadcast[int](capacity=8).subscribe().capacity == 8


@pytest.mark.parametrize("capacity", [0, -1])
async def test_capacity_must_be_positive(capacity: int) -> None:
    with pytest.raises(ValueError, match="capacity"):
        Broadcast[int](capacity=capacity)
    with pytest.raises(ValueError, match="capacity"):
        Broadcast[int]().subscribe(capacity=capacity)


async def test_slow_subscriber_capacity_4_behind_by_14_gets_lagged_10_then_newest_4() -> None:
    # Semantics: Lagged(n) counts the items dropped from the buffer, i.e. unread - capacity.
    bus: Broadcast[int] = Broadcast()
    slow = bus.subscribe(capacity=4)
    for i in range(14):
        bus.publish(i)
    assert slow.pending == 4
    with pytest.raises(Lagged) as info:
        await slow.recv()
    assert info.value.missed == 10
    # Reported once, then the retained (newest) items in order.
    assert await take(slow, 4) == [10, 11, 12, 13]
    # It goes on normally afterwards.
    bus.publish(14)
    assert await slow.recv() == 14


@pytest.mark.parametrize(
    ("published", "expected"),
    [
        (4, [0, 1, 2, 3]),  # exactly full: nothing dropped, no Lagged
        (5, [Lagged(1), 1, 2, 3, 4]),
        (10, [Lagged(6), 6, 7, 8, 9]),
    ],
)
async def test_lag_count_is_unread_minus_capacity(published: int, expected: list[object]) -> None:
    bus: Broadcast[int] = Broadcast()
    sub = bus.subscribe(capacity=4)
    for i in range(published):
        bus.publish(i)
    bus.close()
    assert await drain(sub) == expected


async def test_lag_is_reported_again_for_each_new_gap() -> None:
    bus: Broadcast[int] = Broadcast()
    sub = bus.subscribe(capacity=2)
    for i in range(5):
        bus.publish(i)  # drops 0, 1, 2
    assert await take(sub, 2) == [Lagged(3), 3]
    for i in range(5, 9):
        bus.publish(i)  # buffer [4] + 5..8 -> drops 4, 5, 6
    bus.close()
    assert await drain(sub) == [Lagged(3), 7, 8]


async def test_lagged_is_a_value_in_async_for() -> None:
    bus: Broadcast[int] = Broadcast()
    sub = bus.subscribe(capacity=3)
    for i in range(8):
        bus.publish(i)
    bus.close()
    seen: list[int | Lagged] = []
    async for item in sub:
        seen.append(item)  # a consumer would log the Lagged and carry on
    assert seen == [Lagged(5), 5, 6, 7]
    assert repr(seen[0]) == "Lagged(5)"
    assert "missed 5" in str(seen[0])


async def test_never_reading_subscriber_does_not_slow_publisher_or_fast_subscriber() -> None:
    bus: Broadcast[int] = Broadcast()
    stuck = bus.subscribe()
    fast = bus.subscribe()
    received: list[int | Lagged] = []

    async def consume() -> None:
        async for item in fast:
            received.append(item)

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)  # let the consumer block in recv()
    for i in range(10_000):
        # publish is plain synchronous code: it cannot wait for `stuck`.
        assert bus.publish(i) == 2
        if i % 100 == 99:
            await asyncio.sleep(0)  # give the fast consumer its turn (buffer 256 > 100)
    assert stuck.pending == DEFAULT_CAPACITY  # bounded, not 10_000
    bus.close()
    await asyncio.wait_for(consumer, timeout=5)
    assert received == list(range(10_000))
    # The stuck one drains its newest 256 after one lag report.
    assert await drain(stuck) == [Lagged(10_000 - 256), *range(10_000 - 256, 10_000)]


async def test_publish_ten_thousand_with_unread_subscriber_completes_synchronously() -> None:
    bus: Broadcast[int] = Broadcast()
    stuck = bus.subscribe(capacity=4)
    reader = bus.subscribe(capacity=10_000)
    # No await in this loop: if publish could block, the test would hang (timeout 60 s).
    counts = {bus.publish(i) for i in range(10_000)}
    assert counts == {2}
    assert stuck.pending == 4
    assert reader.pending == 10_000
    assert await take(reader, 3) == [0, 1, 2]


async def test_recv_waits_for_a_publish() -> None:
    bus: Broadcast[str] = Broadcast()
    sub = bus.subscribe()
    waiter = asyncio.create_task(sub.recv())
    await asyncio.sleep(0)
    assert not waiter.done()
    bus.publish("hello")
    assert await asyncio.wait_for(waiter, timeout=1) == "hello"


async def test_cancelled_recv_loses_nothing() -> None:
    bus: Broadcast[int] = Broadcast()
    sub = bus.subscribe()
    waiter = asyncio.create_task(sub.recv())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    bus.publish(1)
    assert await sub.recv() == 1


async def test_close_ends_async_for_after_draining() -> None:
    bus: Broadcast[int] = Broadcast()
    sub = bus.subscribe()
    got: list[int | Lagged] = []

    async def consume() -> None:
        async for item in sub:
            got.append(item)

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)
    for i in range(3):
        bus.publish(i)
    bus.close()  # before the consumer ran: it must still see 0, 1, 2
    await asyncio.wait_for(consumer, timeout=1)
    assert got == [0, 1, 2]
    assert sub.closed
    with pytest.raises(BusClosed):
        await sub.recv()


async def test_close_wakes_a_blocked_recv_and_is_idempotent() -> None:
    bus: Broadcast[int] = Broadcast()
    sub = bus.subscribe()
    waiter = asyncio.create_task(sub.recv())
    await asyncio.sleep(0)
    bus.close()
    bus.close()
    with pytest.raises(BusClosed):
        await asyncio.wait_for(waiter, timeout=1)
    assert bus.closed
    assert bus.receiver_count == 0


async def test_pending_lag_is_reported_before_closed() -> None:
    bus: Broadcast[int] = Broadcast()
    sub = bus.subscribe(capacity=1)
    bus.publish(0)
    bus.publish(1)
    bus.close()
    with pytest.raises(Lagged):
        await sub.recv()
    assert await sub.recv() == 1
    with pytest.raises(BusClosed):
        await sub.recv()


async def test_publish_and_subscribe_after_close() -> None:
    bus: Broadcast[int] = Broadcast()
    bus.close()
    assert bus.publish(1) == 0
    late = bus.subscribe()
    assert late.closed
    assert await drain(late) == []


async def test_unsubscribe_removes_the_buffer() -> None:
    bus: Broadcast[int] = Broadcast()
    keep, leave = bus.subscribe(), bus.subscribe()
    bus.publish(0)
    assert bus.receiver_count == 2
    leave.close()
    leave.close()  # idempotent
    assert bus.receiver_count == 1
    assert leave.pending == 0
    assert bus.publish(1) == 1
    assert leave.pending == 0
    with pytest.raises(BusClosed):
        await leave.recv()
    assert await take(keep, 2) == [0, 1]


async def test_unsubscribe_wakes_a_blocked_recv() -> None:
    bus: Broadcast[int] = Broadcast()
    sub = bus.subscribe()
    waiter = asyncio.create_task(sub.recv())
    await asyncio.sleep(0)
    sub.close()
    with pytest.raises(BusClosed):
        await asyncio.wait_for(waiter, timeout=1)


async def test_context_manager_unsubscribes() -> None:
    bus: Broadcast[int] = Broadcast()
    async with bus.subscribe() as sub:
        assert bus.receiver_count == 1
        bus.publish(7)
        assert await sub.recv() == 7
    assert bus.receiver_count == 0
    assert sub.closed


async def test_publish_with_zero_subscribers() -> None:
    bus: Broadcast[int] = Broadcast()
    assert bus.publish(1) == 0
    assert bus.receiver_count == 0


async def test_subscribe_after_publish_sees_only_later_events() -> None:
    bus: Broadcast[int] = Broadcast()
    early = bus.subscribe()
    bus.publish(1)
    bus.publish(2)
    late = bus.subscribe()
    bus.publish(3)
    bus.close()
    assert await drain(early) == [1, 2, 3]
    assert await drain(late) == [3]


async def test_concurrent_readers_on_one_subscription_split_items() -> None:
    bus: Broadcast[int] = Broadcast()
    sub = bus.subscribe()
    readers = [asyncio.create_task(sub.recv()) for _ in range(3)]
    await asyncio.sleep(0)
    for i in range(3):
        bus.publish(i)
    results = await asyncio.wait_for(asyncio.gather(*readers), timeout=1)
    assert sorted(results) == [0, 1, 2]


# --- property test -----------------------------------------------------------------

# An op is ("publish", n): publish the next n integers, or ("read", k): read up to k
# results from each subscriber without blocking.
_ops = st.lists(
    st.tuples(st.sampled_from(["publish", "read"]), st.integers(min_value=0, max_value=12)),
    max_size=40,
)


def _check_stream(received: list[int | Lagged], published: list[int]) -> None:
    """Received items are exactly `published` in order, with each gap reported as Lagged(n)."""
    pos = 0
    for item in received:
        if isinstance(item, Lagged):
            assert item.missed > 0
            pos += item.missed
        else:
            assert item == published[pos]
            pos += 1
    assert pos == len(published)
    got = [i for i in received if not isinstance(i, Lagged)]
    missed = sum(i.missed for i in received if isinstance(i, Lagged))
    assert got == sorted(set(got))  # strictly increasing: an in-order subsequence
    assert set(got) <= set(published)
    assert len(got) + missed == len(published)


@settings(max_examples=300, deadline=None)
@given(
    ops=_ops,
    capacity=st.integers(min_value=1, max_value=8),
    late_capacity=st.integers(min_value=1, max_value=8),
    late_at=st.integers(min_value=0, max_value=40),
)
def test_property_received_plus_missed_equals_published(
    ops: list[tuple[str, int]], capacity: int, late_capacity: int, late_at: int
) -> None:
    async def scenario() -> None:
        bus: Broadcast[int] = Broadcast()
        subs = [bus.subscribe(capacity=capacity)]
        published: list[list[int]] = [[]]  # what each subscriber should account for
        received: list[list[int | Lagged]] = [[]]
        counter = 0
        for step, (op, n) in enumerate(ops):
            if step == late_at:
                subs.append(bus.subscribe(capacity=late_capacity))
                published.append([])
                received.append([])
            if op == "publish":
                for _ in range(n):
                    assert bus.publish(counter) == len(subs)
                    for p in published:
                        p.append(counter)
                    counter += 1
            else:
                for sub, got in zip(subs, received, strict=True):
                    # pending > 0 guarantees recv() returns or raises Lagged without waiting.
                    for _ in range(n):
                        if not sub.pending:
                            break
                        try:
                            got.append(await sub.recv())
                        except Lagged as lagged:
                            got.append(lagged)
            for sub in subs:
                assert sub.pending <= sub.capacity
        bus.close()
        for sub, got, pub in zip(subs, received, published, strict=True):
            got.extend([item async for item in sub])
            _check_stream(got, pub)

    asyncio.run(scenario())


@settings(max_examples=50, deadline=None)
@given(
    bursts=st.lists(st.integers(min_value=0, max_value=30), max_size=20),
    capacity=st.integers(min_value=1, max_value=8),
)
def test_property_with_a_concurrent_consumer(bursts: list[int], capacity: int) -> None:
    async def scenario() -> None:
        bus: Broadcast[int] = Broadcast()
        sub = bus.subscribe(capacity=capacity)
        got: list[int | Lagged] = []

        async def consume() -> None:
            async for item in sub:
                got.append(item)

        consumer = asyncio.create_task(consume())
        counter = 0
        for burst in bursts:
            for _ in range(burst):
                bus.publish(counter)
                counter += 1
            await asyncio.sleep(0)  # the consumer reads some between bursts
        bus.close()
        await asyncio.wait_for(consumer, timeout=5)
        _check_stream(got, list(range(counter)))

    asyncio.run(scenario())
