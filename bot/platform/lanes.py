"""Per-key ordered work: one chat's items run in order, chats never wait for each other."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["Lanes"]

log = logging.getLogger(__name__)

K = TypeVar("K")
T = TypeVar("T")


class Lanes(Generic[K, T]):
    """``submit(key, item)`` runs ``handle(key, item)`` after the key's earlier items.

    A worker task exists per key only while it has work; a failing item is logged and
    the next one runs.
    """

    #: What ``close`` gives the items in hand to finish by default.
    GRACE_S = 2.0

    def __init__(self, handle: Callable[[K, T], Awaitable[None]], name: str = "lane") -> None:
        self._handle = handle
        self.name = name
        self._queues: dict[K, deque[T]] = {}
        self._workers: dict[K, asyncio.Task[None]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False

    def submit(self, key: K, item: T) -> None:
        self._queues.setdefault(key, deque()).append(item)
        if key not in self._workers:
            self._idle.clear()
            self._workers[key] = asyncio.create_task(self._work(key), name=f"{self.name}:{key}")

    async def join(self) -> None:
        """Wait until every submitted item was handled."""
        await self._idle.wait()

    async def close(self, grace_s: float = GRACE_S) -> None:
        """Stop: queued items are left, and each item in hand gets ``grace_s`` to finish
        before it is cancelled. A reply cancelled between the platform taking it and its
        delivery being recorded would be sent again after a restart: the request is
        usually answered in milliseconds."""
        self._closing = True
        workers = list(self._workers.values())
        if workers and grace_s > 0:
            await asyncio.wait(workers, timeout=grace_s)
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._queues.clear()
        self._workers.clear()
        self._idle.set()

    async def _work(self, key: K) -> None:
        queue = self._queues[key]
        try:
            while queue and not self._closing:
                item = queue.popleft()
                try:
                    await self._handle(key, item)
                except Exception:
                    log.exception("%s %s: handling an item failed; going on", self.name, key)
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)
            if not self._workers:
                self._idle.set()
