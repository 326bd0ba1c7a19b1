"""The scheduler's tools: ``execute_task``, ``list_tasks``, ``delete_task``, ``toggle_task``.

Root agents of interactive sessions only: background sessions never schedule work.
(``execute_task`` mode ``sync`` is the sub-agent path of the sub-agents issue.)
"""

from __future__ import annotations

import json
from typing import Any

from engine.tools import BuiltinTool, ToolCategory, ToolContext, ToolError, object_schema
from scheduler.grants import GrantError, JobGrants
from scheduler.service import Scheduler, SchedulerError

__all__ = ["scheduler_tools"]

# No maxItems: a longer list is refused by the checker, with a sentence the model reads.
_LIST = {"type": "array", "items": {"type": "string"}}
GRANTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "What the task may do without asking the user.",
    "properties": {
        "tools": {**_LIST, "description": "Tool names, or mcp__<server>__* for a server's."},
        "mcp_servers": {**_LIST, "description": "MCP servers to start before the task runs."},
        "read": {**_LIST, "description": "Workspace files or folders it may read."},
        "write": {**_LIST, "description": "Workspace files or folders it may write (and read)."},
        "working_directory": {"type": "string", "description": "Where relative paths start."},
    },
    "additionalProperties": False,
}
#: A run never waits longer than a day for a decision.
MAX_WAIT_MINUTES = 24 * 60


def _wait_seconds(minutes: object) -> int | None:
    if minutes is None:
        return None
    if (
        not isinstance(minutes, int)
        or isinstance(minutes, bool)
        or not 1 <= minutes <= MAX_WAIT_MINUTES
    ):
        raise ToolError(
            f"execute_task: approval_wait_minutes must be a whole number from 1 to {MAX_WAIT_MINUTES}"
        )
    return minutes * 60


class _SchedulerTool(BuiltinTool):
    category = ToolCategory.INTROSPECTION
    root_agent_only = True
    interactive_only = True

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    async def _source(self, ctx: ToolContext) -> str:
        session = await self.scheduler.engine.store.sessions.get(ctx.session_id)
        if session is None:
            raise ToolError(f"{self.name}: this session is unknown")
        return session.source

    async def _theirs_only(self, ctx: ToolContext, source: str, job_id: object, doing: str) -> None:
        """Under ``APPROVERS=requester+owner`` a person resumes or deletes only a job that
        serves them (or nobody), as the ``/jobs`` panel rules: the call's card names the
        one who asked the agent, who approved it themselves, and until 2026-12-07 a
        member resumed another's job, with its standing grants, or deleted it (found by
        review). The bot's owner does it from ``/jobs``."""
        if self.scheduler.engine.approvals.approvers != "requester+owner":
            return  # the card's rule covers it: the owner decides, or any allowed member
        job = next((j for j in await self.scheduler.jobs(source) if j.id == job_id), None)
        if job is None or not job.owner_id:
            return  # the scheduler says it is not there; nobody's job is everyone's
        asker = await self.scheduler.owner_of(ctx.session_id, source, before=ctx.asked_in)
        if asker != job.owner_id:
            raise ToolError(
                f"{self.name}: task {job.id} serves someone else; only they can {doing} it "
                "(or the bot's owner, from /jobs)"
            )


