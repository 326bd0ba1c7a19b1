"""``Lanes``: one key's items in order, keys side by side, and a stop that lets the item
in hand finish (a reply the platform took must be recorded as sent)."""

from __future__ import annotations

import asyncio

from bot.platform.lanes import Lanes


class Work:
    """Items that wait for their release, noting when they start and end."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.release: dict[str, asyncio.Event] = {}
        self.begun: dict[str, asyncio.Event] = {}

    async def handle(self, _key: str, item: str) -> None:
        self.started.append(item)
        self.begun.setdefault(item, asyncio.Event()).set()
        await self.release.setdefault(item, asyncio.Event()).wait()
        self.finished.append(item)

    def let_go(self, item: str) -> None:
        self.release.setdefault(item, asyncio.Event()).set()


async def until_started(work: Work, item: str) -> None:
    await work.begun.setdefault(item, asyncio.Event()).wait()


async def test_items_of_a_key_run_in_order_and_keys_side_by_side() -> None:
    work = Work()
    lanes: Lanes[str, str] = Lanes(work.handle)
    lanes.submit("a", "a1")
    lanes.submit("a", "a2")
    lanes.submit("b", "b1")
    await until_started(work, "b1")
    assert work.started == ["a1", "b1"]  # a2 waits for a1, b1 for nobody
    for item in ("b1", "a1", "a2"):
        work.let_go(item)
    await lanes.join()
    assert work.finished == ["b1", "a1", "a2"]


async def test_a_stop_lets_the_item_in_hand_finish_and_starts_no_other() -> None:
    work = Work()
    lanes: Lanes[str, str] = Lanes(work.handle)
    lanes.submit("chat", "in hand")
    lanes.submit("chat", "queued")
    await until_started(work, "in hand")
    closing = asyncio.create_task(lanes.close(grace_s=60))
    await asyncio.sleep(0)
    assert not closing.done()  # waiting for the item in hand
    work.let_go("in hand")
    await closing
    assert work.finished == ["in hand"] and work.started == ["in hand"]


async def test_an_item_past_the_grace_is_cancelled() -> None:
    work = Work()
    lanes: Lanes[str, str] = Lanes(work.handle)
    lanes.submit("chat", "stuck")
    await until_started(work, "stuck")
    await lanes.close(grace_s=0)
    assert work.finished == []
    await lanes.join()  # nothing left running
