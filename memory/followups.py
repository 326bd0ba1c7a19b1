"""Work that follows indexing (embedding, fact derivation), off the indexer's path.

Each job is an ``async () -> int`` that does whatever is pending in the database (its own
watermarks say what) and returns how much it did. ``FollowUps`` runs them in order in one
task of its own, woken after every indexing round; wake-ups while it works coalesce into
one more pass. A slow model call here delays neither indexing nor any turn; a job that
raises is logged and retried at the next wake-up (its watermark did not move).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

__all__ = ["FollowUps", "Job"]

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[int]]


class FollowUps:
    def __init__(self, jobs: Sequence[tuple[str, Job]] = ()) -> None:
        self._jobs = list(jobs)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def add(self, name: str, job: Job) -> None:
        self._jobs.append((name, job))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._jobs]

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def start(self) -> None:
        if self._jobs and self._task is None:
            self._task = asyncio.create_task(self._run(), name="chathub-memory-followups")
            self.wake()  # whatever a previous run left pending

    def wake(self) -> None:
        if self._task is not None:
            self._idle.clear()
            self._wake.set()

    async def settled(self) -> None:
        """Return once no pass is due or running (at once when not started)."""
        while self._task is not None and not self._task.done() and not self._idle.is_set():
            waiter = asyncio.ensure_future(self._idle.wait())
            await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None
        self._idle.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            for name, job in self._jobs:
                try:
                    await job()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("memory: %s failed; retrying at the next round", name)
            if not self._wake.is_set():
                self._idle.set()
