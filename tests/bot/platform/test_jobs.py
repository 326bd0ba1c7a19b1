"""``/jobs``: the same list and the same actions on every platform."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from bot.platform.commands import CommandContext
from bot.platform.jobs import NO_JOBS, JobAction, JobEntry, Jobs
from bot.telegram.dispatch.jobs import JobsPanel, ShowPage, parse_job_callback
from bot.terminal import terminal_commands
from engine.approval import OPERATOR, Decider
from scheduler.service import SchedulerError, StopReport


@dataclass
class Job:
    id: int
    title: str
    enabled: bool = True
    run_context: dict[str, Any] | None = field(default=None)
    owner_id: str | None = None
    finished: bool = False


TELEGRAM_CHAT = "telegram:42"


class Scheduler:
    def __init__(self, *jobs: Job) -> None:
        self._jobs = {job.id: job for job in jobs}

    async def jobs(self, source: str) -> list[Job]:
        return list(self._jobs.values()) if source in ("mine", TELEGRAM_CHAT) else []

    def describe(self, job: Job, last: str | None = None) -> str:
        return "every day at 08:00"

    async def last_statuses(self, jobs: list[Job]) -> dict[int, str]:
        return {job.id: "done" for job in jobs if job.finished}

    def finished(self, job: Job, last: str | None) -> bool:
        return last is not None

    async def delete_reporting(self, source: str, job_id: int) -> tuple[Job, StopReport]:
        if job_id not in self._jobs:
            raise SchedulerError(f"No job #{job_id} in this chat.")
        return self._jobs.pop(job_id), StopReport([], stopped=job_id != 9)

    async def toggle(self, source: str, job_id: int, enabled: bool) -> Job:
        self._jobs[job_id].enabled = enabled
        return self._jobs[job_id]

    async def revoke_grants(self, source: str, job_id: int) -> Job:
        self._jobs[job_id].run_context = None
        return self._jobs[job_id]


READS = {"allow_fs_reads": ["notes"], "allow_tools": ["mcp__news__*"]}


async def test_the_list_and_the_actions() -> None:
    jobs = Jobs(Scheduler(Job(3, "Briefing", run_context=READS), Job(4, "Tea", enabled=False)))  # type: ignore[arg-type]
    text, entries = await jobs.listing("mine")
    assert text == (
        "Scheduled jobs:\n\n#3 Briefing\nevery day at 08:00\n  • may read notes\n"
        "  • may call mcp__news__*\n\n#4 Tea\nevery day at 08:00\n  • asks before acting"
    )
    assert entries == [JobEntry(3, True, True), JobEntry(4, False)]
    assert await jobs.listing("other") == (NO_JOBS, [])
    assert (
        await jobs.act("mine", JobAction(3, "revoke"), OPERATOR)
        == "#3 now asks before every action."
    )
    assert (await jobs.listing("mine"))[1][0] == JobEntry(3, True, False)
    assert await jobs.act("mine", JobAction(3, "pause"), OPERATOR) == "Paused #3."
    assert await jobs.act("mine", JobAction(4, "resume"), OPERATOR) == "Resumed #4."
    assert await jobs.act("mine", JobAction(3, "delete"), OPERATOR) == "Deleted #3."
    assert await jobs.act("mine", JobAction(3, "delete"), OPERATOR) == "No job #3 in this chat."
    stubborn = Jobs(Scheduler(Job(9, "Stuck")))  # type: ignore[arg-type]
    assert await stubborn.act("mine", JobAction(9, "delete"), OPERATOR) == (
        "Deleted #9; its run is still stopping."
    )


async def test_telegram_adds_a_button_row_per_job() -> None:
    done = Job(5, "Xmas", False, finished=True)  # a one-off task that fired: delete only
    panel = JobsPanel(Scheduler(Job(3, "Briefing"), Job(4, "Tea", False, READS), done))  # type: ignore[arg-type]
    text, keyboard = await panel.render("mine")
    assert text.startswith("Scheduled jobs:") and keyboard is not None
    assert [[b["callback_data"] for b in row] for row in keyboard["inline_keyboard"]] == [
        ["jb1:3:p", "jb1:3:d"],
        ["jb1:4:r", "jb1:4:d", "jb1:4:g"],
        ["jb1:5:d"],
    ]
    assert parse_job_callback("jb1:4:g") == JobAction(4, "revoke")
    assert await panel.render("other") == (NO_JOBS, None)
    assert parse_job_callback("jb1:4:r") == JobAction(4, "resume")
    assert parse_job_callback("jb1:04:r") is None and parse_job_callback("jb1:4:x") is None


async def test_telegram_shows_fifty_jobs_a_page_at_a_time_within_one_message() -> None:
    """A chat's 50 jobs were one message of 6,300 characters, which Telegram refused:
    ``/jobs`` answered "something went wrong" (found by review). A page fits one message
    and 100 buttons; an action shows the page of the job it was on."""
    many = [
        Job(n, f"Morning briefing number {n} " + "x" * 60, run_context=READS) for n in range(1, 51)
    ]
    panel = JobsPanel(Scheduler(*many))  # type: ignore[arg-type]
    seen: list[int] = []
    page, pages = 1, None
    while True:
        text, keyboard = await panel.render("mine", page)
        assert keyboard is not None and len(text) <= 4096
        buttons = [b["callback_data"] for row in keyboard["inline_keyboard"] for b in row]
        assert len(buttons) <= 100
        seen += [int(d.split(":")[1]) for d in buttons if d.endswith(":p")]
        pages = pages or int(text.split(" of ")[1].split(")")[0])
        assert text.startswith(f"Scheduled jobs (page {page} of {pages}):")
        if f"jb1:{page + 1}:v" not in buttons:
            break
        assert parse_job_callback(f"jb1:{page + 1}:v") == ShowPage(page + 1)
        page += 1
    assert seen == list(range(1, 51)) and page == pages > 1
    last, _ = await panel.render("mine", showing=50)
    assert "#50 " in last and last.startswith(f"Scheduled jobs (page {pages} of")
    beyond, _ = await panel.render("mine", 10**6)  # a page that is gone: the last one
    assert beyond == last


async def test_the_terminal_lists_the_jobs_when_it_has_a_scheduler() -> None:
    assert terminal_commands().get("jobs") is None
    commands = terminal_commands(Jobs(Scheduler(Job(3, "Briefing"))))  # type: ignore[arg-type]
    assert "/jobs — Scheduled jobs of this chat" in commands.help_text()
    reply = await commands.run("jobs", CommandContext(None, "mine"))  # type: ignore[arg-type]
    assert reply is not None and "#3 Briefing" in reply


@pytest.mark.parametrize(
    ("policy", "who", "owner_id", "refused"),
    [
        (
            "requester+owner",
            "222",
            "telegram:111",
            "Only user 111 (who asked) or the owner can decide this.",
        ),
        # The job's own person (the scheduler names them by platform: until 2026-12-07
        # only the owner could, the tapper's bare id never matching; found by review).
        ("requester+owner", "111", "telegram:111", None),
        (  # the same number on another platform is someone else
            "requester+owner",
            "111",
            "slack:111",
            "Only user slack:111 (who asked) or the owner can decide this.",
        ),
        ("requester+owner", "222", None, None),  # nobody asked for it: any allowed member
        ("owner", "111", "telegram:111", "Only the owner can decide this."),
        ("owner", "999", "telegram:111", None),
        ("allowed", "222", "telegram:111", None),
    ],
)
async def test_resuming_or_deleting_follows_the_approvers_rule(
    policy: str, who: str, owner_id: str | None, refused: str | None
) -> None:
    """A member who may not approve the job owner's toggle_task resumed their job, with
    its standing grants, from the panel (found by review on 2026-12-06). Pausing and
    revoking take power away: any allowed member may."""
    decider = Decider(who, is_owner=who == "999", is_allowed=True)
    for action in ("resume", "delete"):
        jobs = Jobs(Scheduler(Job(4, "Cleanup", False, READS, owner_id)), policy)  # type: ignore[arg-type]
        said = await jobs.act(TELEGRAM_CHAT, JobAction(4, action), decider)  # type: ignore[arg-type]
        assert said == refused if refused else not said.startswith("Only"), (action, said)
    jobs = Jobs(Scheduler(Job(4, "Cleanup", True, READS, owner_id)), policy)  # type: ignore[arg-type]
    assert await jobs.act(TELEGRAM_CHAT, JobAction(4, "pause"), decider) == "Paused #4."
    assert (
        await jobs.act(TELEGRAM_CHAT, JobAction(4, "revoke"), decider)
        == "#4 now asks before every action."
    )
