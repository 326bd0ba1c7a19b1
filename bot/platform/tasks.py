"""Background tasks a front end starts and must end when it closes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

__all__ = ["Background", "Runtime"]


class Background:
    """Tasks kept until they end (a task nobody holds may be collected mid-run)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Runtime:
    """The clock, the sleep and the tasks a front end's parts share (fakes in tests)."""

    clock: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]
    background: Background
