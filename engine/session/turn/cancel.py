"""Cancellation scopes: one per ``handle_message`` / ``resume_turn`` call."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class TurnCancelled(Exception):
    """The turn's scope was cancelled (``/stop``) while work was in flight."""


class CancelScope:
    """Sticky cancellation shared by a turn and every sub-agent under it.

    Work started through ``run`` becomes its own task so that ``cancel()`` can drop it at
    once (an LLM request mid-flight, a tool's child process) without cancelling the
    caller's task, which still has to record what happened.
    """

    __slots__ = ("_cancelled", "_tasks")

    def __init__(self) -> None:
        self._cancelled = False
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True
        for task in list(self._tasks):
            task.cancel()

    def check(self) -> None:
        if self._cancelled:
            raise TurnCancelled

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        if self._cancelled:
            work.close()
            raise TurnCancelled
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._cancelled and (current is None or not current.cancelling()):
                raise TurnCancelled from None
            raise
        finally:
            self._tasks.discard(task)


class TurnScopes:
    """The scope of the call that holds the turn lock: each call mints a fresh one, so a
    ``cancel()`` that came after the last turn ended never stops the next one."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current = CancelScope()

    def fresh(self) -> CancelScope:
        self.current = CancelScope()
        return self.current

    def cancel(self) -> None:
        self.current.cancel()
