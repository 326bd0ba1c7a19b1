"""Batch notifications from background work: a burst becomes one delivery."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from engine.hub.protocols import Sleep
from engine.hub.types import Notification

log = logging.getLogger(__name__)

Deliver = Callable[[list[Notification]], Awaitable[None]]


class NotificationBatcher:
    """Collects notifications for ``window_s`` after the first of a burst, then delivers."""

    def __init__(self, deliver: Deliver, window_s: float, sleep: Sleep = asyncio.sleep) -> None:
        self._deliver = deliver
        self._window_s = window_s
        self._sleep = sleep
        self._queue: asyncio.Queue[Notification] = asyncio.Queue()

    def push(self, notification: Notification) -> None:
        self._queue.put_nowait(notification)

    async def run(self) -> None:
        while True:
            first = await self._queue.get()
            await self._sleep(self._window_s)
            batch = [first]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._deliver(batch)
            except Exception:
                log.exception("delivering %d notification(s) failed", len(batch))
