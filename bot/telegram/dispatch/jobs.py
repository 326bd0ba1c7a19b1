"""``/jobs`` in Telegram: the chat's scheduled jobs with pause, resume and delete buttons.

What is listed and what an action does is ``bot/platform/jobs.py``. Callback data
``jb1:<job_id>:<p|r|d|g>`` (g: revoke the job's grants); the panel is re-rendered after
each action.
"""

from __future__ import annotations

from bot.platform.jobs import JobAction, JobChoice, Jobs
from bot.telegram.sending.api import Json
from scheduler.service import Scheduler

__all__ = ["JOBS_PREFIX", "JobsPanel", "parse_job_callback"]

JOBS_PREFIX = "jb1"
_ACTIONS: dict[str, JobChoice] = {"p": "pause", "r": "resume", "d": "delete", "g": "revoke"}


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
        self.jobs = Jobs(scheduler)

    async def render(self, source: str) -> tuple[str, Json | None]:
        text, entries = await self.jobs.listing(source)
        if not entries:
            return text, None
        rows = []
        for entry in entries:
            job_id = entry.job_id
            toggle = ("⏸ Pause", "p") if entry.enabled else ("▶️ Resume", "r")
            rows.append(
                [
                    {
                        "text": f"{toggle[0]} #{job_id}",
                        "callback_data": f"{JOBS_PREFIX}:{job_id}:{toggle[1]}",
                    },
                    {"text": f"🗑 Delete #{job_id}", "callback_data": f"{JOBS_PREFIX}:{job_id}:d"},
                ]
            )
            if entry.granted:
                rows[-1].append(
                    {"text": f"🔒 Revoke #{job_id}", "callback_data": f"{JOBS_PREFIX}:{job_id}:g"}
                )
        return text, {"inline_keyboard": rows}

    async def act(self, source: str, action: JobAction) -> str:
        return await self.jobs.act(source, action)
