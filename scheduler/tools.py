"""The scheduler's tools: ``execute_task``, ``list_tasks``, ``delete_task``, ``toggle_task``.

Root agents of interactive sessions only: background sessions never schedule work.
(``execute_task`` mode ``sync`` is the sub-agent path of the sub-agents issue.)
"""

from __future__ import annotations

import json
from typing import Any

from engine.tools.base import ToolCategory, ToolContext, ToolError
from engine.tools.builtins._common import BuiltinTool, object_schema
from scheduler.service import Scheduler, SchedulerError

__all__ = ["scheduler_tools"]


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


class ExecuteTask(_SchedulerTool):
    name = "execute_task"
    description = (
        "Run work later or in the background. mode 'cron': a scheduled task with a crontab "
        "spec in `cron` (5 fields 'min hour day month weekday', e.g. '0 8 * * 1-5' for "
        "weekdays at 08:00; 6 fields with seconds first, 7 with a year last) in the user's "
        "time zone unless `timezone` says otherwise; each run's result is delivered to this "
        "chat. mode 'async': start now in the background and get the result back here when "
        "it is done. The prompt must be self-contained: the task does not see this chat."
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
            },
            ["mode", "title", "prompt"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        mode = args["mode"]
        source = await self._source(ctx)
        agent_id = args.get("agent_id") or "main"
        try:
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
                )
                return json.dumps(
                    {
                        "task_id": job.id,
                        "schedule": self.scheduler.describe(job),
                        "single_run": job.single_run,
                    }
                )
            if mode == "async":
                job = await self.scheduler.create_async(
                    source, ctx.session_id, args["title"], args["prompt"], agent_id=agent_id
                )
                return json.dumps(
                    {"task_id": job.id, "status": "started; the result comes back here"}
                )
        except SchedulerError as exc:
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
        return json.dumps(
            [
                {
                    "task_id": job.id,
                    "title": job.title,
                    "kind": job.kind,
                    "cron": job.spec,
                    "timezone": job.timezone,
                    "enabled": job.enabled,
                    "schedule": self.scheduler.describe(job),
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
        try:
            job = await self.scheduler.delete(await self._source(ctx), args["task_id"])
        except SchedulerError as exc:
            raise ToolError(f"delete_task: {exc}") from None
        return f"deleted task {job.id} ({job.title})"


class ToggleTask(_SchedulerTool):
    name = "toggle_task"
    rerun_safe = True  # idempotent: the same state again
    description = "Pause (enabled=false) or resume (enabled=true) one of this chat's tasks."

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(scheduler)
        self.parameters = object_schema(
            {"task_id": {"type": "integer"}, "enabled": {"type": "boolean"}},
            ["task_id", "enabled"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        try:
            job = await self.scheduler.toggle(
                await self._source(ctx), args["task_id"], args["enabled"]
            )
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
