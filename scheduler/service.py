"""``Scheduler``: what chats, tools and the API ask of the scheduler, with its limits."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from engine.bus.system import SessionCancelled
from engine.core import Engine
from engine.hub import ChatHub
from engine.store.fencing import fenced
from engine.store.schema import utcnow
from scheduler.cron import CronError, CronSchedule
from scheduler.dispatcher import Dispatcher
from scheduler.runner import JobRunner
from scheduler.store import Job, JobStore, NewJob
from scheduler.tic import Tic

__all__ = ["Scheduler", "SchedulerError", "SchedulerLimits"]

log = logging.getLogger(__name__)


class SchedulerError(ValueError):
    """A request the scheduler refuses; the message says what to change."""


@dataclass(frozen=True, slots=True)
class SchedulerLimits:
    max_jobs_per_source: int = 50
    min_period_s: int = 60
    max_prompt_chars: int = 32_000
    max_title_chars: int = 200


@lru_cache(maxsize=4096)
def _schedule(spec: str, timezone: str) -> CronSchedule:
    return CronSchedule.parse(spec, timezone)


@lru_cache(maxsize=16_384)
def _next_fire(spec: str, timezone: str, after: datetime) -> datetime | None:
    # Many jobs share a spec and fire together: one computation serves them all.
    return _schedule(spec, timezone).next_fire(after)


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        hub: ChatHub,
        *,
        timezone: str,
        limits: SchedulerLimits | None = None,
        clock: Callable[[], datetime] = utcnow,
        owner: str | None = None,
        lease: timedelta = timedelta(seconds=60),
        safety_interval_s: float = 30.0,
        tic_interval_s: int = 0,
        max_concurrent: int = 32,
        max_claimed: int = 20_000,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.engine = engine
        self.hub = hub
        self.timezone = timezone
        self.limits = limits or SchedulerLimits()
        self._clock = clock
        self.store = JobStore(engine.store.db)
        self.runner = JobRunner(
            engine,
            hub,
            self.store,
            owner=owner or f"worker-{uuid.uuid4().hex[:8]}",
            lease=lease,
            clock=clock,
            sleep=sleep,
        )
        self.dispatcher = Dispatcher(
            self.store,
            self.runner,
            self.next_fire,
            clock=clock,
            lease=lease,
            safety_interval_s=safety_interval_s,
            max_concurrent=max_concurrent,
            max_claimed=max_claimed,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self.tic = Tic(engine, hub)
        self.tic_interval_s = tic_interval_s

    async def start(self) -> None:
        await self.dispatcher.start()
        if self.tic_interval_s > 0:
            self.dispatcher.every(self.tic_interval_s, self.tic.tick, "chathub-tic")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.dispatcher.close()

    def next_fire(self, job: Job, after: datetime) -> datetime | None:
        if job.kind != "cron" or job.spec is None:
            return None
        return _next_fire(job.spec, job.timezone, after)

    # -- jobs a chat asks for ----------------------------------------------------------------

    async def create_cron(
        self,
        source: str,
        title: str,
        spec: str,
        prompt: str,
        *,
        timezone: str | None = None,
        agent_id: str = "main",
        run_context: dict | None = None,
    ) -> Job:
        """A recurring (or single future) job; its runs are delivered to ``source``."""
        timezone = timezone or self.timezone
        self._check_text(title, prompt)
        try:
            schedule = _schedule(spec.strip(), timezone)
        except CronError as exc:
            raise SchedulerError(str(exc)) from None
        now = self._clock()
        first = schedule.next_fire(now)
        if first is None:
            raise SchedulerError(f"cron spec: {spec!r} never fires after now")
        single = schedule.is_single_run(now)
        if not single:
            period = schedule.min_period(now)
            if period is not None and period.total_seconds() < self.limits.min_period_s:
                raise SchedulerError(
                    f"cron spec: {spec!r} fires every {int(period.total_seconds())} s; the "
                    f"shortest allowed period is {self.limits.min_period_s} s"
                )
        await self._check_count(source)
        job = await self.store.create(
            NewJob(
                kind="cron",
                title=title.strip(),
                prompt=prompt,
                timezone=timezone,
                spec=spec.strip(),
                agent_id=agent_id,
                origin_source=source,
                run_context=run_context,
                single_run=single,
                next_run_at=first,
            )
        )
        await self.dispatcher.reschedule()
        return job

    async def create_async(
        self,
        source: str | None,
        parent_session_id: int,
        title: str,
        prompt: str,
        *,
        agent_id: str = "main",
    ) -> Job:
        """A task that runs now in the background; its result returns to the parent session."""
        self._check_text(title, prompt)
        if source is not None:
            await self._check_count(source)
        job = await self.store.create(
            NewJob(
                kind="async",
                title=title.strip(),
                prompt=prompt,
                timezone=self.timezone,
                agent_id=agent_id,
                origin_source=source,
                parent_session_id=parent_session_id,
                single_run=True,
                next_run_at=self._clock(),
            )
        )
        self._spawn(self.dispatcher.wake())
        return job

    async def jobs(self, source: str) -> list[Job]:
        return await self.store.for_source(source)

    async def delete(self, source: str, job_id: int) -> Job:
        """Delete one of the source's jobs; a run in flight is cancelled."""
        job = await self._owned(source, job_id)
        for session_id in await self.store.delete(job.id):
            self.engine.system_bus.publish(SessionCancelled(session_id))
        await self.dispatcher.reschedule()
        return job

    async def toggle(self, source: str, job_id: int, enabled: bool) -> Job:
        """Pause or resume; resuming computes the next run from now (no catch-up)."""
        job = await self._owned(source, job_id)
        next_run = self.next_fire(job, self._clock()) if enabled else None
        if enabled and next_run is None:
            raise SchedulerError(f"task {job_id} has no future run to resume")
        job = await self.store.set_enabled(job.id, enabled, next_run)
        await self.dispatcher.reschedule()
        return job

    def describe(self, job: Job) -> str:
        """``every weekday at 08:00 — next: Mon 1 Dec 08:00 (Europe/Rome)`` style."""
        if job.kind != "cron" or job.spec is None:
            return f"{job.kind} task"
        try:
            text = _schedule(job.spec, job.timezone).describe()
        except CronError:
            text = job.spec
        if not job.enabled or job.next_run_at is None:
            return f"{text} — paused" if job.deleted_at is None else text
        local = job.next_run_at.astimezone(ZoneInfo(job.timezone))
        return f"{text} — next: {local:%a %d %b %Y %H:%M} ({job.timezone})"

    # -- internals ---------------------------------------------------------------------------

    def _check_text(self, title: str, prompt: str) -> None:
        if not title.strip():
            raise SchedulerError("title: empty; give the task a short name")
        if len(title) > self.limits.max_title_chars:
            raise SchedulerError(f"title: longer than {self.limits.max_title_chars} characters")
        if not prompt.strip():
            raise SchedulerError("prompt: empty; say what the task should do")
        if len(prompt) > self.limits.max_prompt_chars:
            raise SchedulerError(
                f"prompt: {len(prompt)} characters; the limit is {self.limits.max_prompt_chars}"
            )

    async def _check_count(self, source: str) -> None:
        # Finished one-off tasks (single runs that fired, async tasks done) do not count.
        existing = sum(
            1 for job in await self.store.for_source(source) if job.enabled or not job.single_run
        )
        if existing >= self.limits.max_jobs_per_source:
            raise SchedulerError(
                f"this chat already has {existing} scheduled tasks (the limit is "
                f"{self.limits.max_jobs_per_source}); delete one first"
            )

    async def _owned(self, source: str, job_id: int) -> Job:
        job = await self.store.get(job_id)
        if job is None or job.deleted_at is not None or job.origin_source != source:
            raise SchedulerError(f"task {job_id}: no such task in this chat")
        return job

    def _spawn(self, work) -> None:  # type: ignore[no-untyped-def]
        with fenced(None):  # a turn's fence must not follow the work out of the turn
            task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
