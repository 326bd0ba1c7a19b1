"""``KeyedLocks``: a first-come lock per key (a conversation, a person), kept only while
someone holds or waits for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["KeyedLocks"]

K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class _Held:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Holding or waiting: the lock is forgotten when none is left (a lock per key ever
    #: seen was kept for the process's life; found by review).
    users: int = 0


class KeyedLocks(Generic[K]):
    """``hold(key)``: one holder per key at a time, in the order they came (a free lock is
    taken without a pause, so tasks started in order hold it in order, whatever they
    await inside); keys never wait for each other."""

    def __init__(self) -> None:
        self._held: dict[K, _Held] = {}

    def __len__(self) -> int:
        """How many keys are held or waited for now."""
        return len(self._held)

    @asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        held = self._held.setdefault(key, _Held())
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if not held.users and self._held.get(key) is held:
                del self._held[key]
