"""Background tasks a front end starts and must end when it closes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from engine.hub import BackgroundTasks

__all__ = ["Background", "Runtime"]


class Background(BackgroundTasks):
    """Tasks kept until they end (a task nobody holds may be collected mid-run), cancelled
    when the front end closes."""

    __slots__ = ()

    async def close(self) -> None:
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
