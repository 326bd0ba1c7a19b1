"""The open sockets of each conversation, for what the hub does not broadcast itself
(a question answered, a card decided in one tab): every tab hears it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from bot.webchat.protocol import ServerFrame

__all__ = ["PATIENCE_S", "Rooms", "Sink"]

log = logging.getLogger(__name__)

#: How long a broadcast waits for its slowest tab; a stuck one's send goes on by itself.
PATIENCE_S = 2.0


class Sink(Protocol):
    async def send(self, frame: ServerFrame) -> None:
        """Send ``frame``; a socket already gone drops it quietly."""


class Rooms:
    def __init__(self, patience_s: float = PATIENCE_S) -> None:
        self._rooms: dict[str, set[Sink]] = {}
        self._patience_s = patience_s
        #: Sends still under way past the patience (kept from garbage collection).
        self._late: set[asyncio.Future[Any]] = set()

    def join(self, source: str, sink: Sink) -> None:
        self._rooms.setdefault(source, set()).add(sink)

    def leave(self, source: str, sink: Sink) -> None:
        room = self._rooms.get(source)
        if room is not None:
            room.discard(sink)
            if not room:
                del self._rooms[source]

    async def broadcast(self, source: str, frame: ServerFrame) -> None:
        """Every tab at once, for at most the patience: a dead or frozen tab, whose send
        waits on its socket, held every other tab and the sender's own reader (until
        2026-12-06, found by review). Its send is not cut (half a frame would break that
        socket): it ends by itself, or with the socket."""
        sends = [asyncio.ensure_future(sink.send(frame)) for sink in self._rooms.get(source, ())]
        if not sends:
            return
        done, late = await asyncio.wait(sends, timeout=self._patience_s)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.warning("a tab's frame was not sent", exc_info=task.exception())
        for task in late:
            self._late.add(task)
            task.add_done_callback(self._late.discard)
