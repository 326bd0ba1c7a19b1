"""``BackgroundTasks``: the hub's own tasks (batcher, sweeper, watchers, deliveries)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

__all__ = ["BackgroundTasks"]


class BackgroundTasks:
    """Holds a strong reference to each task until it ends (asyncio keeps only weak ones)."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def running(self) -> list[asyncio.Task[Any]]:
        return [*self._tasks]
