"""``KeyedLocks``: one holder per key, in the order they came; keys side by side."""

from __future__ import annotations

import asyncio

from bot.delivery import KeyedLocks


async def test_arrivals_of_one_key_pass_in_the_order_they_came() -> None:
    """Each arrival is a task of its own and awaits before its lane: the first one's slow
    lookup let the second overtake it (a Slack mention answered before the line that came
    first; found by review). Another key never waits."""
    order = KeyedLocks[str]()
    lookup = asyncio.Event()
    passed: list[str] = []

    async def arrive(key: str, name: str, slow: bool = False) -> None:
        async with order.hold(key):
            if slow:
                await lookup.wait()
            passed.append(name)

    first = asyncio.create_task(arrive("thread", "first line", slow=True))
    second = asyncio.create_task(arrive("thread", "the mention"))
    elsewhere = asyncio.create_task(arrive("dm", "a DM"))
    await asyncio.wait_for(elsewhere, 1)
    assert passed == ["a DM"] and not second.done()
    lookup.set()
    await asyncio.wait_for(asyncio.gather(first, second), 1)
    assert passed == ["a DM", "first line", "the mention"]
    assert len(order) == 0  # nothing kept for keys no longer used
