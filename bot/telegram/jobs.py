"""``/jobs`` in Telegram: the chat's scheduled tasks with pause, resume and delete buttons.

Callback data ``jb1:<job_id>:<p|r|d>``; the panel is re-rendered after each action.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.telegram.api import Json
from scheduler.service import Scheduler, SchedulerError

__all__ = ["JOBS_PREFIX", "JobAction", "JobsPanel", "parse_job_callback"]

JOBS_PREFIX = "jb1"
_ACTIONS = {"p": "pause", "r": "resume", "d": "delete"}


@dataclass(frozen=True, slots=True)
class JobAction:
    job_id: int
    action: str


def parse_job_callback(data: str) -> JobAction | None:
    if not isinstance(data, str) or len(data.encode()) > 64:
        return None
    parts = data.split(":")
    if len(parts) != 3 or parts[0] != JOBS_PREFIX or parts[2] not in _ACTIONS:
        return None
    if not parts[1].isascii() or not parts[1].isdigit() or parts[1].startswith("0"):
        return None
    return JobAction(int(parts[1]), _ACTIONS[parts[2]])


class JobsPanel:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    async def render(self, source: str) -> tuple[str, Json | None]:
        jobs = await self.scheduler.jobs(source)
        if not jobs:
            return (
                "No scheduled jobs in this chat. Ask me, e.g. “every weekday at 8 send me a briefing”.",
                None,
            )
        lines, rows = ["Scheduled jobs:"], []
        for job in jobs:
            lines.append(f"\n#{job.id} {job.title}\n{self.scheduler.describe(job)}")
            toggle = ("⏸ Pause", "p") if job.enabled else ("▶️ Resume", "r")
            rows.append(
                [
                    {
                        "text": f"{toggle[0]} #{job.id}",
                        "callback_data": f"{JOBS_PREFIX}:{job.id}:{toggle[1]}",
                    },
                    {"text": f"🗑 Delete #{job.id}", "callback_data": f"{JOBS_PREFIX}:{job.id}:d"},
                ]
            )
        return "\n".join(lines), {"inline_keyboard": rows}

    async def act(self, source: str, action: JobAction) -> str:
        try:
            if action.action == "delete":
                job = await self.scheduler.delete(source, action.job_id)
                return f"Deleted #{job.id}."
            job = await self.scheduler.toggle(source, action.job_id, action.action == "resume")
            return f"{'Resumed' if job.enabled else 'Paused'} #{job.id}."
        except SchedulerError as exc:
            return str(exc)[:180]
