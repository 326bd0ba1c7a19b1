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

    ``cancel()`` drops the work in flight through ``run`` at once (an LLM request
    mid-flight, a tool's child process): the task awaiting it is cancelled, and ``run``
    turns the cancellation back into ``TurnCancelled``, so that task goes on to record
    what happened. The work runs in the caller's task, as ``asyncio.timeout`` does (a task
    of its own would cost two loop iterations per round), and a cancellation from outside
    the scope (the service stopping) stays a cancellation.
    """

    __slots__ = ("_cancelled", "_hosts", "_requested")

    def __init__(self) -> None:
        self._cancelled = False
        self._hosts: dict[asyncio.Task[Any], int] = {}  # tasks inside ``run``: how deep
        self._requested: set[asyncio.Task[Any]] = set()  # cancelled by us, not yet seen

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True
        try:
            current = asyncio.current_task()
        except RuntimeError:  # no running loop: nothing can be in flight here
            current = None
        for task in list(self._hosts):
            # The caller's own task stops at its next check: cancelling itself would
            # strike at whatever it awaits next, inside the scope or not.
            if task is not current and task not in self._requested:
                self._requested.add(task)
                task.cancel()

    def check(self) -> None:
        if self._cancelled:
            raise TurnCancelled

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        if self._cancelled:
            work.close()
            raise TurnCancelled
        task = asyncio.current_task()
        if task is None:  # not in a task: nothing to cancel it by
            return await work
        self._hosts[task] = self._hosts.get(task, 0) + 1
        try:
            return await work
        except asyncio.CancelledError:
            if task in self._requested:
                self._requested.discard(task)
                if task.uncancel() == 0:  # ours alone: the turn goes on to record it
                    raise TurnCancelled from None
            raise
        finally:
            depth = self._hosts.pop(task) - 1
            if depth:
                self._hosts[task] = depth
            elif task in self._requested:  # the work swallowed our cancellation
                self._requested.discard(task)
                task.uncancel()


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
