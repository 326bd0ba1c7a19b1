"""Injected clocks for tests: time moves only when a test moves it (or a sleep does)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta


class FakeClock:
    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


class FakeTime:
    """A monotonic clock; ``sleep`` records each delay. ``auto``: a sleep moves the clock
    at once; else it blocks until ``advance`` passes its deadline (concurrent tasks)."""

    def __init__(self, *, auto: bool = True, start: float = 0.0) -> None:
        self.now = start
        self.auto = auto
        self.sleeps: list[float] = []
        self._waiters: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        if self.auto:
            self.now += max(delay, 0.0)
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self.now + delay, future))
        await future

    async def advance(self, delta: float) -> None:
        """Move time on, wake every sleeper whose deadline has come, and let them run."""
        self.now += delta
        due = [w for w in self._waiters if w[0] <= self.now + 1e-9]
        self._waiters = [w for w in self._waiters if w not in due]
        for _, future in due:
            if not future.done():
                future.set_result(None)
        await settle()


async def settle(rounds: int = 50) -> None:
    """Let every ready task run until it blocks again (on fake time, or for good)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
