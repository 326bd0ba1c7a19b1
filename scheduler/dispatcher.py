"""The dispatch step, woken by APScheduler at the earliest due time and on an interval.

APScheduler 3.11's ``AsyncIOScheduler`` with its in-memory job store only keeps two
timers (the next due time, a safety interval); the jobs themselves live in our tables,
so nothing is ever pickled. Each step: due fires become runs, expired leases are
reclaimed (or abandoned after the last attempt), runs are claimed and executed, and
outcomes stored but never delivered are delivered.

Claiming and executing are decoupled: a step claims every claimable run (up to
``max_claimed`` held at once) in one transaction and hands them to an in-process queue;
at most ``max_concurrent`` of them execute at a time. A queued run is leased like an
executing one: the dispatcher renews all queued leases in one statement every lease/3,
so a run whose process dies while it waits is reclaimed by another worker when its lease
expires, exactly like a run that dies while it executes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from engine.store import fenced, utcnow
from scheduler.runner import JobRunner
from scheduler.store import Job, JobStore, NextFire, Run

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
        max_claimed: int = 20_000,
    ) -> None:
        self.store = store
        self.runner = runner
        self.next_fire = next_fire
        self._clock = clock
        self._lease = lease
        self._safety_interval_s = safety_interval_s
        self._max_concurrent = max_concurrent
        self._max_claimed = max(max_claimed, max_concurrent)
        #: Claimed runs waiting for an execution slot (their leases are renewed).
        self._queue: deque[tuple[Run, Job]] = deque()
        #: Ids of the runs this process holds: queued or executing.
        self._held: set[int] = set()
        self._workers = 0
        self._renewer: asyncio.Task[None] | None = None
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
        if self._renewer is not None:
            self._renewer.cancel()
        waiting = [run.id for run, _ in self._queue]
        self._queue.clear()
        if waiting:  # never started: give them back now rather than when their leases expire
            try:
                await self.store.release(self.runner.owner, waiting)
            except Exception:
                log.exception(
                    "giving back %d queued run(s) failed; their leases expire", len(waiting)
                )
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
        due = await self.store.next_due_at(besides=self.runner.owner)
        if due is None:
            if self._scheduler.get_job(WAKE_ID) is not None:
                self._scheduler.remove_job(WAKE_ID)
            return
        # A chat's turn may call this (a task created by a tool): APScheduler's timers copy
        # the caller's context, and with it the turn's fence, into every later wake.
        with fenced(None):
            self._add_wake(due)

    def _add_wake(self, due: datetime) -> None:
        assert self._scheduler is not None
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
            ended = await self.store.abandon_expired(now)
            if any(run.session_id is not None for run in ended):
                # Their sessions' calls waited for good, cards open (found by review).
                self._track(asyncio.create_task(self.runner.close_calls_left(ended)))
            room = self._max_claimed - len(self._held)
            claimed = await self.store.claim_with_jobs(
                self.runner.owner, now, self._lease, room, made.read
            )
            started = 0
            for run, job in claimed:
                # Our own expired lease (a stalled renewal) can come back: never hold it twice.
                if run.id not in self._held:
                    self._held.add(run.id)
                    self._queue.append((run, job))
                    started += 1
            self._spawn_workers()
            owner, until = self.runner.owner, now + self._lease
            # What this process is still delivering keeps its lease (a result may wait
            # long for its chat), and what it takes now is leased to it as it is read: not
            # another worker's run while its delivery lease holds, it is delivering.
            await self.store.renew_deliveries(owner, sorted(self.runner.busy), until)
            pending = await self.runner.sweepable(
                lambda: self.store.claim_deliveries(owner, now, until)
            )
            if pending:
                # Beside the step, not in it: a result brought back into its conversation
                # waits for that chat's turn (a long command, a card nobody answers), and
                # until 2026-12-06 no job of any chat fired meanwhile (found by review). Its
                # runs are busy from the start: no other sweep takes them.
                self._track(asyncio.create_task(self.runner.deliver(pending)))
            self.last_step_at = now
            return StepReport(
                created=len(made.runs),
                missed=sum(made.missed.values()),
                abandoned=sum(run.status == "abandoned" for run in ended),
                started=started,
                delivered=len(pending),
            )

    @property
    def queued(self) -> int:
        """Claimed runs waiting for an execution slot."""
        return len(self._queue)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def _spawn_workers(self) -> None:
        while self._queue and self._workers < self._max_concurrent and not self._closing:
            self._workers += 1
            self._track(asyncio.create_task(self._work()))
        if self._queue and self._renewer is None and not self._closing:
            self._renewer = asyncio.create_task(self._renew_queued())

    async def _work(self) -> None:
        """Execute queued runs one after the other until the queue is empty."""
        try:
            while self._queue and not self._closing:
                run, job = self._queue.popleft()
                if not self._queue and self._renewer is not None:
                    self._renewer.cancel()  # nothing left waiting; executing runs renew theirs
                try:
                    await self.runner.execute(run, job)
                except Exception:
                    log.exception("run %s failed in the runner", run.id)
                finally:
                    self._held.discard(run.id)
        finally:
            self._workers -= 1
        self._kick()

    async def _renew_queued(self) -> None:
        """Keep the leases of queued runs alive (executing ones renew their own)."""
        interval = max(self._lease.total_seconds() / 3, 0.05)
        try:
            while self._queue and not self._closing:
                await self.runner._sleep(interval)
                ids = [run.id for run, _ in self._queue]
                if not ids:
                    break
                kept = await self.store.renew(self.runner.owner, ids, self._clock() + self._lease)
                lost = set(ids) - kept
                if lost:
                    log.warning("%d queued run(s) lost their lease; not run here", len(lost))
                    self._queue = deque(item for item in self._queue if item[0].id not in lost)
                    self._held.difference_update(lost)
        except Exception:
            log.exception("renewing the leases of queued runs failed")
        finally:
            self._renewer = None
            if self._queue and not self._closing:
                self._spawn_workers()  # restart the renewal (the queue got new runs meanwhile)

    async def drain(self) -> None:
        """Wait for the runs this process started, and the steps they kicked off."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)

    def _kick(self) -> None:
        """The queue ran dry: claim more at once (a backlog never waits for the safety timer)."""
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
