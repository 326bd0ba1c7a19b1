"""Background tasks a front end starts and must end when it closes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from engine.hub import BackgroundTasks

__all__ = ["Background", "Runtime"]


class Background(BackgroundTasks):
    """Tasks kept until they end (a task nobody holds may be collected mid-run), cancelled
    when the front end closes; one spawned after that is cancelled before it starts (the
    lanes finishing their work may spawn some: a card posted again, through a sender and
    a database being closed)."""

    __slots__ = ("_closed",)

    def __init__(self) -> None:
        super().__init__()
        self._closed = False

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = super().spawn(work)
        if self._closed:
            task.cancel()
        return task

    async def close(self) -> None:
        self._closed = True
        tasks = self.running()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Runtime:
    """The clock, the sleep and the tasks a front end's parts share (fakes in tests)."""

    clock: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]
    background: Background
