"""A conversation's tabs hear what one tab did, and a stuck tab holds up no other."""

from __future__ import annotations

import asyncio

from bot.webchat.protocol import Notice
from bot.webchat.rooms import Rooms


class Stuck:
    """A tab whose socket takes no more data (a dead or frozen browser)."""

    def __init__(self) -> None:
        self.let_go = asyncio.Event()
        self.got: list[object] = []

    async def send(self, frame: object) -> None:
        await self.let_go.wait()
        self.got.append(frame)


class Quick:
    def __init__(self) -> None:
        self.got: list[object] = []

    async def send(self, frame: object) -> None:
        self.got.append(frame)


async def test_a_stuck_tab_holds_up_neither_the_others_nor_the_sender() -> None:
    """The sender's reader awaits the broadcast of a voice note's quoted line: a tab that
    took no more data held it, and every other tab, until the socket timed out."""
    rooms = Rooms(patience_s=0.01)
    stuck, quick = Stuck(), Quick()
    rooms.join("web:1", stuck)
    rooms.join("web:1", quick)
    rooms.join("web:2", Quick())
    said = Notice(text="🎤 “hi”")
    await asyncio.wait_for(rooms.broadcast("web:1", said), timeout=10)
    assert quick.got == [said] and stuck.got == []
    stuck.let_go.set()  # its send was not cut: the frame reaches it once it takes data
    for _ in range(10):
        await asyncio.sleep(0)
    assert stuck.got == [said]
