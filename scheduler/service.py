"""``Scheduler``: what chats, tools and the API ask of the scheduler, with its limits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from engine.core import Engine
from engine.hub import ChatHub
from engine.store import fenced, utcnow
from scheduler.cron import CronError, CronSchedule
from scheduler.dispatcher import Dispatcher
from scheduler.grants import GrantChecker, JobGrants
from scheduler.runner import OPERATOR_PLATFORMS, ChatBack, ChatCheck, JobRunner, OwnerCheck
from scheduler.store import Job, JobStore, NewJob
from scheduler.tic import Tic

__all__ = ["Scheduler", "SchedulerError", "SchedulerLimits", "StopReport"]

log = logging.getLogger(__name__)

#: A run's statuses while it is still to finish.
IN_FLIGHT = frozenset({"pending", "running"})


class SchedulerError(ValueError):
    """A request the scheduler refuses; the message says what to change."""


#: How often a stop looks whether the runs it asked to stop have ended.
STOP_POLL_S = 0.05
#: ``scheduled_jobs.spec``'s width.
MAX_SPEC_CHARS = 255
#: How often it asks the run again to stop, while it has not.
STOP_AGAIN_S = 1.0


@dataclass(frozen=True, slots=True)
class StopReport:
    """The sessions of the runs asked to stop, and whether all of them had stopped;
    ``queued``: runs claimed but not started yet, which end as they would start."""

    sessions: list[int]
    stopped: bool
    queued: int = 0


@dataclass(frozen=True, slots=True)
class SchedulerLimits:
    max_jobs_per_source: int = 50
    min_period_s: int = 60
    max_prompt_chars: int = 32_000
    max_title_chars: int = 200
    #: How long a run waits for a decision on a call outside its job's grants.
    approval_wait_s: int = 30 * 60


def _is_row_id(job_id: int) -> bool:
    """Whether ``job_id`` can name a row: a huge one overflowed the driver and the tool
    answered "internal error" instead of "no such task" (until 2026-12-06; found by review)."""
    return 0 < job_id < 2**63


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
        owner_allowed: OwnerCheck | None = None,
        chat_gone: ChatCheck | None = None,
        chat_back: ChatBack | None = None,
    ) -> None:
        """``owner_allowed``: the front ends' access check for the user a job acts for;
        ``chat_gone``: why a job's chat takes nothing more from the bot, if it does not;
        ``chat_back``: forgets that, when a person resumes a job there."""
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
            approval_wait=timedelta(seconds=self.limits.approval_wait_s),
            owner_allowed=owner_allowed,
            chat_gone=chat_gone,
        )
        self._chat_back = chat_back
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
        self.grants = GrantChecker(
            engine.workspace,
            lambda: engine.tools.for_agent(depth=0, is_interactive=False).names,
            lambda: engine.mcp.server_names if engine.mcp is not None else (),
        )
        #: How long a kill or delete waits for the run to stop before saying it did not.
        self.stop_wait_s = 10.0
        self._tasks: set[asyncio.Task[None]] = set()
        self.tic = Tic(engine, hub, sleep=sleep)
        self.tic_interval_s = tic_interval_s

    async def start(self) -> None:
        await self.dispatcher.start()
        if self.tic_interval_s > 0:
            self.dispatcher.every(self.tic_interval_s, self.tic.tick, "chathub-tic")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.tic.close()  # its events wait for their notices no more: leased, read again
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
        grants: JobGrants | None = None,
        owner_id: str | None = None,
        approval_wait_s: int | None = None,
    ) -> Job:
        """A recurring (or single future) job; its runs are delivered to ``source``.

        ``grants``: what its runs may do without asking (checked: ``self.grants``);
        ``owner_id``: whom it serves (its runs see that user's profile and ask them)."""
        timezone = timezone or self.timezone
        self._check_text(title, prompt)
        self._check_agent(agent_id)
        try:
            schedule = _schedule(spec.strip(), timezone)
        except CronError as exc:
            raise SchedulerError(str(exc)) from None
        if len(schedule.spec) > MAX_SPEC_CHARS:  # its column's width
            raise SchedulerError(f"cron spec: longer than {MAX_SPEC_CHARS} characters")
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
                spec=schedule.spec,  # spaces between fields made one
                agent_id=agent_id,
                origin_source=source,
                run_context=(grants or JobGrants()).run_context(),
                owner_id=owner_id,
                approval_wait_s=approval_wait_s,
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
        grants: JobGrants | None = None,
        owner_id: str | None = None,
        approval_wait_s: int | None = None,
    ) -> Job:
        """A task that runs now in the background; its result returns to the parent session."""
        self._check_text(title, prompt)
        self._check_agent(agent_id)
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
                run_context=(grants or JobGrants()).run_context(),
                owner_id=owner_id,
                approval_wait_s=approval_wait_s,
                single_run=True,
                next_run_at=self._clock(),
            )
        )
        self._spawn(self.dispatcher.wake())
        return job

    async def jobs(self, source: str) -> list[Job]:
        return await self.store.for_source(source)

    async def delete(self, source: str, job_id: int) -> Job:
        """Delete one of the source's jobs; a run in flight is stopped wherever it runs."""
        job, _stop = await self.delete_reporting(source, job_id)
        return job

    async def delete_reporting(self, source: str, job_id: int) -> tuple[Job, StopReport]:
        """``delete``, saying whether its runs in flight had stopped within ``stop_wait_s``."""
        job = await self._owned(source, job_id)
        sessions = await self.store.delete(job.id)
        await self.dispatcher.reschedule()
        return job, StopReport(sessions, await self._stopped(job.id, sessions))

    async def stop(self, job_id: int) -> StopReport:
        """Stop the job's runs in flight, on whichever process of a fleet runs them, and
        wait until they have stopped (``stopped``) or ``stop_wait_s`` has passed."""
        sessions, queued = await self.store.stop_runs(job_id)
        return StopReport(sessions, await self._stopped(job_id, sessions), queued)

    async def _stopped(self, job_id: int, sessions: list[int]) -> bool:
        if not sessions:
            return True
        polls_per_ask = round(STOP_AGAIN_S / STOP_POLL_S)
        for poll in range(round(self.stop_wait_s / STOP_POLL_S) + 1):
            if not set(sessions) & set(await self.store.running_sessions(job_id)):
                return True
            if poll % polls_per_ask == 0:
                # Asked again each second: a cancel that came as the run's turn began (or a
                # notice lost on the way) stopped nothing, and the lease renewal is far off.
                for session_id in sessions:
                    await self.hub.cancel_session(session_id)
            await asyncio.sleep(STOP_POLL_S)  # the run ends in another task or process
        return False

    async def toggle(self, source: str, job_id: int, enabled: bool) -> Job:
        """Pause or resume; resuming computes the next run from now (no catch-up)."""
        job = await self._owned(source, job_id)
        try:
            next_run = self.next_fire(job, self._clock()) if enabled else None
        except CronError as exc:  # its zone left the time-zone database (review)
            raise SchedulerError(
                f"task {job_id}: its schedule cannot be read any more ({exc}); give it a "
                "new schedule"
            ) from None
        if enabled and next_run is None:
            raise SchedulerError(f"task {job_id} has no future run to resume")
        chat = self.runner.chat_of(job)
        if enabled and chat is not None and self._chat_back is not None:
            # The person says the bot is welcome there again: its next run is tried (its
            # answer refused again, the note comes back). Until 2026-12-07 a job paused
            # for a blocked chat paused again at its first fire after a resume, the note
            # being cleared only by a recorded delivery (found by review).
            await self._chat_back(chat)
        job = await self.store.set_enabled(job.id, enabled, next_run)
        await self.dispatcher.reschedule()
        return job

    async def set_grants(self, job_id: int, grants: JobGrants) -> Job:
        """Narrow or revoke a job's grants (the owner's pages and API): ``grants`` may only
        keep what the job has; widening goes through a chat, where the owner approves it."""
        job = await self._live(job_id)
        added = grants.beyond(JobGrants.of(job.run_context))
        if added:
            raise SchedulerError(
                f"grants: only narrowing is possible here ({'; '.join(added.lines())}: not "
                "granted now); ask for more in the chat, where the owner approves it"
            )
        return await self.store.set_run_context(job.id, grants.run_context())

    async def revoke_grants(self, source: str, job_id: int) -> Job:
        """One of the source's jobs asks before every action from now on."""
        job = await self._owned(source, job_id)
        return await self.store.set_run_context(job.id, None)

    async def grant_tool(self, job_id: int, tool: str) -> Job:
        """Add ``tool`` to a job's grants (the "🔄 Session" choice on its run's card)."""
        job = await self._live(job_id)
        grants = JobGrants.of(job.run_context)
        return await self.store.set_run_context(job.id, grants.with_tool(tool).run_context())

    async def grant_for_session(self, session_id: int, tool_call_id: int) -> None:
        """ "🔄 Session" on a run's card: the run's job may call that tool from now on."""
        job_id = await self.store.job_of_session(session_id)
        call = await self.engine.store.history.get_tool_call(tool_call_id)
        if job_id is None or call is None:
            return
        try:
            self.grants.check({"tools": [call.name]})
        except ValueError:
            # A file tool is granted by path, an unknown one not at all: this approval
            # stands for this call only.
            log.info("job %s: %s is not a tool a job can be granted", job_id, call.name)
            return
        with contextlib.suppress(SchedulerError):
            await self.grant_tool(job_id, call.name)

    async def owner_of(
        self, session_id: int, source: str, *, before: int | None = None
    ) -> str | None:
        """Whom a job created in ``session_id`` (a chat of ``source``) serves: the person whose
        message the creating turn answers (the last before message ``before``, when given:
        the one that made the call), ``telegram:42``; the operator's front ends speak for
        their owner (``web:owner``); ``None`` when nobody can tell."""
        sender = await self.engine.store.inbox.last_sender(session_id, before=before)
        platform = source.split(":", 1)[0]
        if sender is not None:
            return f"{platform}:{sender}"
        if platform in OPERATOR_PLATFORMS:
            return f"{platform}:owner"
        return None

    def describe_spec(self, spec: object, timezone: object) -> str:
        """A proposed spec in words (the approval card), or what is wrong with it."""
        zone = timezone if isinstance(timezone, str) and timezone else self.timezone
        if not isinstance(spec, str) or not spec.strip():
            return "(no schedule given)"
        try:
            return f"{_schedule(spec.strip(), zone).describe()} ({zone})"
        except CronError as exc:
            return f"{spec} (not valid: {exc})"

    async def last_statuses(self, jobs: Sequence[Job]) -> dict[int, str]:
        """The latest run's status of each one-off task that is off, and of each schedule
        that ran out (``finished``'s question; a job with runs still to come needs none)."""
        return await self.store.last_statuses([j.id for j in jobs if self._over(j)])

    def finished(self, job: Job, last: str | None) -> bool:
        """A one-off task that fired (a single run, a background task started), or a
        schedule that fired and has no fire left (``0 9 1,2 1 * 2026``), ``last`` its
        latest run's status: nothing to pause or resume, only to delete (until 2026-12-07
        each was listed as paused with a ▶️ Resume that could only fail, a schedule run
        out counting against the chat's limit for good; found by review). One paused
        before its day never ran: it is paused."""
        return self._over(job) and last is not None

    def _over(self, job: Job) -> bool:
        """Off, and nothing to resume: a one-off, or a schedule with no fire left."""
        if job.enabled:
            return False
        if job.single_run:
            return True
        try:
            return job.kind == "cron" and self.next_fire(job, self._clock()) is None
        except CronError:  # its zone left the database: a new schedule would bring it back
            return False

    def describe(self, job: Job, last: str | None = None) -> str:
        """``every weekday at 08:00 — next: Mon 1 Dec 08:00 (Europe/Rome)`` style;
        ``last``: the latest run's status (a one-off task that fired is "done", or
        "running" while its run goes on)."""
        done = ""
        if self.finished(job, last) and job.deleted_at is None:
            done = " — running" if last in IN_FLIGHT else " — done"
        if job.kind != "cron" or job.spec is None:
            return f"{job.kind} task{done}"
        try:
            text = _schedule(job.spec, job.timezone).describe()
        except CronError:
            text = job.spec
        if done:
            return f"{text}{done}"
        if not job.enabled or job.next_run_at is None:
            return f"{text} — paused" if job.deleted_at is None else text
        try:
            zone = ZoneInfo(job.timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # dropped by a tzdata update
            return f"{text} — its time zone {job.timezone!r} is gone; give it a new schedule"
        local = job.next_run_at.astimezone(zone)
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

    def _check_agent(self, agent_id: str) -> None:
        """A job runs as an agent the service has: an unknown one failed at every run, and
        one longer than its column failed the job's INSERT on PostgreSQL as an internal
        error (found by review on 2026-12-06)."""
        agents = self.engine.agents
        if agents.get(agent_id) is None:
            known = ", ".join(["main", *sorted(a.id for a in agents.task_agents())])
            raise SchedulerError(f"agent: there is no agent {agent_id[:64]!r} (agents: {known})")

    async def _check_count(self, source: str) -> None:
        # Finished one-off tasks (single runs that fired, async tasks done) do not count.
        jobs = await self.store.for_source(source)
        last = await self.last_statuses(jobs)
        existing = sum(1 for job in jobs if not self.finished(job, last.get(job.id)))
        if existing >= self.limits.max_jobs_per_source:
            raise SchedulerError(
                f"this chat already has {existing} scheduled tasks (the limit is "
                f"{self.limits.max_jobs_per_source}); delete one first"
            )

    async def _live(self, job_id: int) -> Job:
        job = await self.store.get(job_id) if _is_row_id(job_id) else None
        if job is None or job.deleted_at is not None:
            raise SchedulerError(f"task {job_id}: no such task")
        return job

    async def _owned(self, source: str, job_id: int) -> Job:
        job = await self.store.get(job_id) if _is_row_id(job_id) else None
        if job is None or job.deleted_at is not None or job.origin_source != source:
            raise SchedulerError(f"task {job_id}: no such task in this chat")
        return job

    def _spawn(self, work) -> None:  # type: ignore[no-untyped-def]
        with fenced(None):  # a turn's fence must not follow the work out of the turn
            task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
