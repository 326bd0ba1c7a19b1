"""``/jobs``: a chat's scheduled jobs, and pausing, resuming or deleting one of them.

The words and what an action does are the same everywhere; Telegram adds a pause/resume
and a delete button per job (``bot/telegram/dispatch/jobs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.platform.commands import Command, CommandContext
from engine.approval import Decider, Requester, refusal
from scheduler.grants import JobGrants
from scheduler.service import Scheduler, SchedulerError

__all__ = [
    "JOBS_HEADER",
    "JOBS_HELP",
    "NO_JOBS",
    "JobAction",
    "JobChoice",
    "JobEntry",
    "Jobs",
    "jobs_command",
]

NO_JOBS = "No scheduled jobs in this chat. Ask me, e.g. “every weekday at 8 send me a briefing”."

JOBS_HELP = "Scheduled jobs of this chat"
JOBS_HEADER = "Scheduled jobs:"

JobChoice = Literal["pause", "resume", "delete", "revoke"]


@dataclass(frozen=True, slots=True)
class JobAction:
    job_id: int
    action: JobChoice


@dataclass(frozen=True, slots=True)
class JobEntry:
    """One job as listed: what a platform needs for its buttons."""

    job_id: int
    enabled: bool
    #: Whether the job may do anything without asking (a platform offers to revoke it).
    granted: bool = False
    #: A one-off task that is over: nothing to pause or resume, only to delete.
    finished: bool = False


#: What a button may do only for someone the ``APPROVERS`` rule lets decide the job
#: owner's calls: what gives a job back its power, or takes the job away.
_DECIDED: frozenset[JobChoice] = frozenset({"resume", "delete"})


class Jobs:
    """The jobs of a source, through the scheduler (only that source's jobs)."""

    def __init__(self, scheduler: Scheduler, approvers: str = "requester+owner") -> None:
        """``approvers``: ``APPROVERS``, the rule for who may resume or delete a job."""
        self.scheduler = scheduler
        self.approvers = approvers

    async def listing(self, source: str) -> tuple[str, list[JobEntry]]:
        """The list's text (``NO_JOBS`` when empty) and its jobs, in order."""
        listed = await self.listed(source)
        if not listed:
            return NO_JOBS, []
        return "\n".join([JOBS_HEADER, *(text for text, _ in listed)]), [e for _, e in listed]

    async def listed(self, source: str) -> list[tuple[str, JobEntry]]:
        """Each job's lines (a blank line first) and its entry, in order."""
        listed = []
        jobs = await self.scheduler.jobs(source)
        last = await self.scheduler.last_statuses(jobs)
        for job in jobs:
            grants = JobGrants.of(job.run_context)
            lines = [f"\n#{job.id} {job.title}\n{self.scheduler.describe(job, last.get(job.id))}"]
            lines += [f"  • {line}" for line in grants.lines()] or ["  • asks before acting"]
            over = self.scheduler.finished(job, last.get(job.id))
            listed.append(("\n".join(lines), JobEntry(job.id, job.enabled, bool(grants), over)))
        return listed

    async def act(self, source: str, action: JobAction, decider: Decider) -> str:
        """Do ``action`` for ``decider``; the sentence to show (a refusal is the scheduler's
        own words, or the ``APPROVERS`` rule's: a member who may not approve the job
        owner's ``toggle_task`` resumed their job with its standing grants from the panel
        until 2026-12-06). Pausing and revoking take power away: any allowed member may."""
        if action.action in _DECIDED:
            refused = await self._refusal(source, action.job_id, decider)
            if refused is not None:
                return refused
        try:
            if action.action == "delete":
                job, stop = await self.scheduler.delete_reporting(source, action.job_id)
                if not stop.stopped:
                    return f"Deleted #{job.id}; its run is still stopping."
                return f"Deleted #{job.id}."
            if action.action == "revoke":
                job = await self.scheduler.revoke_grants(source, action.job_id)
                return f"#{job.id} now asks before every action."
            job = await self.scheduler.toggle(source, action.job_id, action.action == "resume")
            return f"{'Resumed' if job.enabled else 'Paused'} #{job.id}."
        except SchedulerError as exc:
            return str(exc)[:180]

    async def _refusal(self, source: str, job_id: int, decider: Decider) -> str | None:
        job = next((j for j in await self.scheduler.jobs(source) if j.id == job_id), None)
        if job is None:
            return None  # the scheduler says so
        if not job.owner_id:
            if self.approvers == "requester+owner":
                return None  # nobody asked for it (the operator's): as every allowed member's
            return refusal(self.approvers, decider, None)
        return refusal(self.approvers, decider, _requester(job.owner_id, source))


def _requester(owner_id: str, source: str) -> Requester:
    """The job's person as a tapper in ``source`` is named: the scheduler names them with
    their platform (``telegram:111``), a tap by the bare id (until 2026-12-07 they never
    matched, and only the owner could resume or delete a member's job; found by review).
    Someone of another platform keeps the platform's name: no tapper here is them."""
    platform, _, user = owner_id.partition(":")
    same = user and source.partition(":")[0] == platform
    return Requester(user if same else owner_id)


def jobs_command(jobs: Jobs) -> Command:
    """``/jobs`` as text, for a front end without buttons."""

    async def show(c: CommandContext) -> str:
        return (await jobs.listing(c.source))[0]

    return Command("jobs", JOBS_HELP, show)