class ExecuteTask(_SchedulerTool):
    name = "execute_task"
    lasting = True  # a job and its grants outlive any bypass of the session
    description = (
        "Run work later or in the background. mode 'cron': a scheduled task with a crontab "
        "spec in `cron` (5 fields 'min hour day month weekday', e.g. '0 8 * * 1-5' for "
        "weekdays at 08:00; 6 fields with seconds first, 7 with a year last) in the user's "
        "time zone unless `timezone` says otherwise; each run's result is delivered to this "
        "chat. mode 'async': start now in the background and get the result back here when "
        "it is done. The prompt must be self-contained: the task does not see this chat. "
        "`grants` lists what the task may do without asking (the user approves them with "
        "the task): `tools` by name or one MCP server's tools as mcp__<server>__*, "
        "`mcp_servers` to start before it begins, workspace paths it may `read` or "
        "`write` (a folder covers what is in it), a `working_directory`. Anything else "
        "it tries is asked of the user in this chat when it runs."
    )

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(scheduler)
        self.parameters = object_schema(
            {
                "mode": {"type": "string", "enum": ["cron", "sync", "async"]},
                "title": {"type": "string", "description": "A short name for the task."},
                "prompt": {"type": "string", "description": "What the task must do."},
                "agent_id": {"type": "string", "description": "Agent to run it (default main)."},
                "cron": {"type": "string", "description": "Crontab spec (mode cron)."},
                "timezone": {"type": "string", "description": "IANA zone (mode cron)."},
                "grants": GRANTS_SCHEMA,
                "approval_wait_minutes": {
                    "type": "integer",
                    "description": "How long a run waits for the user's decision on a call "
                    "outside its grants before it is rejected (default 30).",
                },
            },
            ["mode", "title", "prompt"],
        )

    def describe_call(self, args: dict[str, Any]) -> str | None:
        """The task as the user approves it: what, when, and each grant on a line."""
        mode = args.get("mode")
        title = str(args.get("title") or "").strip() or "(untitled)"
        lines = [f"Task: {title}"]
        if mode == "cron":
            lines.append(
                f"Schedule: {self.scheduler.describe_spec(args.get('cron'), args.get('timezone'))}"
            )
        elif mode == "async":
            lines.append("Runs: now, in the background")
        try:
            grants = self.scheduler.grants.check(args.get("grants"))
        except GrantError as exc:
            lines.append(f"Grants: refused ({exc})")
        else:
            lines += grants.lines() or ["May do nothing without asking."]
        lines += ["", "Prompt:", str(args.get("prompt") or "")]
        return "\n".join(lines)

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        mode = args["mode"]
        source = await self._source(ctx)
        agent_id = args.get("agent_id") or "main"
        try:
            grants = self.scheduler.grants.check(args.get("grants"))
            wait = _wait_seconds(args.get("approval_wait_minutes"))
            owner = await self.scheduler.owner_of(ctx.session_id, source, before=ctx.asked_in)
            if mode == "cron":
                if not args.get("cron"):
                    raise ToolError("execute_task: mode 'cron' needs a `cron` spec")
                job = await self.scheduler.create_cron(
                    source,
                    args["title"],
                    args["cron"],
                    args["prompt"],
                    timezone=args.get("timezone"),
                    agent_id=agent_id,
                    grants=grants,
                    owner_id=owner,
                    approval_wait_s=wait,
                )
                return json.dumps(
                    {
                        "task_id": job.id,
                        "schedule": self.scheduler.describe(job),
                        "single_run": job.single_run,
                        "grants": grants.lines(),
                    }
                )
            if mode == "async":
                job = await self.scheduler.create_async(
                    source,
                    ctx.session_id,
                    args["title"],
                    args["prompt"],
                    agent_id=agent_id,
                    grants=grants,
                    owner_id=owner,
                    approval_wait_s=wait,
                )
                return json.dumps(
                    {"task_id": job.id, "status": "started; the result comes back here"}
                )
        except (SchedulerError, GrantError) as exc:
            raise ToolError(f"execute_task: {exc}") from None
        raise ToolError("execute_task: mode 'sync' is not available yet; use 'async'")


class ListTasks(_SchedulerTool):
    name = "list_tasks"
    rerun_safe = True  # read-only
    description = "List this chat's scheduled tasks with their schedules and next runs."

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(scheduler)
        self.parameters = object_schema({}, [])

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        jobs = await self.scheduler.jobs(await self._source(ctx))
        last = await self.scheduler.last_statuses(jobs)
        return json.dumps(
            [
                {
                    "task_id": job.id,
                    "title": job.title,
                    "kind": job.kind,
                    "cron": job.spec,
                    "timezone": job.timezone,
                    "enabled": job.enabled,
                    "schedule": self.scheduler.describe(job, last.get(job.id)),
                    "grants": JobGrants.of(job.run_context).lines(),
                }
                for job in jobs
            ],
            ensure_ascii=False,
        )


class DeleteTask(_SchedulerTool):
    name = "delete_task"
    description = "Delete one of this chat's scheduled tasks (a run in progress is stopped)."

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(scheduler)
        self.parameters = object_schema({"task_id": {"type": "integer"}}, ["task_id"])

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        source = await self._source(ctx)
        await self._theirs_only(ctx, source, args["task_id"], "delete")
        try:
            job = await self.scheduler.delete(source, args["task_id"])
        except SchedulerError as exc:
            raise ToolError(f"delete_task: {exc}") from None
        return f"deleted task {job.id} ({job.title})"


class ToggleTask(_SchedulerTool):
    name = "toggle_task"
    rerun_safe = True  # idempotent: the same state again
    lasting = True  # a job resumed runs its standing grants after any bypass (review)
    description = "Pause (enabled=false) or resume (enabled=true) one of this chat's tasks."

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(scheduler)
        self.parameters = object_schema(
            {"task_id": {"type": "integer"}, "enabled": {"type": "boolean"}},
            ["task_id", "enabled"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        source = await self._source(ctx)
        if args["enabled"]:  # pausing takes power away: anyone allowed may
            await self._theirs_only(ctx, source, args["task_id"], "resume")
        try:
            job = await self.scheduler.toggle(source, args["task_id"], args["enabled"])
        except SchedulerError as exc:
            raise ToolError(f"toggle_task: {exc}") from None
        state = "resumed" if job.enabled else "paused"
        return f"{state} task {job.id} ({job.title}): {self.scheduler.describe(job)}"


def scheduler_tools(scheduler: Scheduler) -> list[BuiltinTool]:
    return [
        ExecuteTask(scheduler),
        ListTasks(scheduler),
        DeleteTask(scheduler),
        ToggleTask(scheduler),
    ]
