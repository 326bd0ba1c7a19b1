"""What the operator can see and do, shared by the JSON API and the web inbox page.

Both surfaces are thin: they parse a request, call one method here and present the result
or the ``OperationError``. A decision goes through the hub's one door (``ChatHub.decide``),
which finds the call's chat from its row: the chat's adapter hears of it (its approval
card closes, naming the decider) and the resumed turn's answer reaches the chat; a call in
no chat now (a session since replaced by ``/new``) is decided by the engine alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from engine.approval import OPERATOR
from engine.core import Decided, Engine
from engine.hub import ChatHub, Choice, HubError
from engine.store import InboxError, InboxItem
from scheduler.grants import GrantError, JobGrants
from scheduler.service import Scheduler, SchedulerError, StopReport
from scheduler.store import Job, LastRun

__all__ = ["JobView", "OperationError", "Operations"]

ErrorKind = Literal["not_found", "conflict", "unavailable", "invalid", "timeout"]


class OperationError(Exception):
    """A request that cannot apply; ``kind`` picks the HTTP status, ``code`` is finer."""

    def __init__(self, kind: ErrorKind, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code or kind


@dataclass(frozen=True, slots=True)
class JobView:
    job: Job
    description: str
    running: bool
    last_status: str | None = None
    last_result: str | None = None
    last_error: str | None = None
    last_at: datetime | None = None
    #: A one-off task that is over: nothing to pause or resume (``Scheduler.finished``).
    finished: bool = False

    @property
    def grant_lines(self) -> list[str]:
        """What the job may do without asking, a line each (empty: it asks first)."""
        return JobGrants.of(self.job.run_context).lines()

    def as_json(self) -> dict[str, Any]:
        data = {key: _plain(value) for key, value in asdict(self.job).items()}
        data["description"] = self.description
        grants = JobGrants.of(self.job.run_context)
        data["grants"] = grants.to_json()
        data["grant_lines"] = grants.lines()
        data["running"] = self.running
        data["finished"] = self.finished
        data["last_run"] = (
            None
            if self.last_status is None
            else {
                "status": self.last_status,
                "result": self.last_result,
                "error": self.last_error,
                "at": _plain(self.last_at),
            }
        )
        return data


class Operations:
    """The engine, the hub (decisions in chats) and the scheduler (may be None: no jobs)."""

    def __init__(
        self, engine: Engine, hub: ChatHub | None = None, scheduler: Scheduler | None = None
    ) -> None:
        self.engine = engine
        self.hub = hub
        self.scheduler = scheduler

    # -- the inbox -----------------------------------------------------------------------------

    async def approvals(self) -> list[InboxItem]:
        return await self.engine.pending_approvals()

    async def questions(self) -> list[InboxItem]:
        return await self.engine.pending_questions()

    async def decide(
        self, tool_call_id: int, choice: Choice, *, note: str = "", by: str
    ) -> Decided:
        """Through the hub's one door (it finds the call's chat); with no hub, the engine."""
        try:
            if self.hub is not None:
                return await self.hub.decide(
                    tool_call_id, choice, decider=OPERATOR, note=note, by=by
                )
            if choice.approved:
                return await self.engine.approve(tool_call_id, choice.bypass, decider=OPERATOR)
            return await self.engine.reject(tool_call_id, note, decider=OPERATOR)
        except InboxError as exc:
            raise _inbox_error(exc) from None
        except (HubError, ValueError) as exc:  # a bad bypass: refused before anything changed
            raise OperationError("invalid", str(exc)) from None

    async def answer(self, request_id: int, answer: str, *, by: str) -> Decided:
        try:
            if self.hub is not None:
                return await self.hub.answer(request_id, answer, by=by)
            return await self.engine.resolve_question(request_id, answer)
        except InboxError as exc:
            raise _inbox_error(exc) from None
        except HubError as exc:
            raise OperationError("invalid", str(exc)) from None

    # -- jobs ----------------------------------------------------------------------------------

    def _jobs(self) -> Scheduler:
        if self.scheduler is None:
            raise OperationError("unavailable", "the scheduler is not running")
        return self.scheduler

    async def jobs(self) -> list[JobView]:
        scheduler = self._jobs()
        overview = await scheduler.store.overview()
        return [
            _view(scheduler, job, job.id in overview.running, overview.last.get(job.id))
            for job in overview.jobs
        ]

    async def job(self, job_id: int) -> Job:
        job = await self._jobs().store.get(job_id)
        if job is None or job.deleted_at is not None or job.origin_source is None:
            raise OperationError("not_found", f"job {job_id}: no such job")
        return job

    async def toggle_job(self, job_id: int, enabled: bool | None = None) -> JobView:
        """Pause or resume (``None``: flip)."""
        job = await self.job(job_id)
        assert job.origin_source is not None
        wanted = (not job.enabled) if enabled is None else enabled
        try:
            job = await self._jobs().toggle(job.origin_source, job.id, wanted)
        except SchedulerError as exc:
            raise OperationError("conflict", str(exc)) from None
        return _view(self._jobs(), job, False, None)

    async def revoke_job_grants(self, job_id: int) -> JobView:
        """The job asks before every action from now on."""
        return await self.narrow_job_grants(job_id, {})

    async def narrow_job_grants(self, job_id: int, body: dict[str, Any]) -> JobView:
        """Replace a job's grants with fewer (the owner narrows or revokes; widening is
        asked for in a chat, where the owner approves it with the job's card)."""
        job = await self.job(job_id)
        try:
            grants = self._jobs().grants.check(body, as_shown=True)
            job = await self._jobs().set_grants(job.id, grants)
        except (GrantError, SchedulerError) as exc:
            raise OperationError("invalid", str(exc)) from None
        return _view(self._jobs(), job, False, None)

    async def delete_job(self, job_id: int) -> StopReport:
        """Delete a job; its runs in flight are stopped wherever they run (the report says
        whether they had stopped when it answers)."""
        job = await self.job(job_id)
        assert job.origin_source is not None
        try:
            _job, stop = await self._jobs().delete_reporting(job.origin_source, job.id)
        except SchedulerError as exc:  # deleted meanwhile
            raise OperationError("not_found", str(exc)) from None
        return stop

    async def kill_job(self, job_id: int) -> list[int]:
        """Stop the job's runs in flight, on whichever process runs them; their session ids
        once they have stopped (``not_stopped`` when they did not in time)."""
        job = await self.job(job_id)
        stop = await self._jobs().stop(job.id)
        if not stop.sessions and stop.queued:
            return []  # claimed, not started: it ends as it would start (until 2026-12-07
            # "no run in flight", though the run was stopped; found by review)
        if not stop.sessions:
            raise OperationError("conflict", f"job {job.id} has no run in flight")
        if not stop.stopped:
            raise OperationError(
                "timeout",
                f"job {job.id}: its run was asked to stop but had not stopped after "
                f"{self._jobs().stop_wait_s:.0f} s; it stops at its next lease renewal",
            )
        return stop.sessions


def _inbox_error(exc: InboxError) -> OperationError:
    # The same answer again is, to a person at the inbox or the API, decided already.
    code = "resolved" if exc.code == "repeated" else exc.code
    return OperationError("not_found" if code == "not_found" else "conflict", str(exc), code)


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _view(scheduler: Scheduler, job: Job, running: bool, last: LastRun | None) -> JobView:
    status = None if last is None else last.status
    described, finished = scheduler.describe(job, status), scheduler.finished(job, status)
    if last is None:
        return JobView(job, described, running, finished=finished)
    return JobView(job, described, running, last.status, last.result, last.error, last.at, finished)
