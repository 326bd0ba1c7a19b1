"""The dispatch step, woken by APScheduler at the earliest due time and on an interval.

APScheduler 3.11's ``AsyncIOScheduler`` with its in-memory job store only keeps two
timers (the next due time, a safety interval); the jobs themselves live in our tables,
so nothing is ever pickled. Each step: due fires become runs, expired leases are
reclaimed (or abandoned after the last attempt), runs are claimed and executed, and
outcomes stored but never delivered are delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from engine.store.schema import utcnow
from scheduler.runner import JobRunner
from scheduler.store import JobStore, NextFire

__all__ = ["Dispatcher", "StepReport"]

log = logging.getLogger(__name__)

WAKE_ID = "chathub-dispatch-wake"
SAFETY_ID = "chathub-dispatch-safety"


@dataclass(frozen=True, slots=True)
class StepReport:
    created: int
    missed: int
    abandoned: int
    started: int
    delivered: int


class Dispatcher:
    def __init__(
        self,
        store: JobStore,
        runner: JobRunner,
        next_fire: NextFire,
        *,
        clock: Callable[[], datetime] = utcnow,
        lease: timedelta = timedelta(seconds=60),
        safety_interval_s: float = 30.0,
        max_concurrent: int = 32,
    ) -> None:
        self.store = store
        self.runner = runner
        self.next_fire = next_fire
        self._clock = clock
        self._lease = lease
        self._safety_interval_s = safety_interval_s
        self._slots = asyncio.Semaphore(max_concurrent)
        self._max_concurrent = max_concurrent
        self._running: set[asyncio.Task[object]] = set()
        self._step_lock = asyncio.Lock()
        self._scheduler: AsyncIOScheduler | None = None
        #: Wall-clock time of the last completed step (health checks read it).
        self.last_step_at: datetime | None = None
        self._kicked = False
        self._closing = False

    async def start(self) -> None:
        self._scheduler = AsyncIOScheduler(timezone="UTC")
        self._scheduler.add_job(
            self.wake,
            IntervalTrigger(seconds=self._safety_interval_s),
            id=SAFETY_ID,
            max_instances=1,
            coalesce=True,
        )
        self._scheduler.start()
        await self.wake()

    def every(self, seconds: float, work: Callable[[], Any], job_id: str) -> None:
        """Run ``work`` on an interval in the same scheduler (the tic)."""
        assert self._scheduler is not None, "start() first"
        self._scheduler.add_job(
            work, IntervalTrigger(seconds=seconds), id=job_id, max_instances=1, coalesce=True
        )

    async def close(self) -> None:
        self._closing = True
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        self._scheduler = None
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def wake(self) -> None:
        """Run a step, then sleep until the next due time (jobs changed: call again)."""
        try:
            await self.step()
        except Exception:
            log.exception("dispatch step failed; the next wake retries")
        await self.reschedule()

    async def reschedule(self) -> None:
        if self._scheduler is None:
            return
        due = await self.store.next_due_at()
        if due is None:
            if self._scheduler.get_job(WAKE_ID) is not None:
                self._scheduler.remove_job(WAKE_ID)
            return
        self._scheduler.add_job(
            self.wake,
            DateTrigger(run_date=max(due, self._clock())),
            id=WAKE_ID,
            replace_existing=True,
            misfire_grace_time=None,
        )

    async def step(self) -> StepReport:
        async with self._step_lock:
            now = self._clock()
            made = await self.store.materialize(now, self.next_fire)
            abandoned = await self.store.abandon_expired(now)
            free = self._max_concurrent - len(self._running)
            claimed = await self.store.claim(self.runner.owner, now, self._lease, max(free, 0))
            for run in claimed:
                task = asyncio.create_task(self._execute(run))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
            pending = [
                run for run in await self.store.undelivered() if run.id not in self.runner.busy
            ]
            if pending:
                await self.runner.deliver(pending)
            self.last_step_at = now
            return StepReport(
                created=len(made.runs),
                missed=sum(made.missed.values()),
                abandoned=len(abandoned),
                started=len(claimed),
                delivered=len(pending),
            )

    async def drain(self) -> None:
        """Wait for the runs this process started, and the steps they kicked off."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)

    async def _execute(self, run) -> None:  # type: ignore[no-untyped-def]
        async with self._slots:
            try:
                await self.runner.execute(run)
            except Exception:
                log.exception("run %s failed in the runner", run.id)
        self._kick()

    def _kick(self) -> None:
        """A slot is free: claim more at once (a backlog never waits for the safety timer)."""
        if self._kicked or self._closing:
            return
        self._kicked = True

        async def again() -> None:
            try:
                await self.step()
            except Exception:
                log.exception("dispatch step after a run failed")
            finally:
                self._kicked = False

        task = asyncio.create_task(again())
        self._running.add(task)
        task.add_done_callback(self._running.discard)
