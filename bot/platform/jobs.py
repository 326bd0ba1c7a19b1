"""``/jobs``: a chat's scheduled jobs, and pausing, resuming or deleting one of them.

The words and what an action does are the same everywhere; Telegram adds a pause/resume
and a delete button per job (``bot/telegram/jobs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.platform.commands import Command, CommandContext
from scheduler.service import Scheduler, SchedulerError

__all__ = ["JOBS_HELP", "NO_JOBS", "JobAction", "JobChoice", "JobEntry", "Jobs", "jobs_command"]

NO_JOBS = "No scheduled jobs in this chat. Ask me, e.g. “every weekday at 8 send me a briefing”."

JOBS_HELP = "Scheduled jobs of this chat"

JobChoice = Literal["pause", "resume", "delete"]


@dataclass(frozen=True, slots=True)
class JobAction:
    job_id: int
    action: JobChoice


@dataclass(frozen=True, slots=True)
class JobEntry:
    """One job as listed: what a platform needs for its buttons."""

    job_id: int
    enabled: bool


class Jobs:
    """The jobs of a source, through the scheduler (only that source's jobs)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    async def listing(self, source: str) -> tuple[str, list[JobEntry]]:
        """The list's text (``NO_JOBS`` when empty) and its jobs, in order."""
        jobs = await self.scheduler.jobs(source)
        if not jobs:
            return NO_JOBS, []
        lines = ["Scheduled jobs:"]
        for job in jobs:
            lines.append(f"\n#{job.id} {job.title}\n{self.scheduler.describe(job)}")
        return "\n".join(lines), [JobEntry(job.id, job.enabled) for job in jobs]

    async def act(self, source: str, action: JobAction) -> str:
        """Do ``action``; the sentence to show (a refusal is the scheduler's own words)."""
        try:
            if action.action == "delete":
                job = await self.scheduler.delete(source, action.job_id)
                return f"Deleted #{job.id}."
            job = await self.scheduler.toggle(source, action.job_id, action.action == "resume")
            return f"{'Resumed' if job.enabled else 'Paused'} #{job.id}."
        except SchedulerError as exc:
            return str(exc)[:180]


def jobs_command(jobs: Jobs) -> Command:
    """``/jobs`` as text, for a front end without buttons."""

    async def show(c: CommandContext) -> str:
        return (await jobs.listing(c.source))[0]

    return Command("jobs", JOBS_HELP, show)
