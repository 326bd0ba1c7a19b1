"""``/jobs`` in Telegram: the chat's scheduled jobs with pause, resume and delete buttons.

What is listed and what an action does is ``bot/platform/jobs.py``. Callback data
``jb1:<job_id>:<p|r|d|g>`` (g: revoke the job's grants), or ``jb1:<page>:v`` (show that
page); the panel is re-rendered after each action, on the page of the job acted on. A
panel is one message, so it shows a page of jobs at a time: within Telegram's 4,096
characters and 100 buttons (a chat's 50 jobs made a message Telegram refused, and
``/jobs`` answered "something went wrong"; found by review).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.platform.jobs import JOBS_HEADER, NO_JOBS, JobAction, JobChoice, JobEntry, Jobs
from bot.telegram.sending.api import Json
from engine.approval import Decider
from scheduler.service import Scheduler

__all__ = ["JOBS_PREFIX", "JobsPanel", "ShowPage", "parse_job_callback"]

JOBS_PREFIX = "jb1"
_ACTIONS: dict[str, JobChoice] = {"p": "pause", "r": "resume", "d": "delete", "g": "revoke"}
_PAGE = "v"
#: A page's text at most (Telegram takes 4,096 characters; room for the header).
PAGE_CHARS = 3500
#: Jobs on a page at most: three buttons each, and two to turn pages, within 100.
PAGE_JOBS = 30


@dataclass(frozen=True, slots=True)
class ShowPage:
    page: int


def parse_job_callback(data: str) -> JobAction | ShowPage | None:
    if not isinstance(data, str) or len(data.encode()) > 64:
        return None
    parts = data.split(":")
    if len(parts) != 3 or parts[0] != JOBS_PREFIX or parts[2] not in (*_ACTIONS, _PAGE):
        return None
    if not parts[1].isascii() or not parts[1].isdigit() or parts[1].startswith("0"):
        return None
    if parts[2] == _PAGE:
        return ShowPage(int(parts[1]))
    return JobAction(int(parts[1]), _ACTIONS[parts[2]])


class JobsPanel:
    def __init__(self, scheduler: Scheduler, approvers: str = "requester+owner") -> None:
        self.jobs = Jobs(scheduler, approvers)

    async def render(
        self, source: str, page: int = 1, *, showing: int | None = None
    ) -> tuple[str, Json | None]:
        """The panel's page ``page`` (the last when there are fewer), or the page that
        shows job ``showing`` when it is still there."""
        listed = await self.jobs.listed(source)
        if not listed:
            return NO_JOBS, None
        pages = _pages(listed)
        on = [n for n, jobs in enumerate(pages, 1) if any(e.job_id == showing for _, e in jobs)]
        page = on[0] if on else min(max(page, 1), len(pages))
        jobs = pages[page - 1]
        header = (
            JOBS_HEADER if len(pages) == 1 else f"Scheduled jobs (page {page} of {len(pages)}):"
        )
        text = "\n".join([header, *(text for text, _ in jobs)])
        rows = self._buttons([entry for _, entry in jobs])
        turns = []
        if page > 1:
            turns.append(_button("◀️ Back", f"{JOBS_PREFIX}:{page - 1}:{_PAGE}"))
        if page < len(pages):
            turns.append(_button("More ▶️", f"{JOBS_PREFIX}:{page + 1}:{_PAGE}"))
        if turns:
            rows.append(turns)
        return text, {"inline_keyboard": rows}

    @staticmethod
    def _buttons(entries: list[JobEntry]) -> list[list[Json]]:
        rows = []
        for entry in entries:
            job_id = entry.job_id
            toggle = ("⏸ Pause", "p") if entry.enabled else ("▶️ Resume", "r")
            row = [_button(f"🗑 Delete #{job_id}", f"{JOBS_PREFIX}:{job_id}:d")]
            if not entry.finished:  # an ended one-off task has nothing to resume
                row.insert(
                    0, _button(f"{toggle[0]} #{job_id}", f"{JOBS_PREFIX}:{job_id}:{toggle[1]}")
                )
            if entry.granted:
                row.append(_button(f"🔒 Revoke #{job_id}", f"{JOBS_PREFIX}:{job_id}:g"))
            rows.append(row)
        return rows

    async def act(self, source: str, action: JobAction, decider: Decider) -> str:
        return await self.jobs.act(source, action, decider)


def _button(text: str, data: str) -> Json:
    return {"text": text, "callback_data": data}


def _pages(listed: list[tuple[str, JobEntry]]) -> list[list[tuple[str, JobEntry]]]:
    """The jobs in pages of at most ``PAGE_JOBS`` and ``PAGE_CHARS`` (a job longer than a
    page has one of its own, cut)."""
    pages: list[list[tuple[str, JobEntry]]] = [[]]
    size = 0
    for text, entry in listed:
        text = text[:PAGE_CHARS]
        if pages[-1] and (len(pages[-1]) >= PAGE_JOBS or size + len(text) > PAGE_CHARS):
            pages.append([])
            size = 0
        pages[-1].append((text, entry))
        size += len(text) + 1
    return pages
