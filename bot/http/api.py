"""The operator's JSON API: sessions, the Agent Inbox, scheduled jobs, metrics.

Every route is behind the bearer ``CHATHUB_API_TOKEN`` (when no token is configured the
app only starts bound to loopback, see ``create_app``). Bodies are validated with pydantic
models, so a 422 lists the fields at fault; a body over ``MAX_BODY_BYTES`` is refused with
413 before it is parsed. The OpenAPI document (``/api/openapi.json``) is built from the
route table below and the models' JSON schemas.
"""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.engine import Connection
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from engine.approval.broker import BypassRequest
from engine.bus.system import SessionCancelled
from engine.core import Engine
from engine.store.inbox import InboxError, InboxItem
from engine.store.schema import chat_history as h
from engine.store.schema import chat_llm_tools as t
from engine.store.schema import job_runs as r
from engine.store.schema import scheduled_jobs as j
from engine.store.schema import utcnow
from scheduler.service import Scheduler, SchedulerError
from scheduler.store import Job

__all__ = ["MAX_BODY_BYTES", "ApiRoutes"]

MAX_BODY_BYTES = 1024 * 1024
MAX_NOTE_CHARS = 4000

Handler = Callable[[Request], Awaitable[Response]]


# -- request bodies ---------------------------------------------------------------------------


class ApprovalDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    action: Literal["approve", "reject"]
    note: str = Field(default="", max_length=MAX_NOTE_CHARS)
    bypass_secs: float | None = Field(default=None, gt=0)
    bypass_scope: str | None = Field(default=None, max_length=64)
    bypass_value: str | None = Field(default=None, max_length=255)


class ClarificationAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    answer: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)


class JobToggle(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    enabled: bool | None = None


class _BadRequest(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


# -- the route table (also the OpenAPI document) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Spec:
    path: str
    method: str
    name: str
    summary: str
    body: type[BaseModel] | None = None
    responses: tuple[int, ...] = (200,)
    query: tuple[str, ...] = ()


_SPECS = (
    _Spec("/api/sessions", "GET", "list_sessions", "Sessions, newest first, one page",
          query=("source", "page", "per_page"), responses=(200, 401, 422)),
    _Spec("/api/sessions/{session_id:int}", "GET", "session_detail",
          "A session and its whole message tree", responses=(200, 401, 404)),
    _Spec("/api/inbox", "GET", "inbox", "Pending approvals and open clarification questions",
          responses=(200, 401)),
    _Spec("/api/inbox/approvals/{tool_call_id:int}/resolve", "POST", "resolve_approval",
          "Approve or reject a gated tool call", body=ApprovalDecision,
          responses=(200, 401, 404, 409, 413, 422)),
    _Spec("/api/inbox/clarifications/{request_id:int}/resolve", "POST", "resolve_clarification",
          "Answer an ask_user_clarification question", body=ClarificationAnswer,
          responses=(200, 401, 404, 409, 413, 422)),
    _Spec("/api/jobs", "GET", "list_jobs", "Scheduled jobs (not deleted)",
          responses=(200, 401, 503)),
    _Spec("/api/jobs/{job_id:int}/toggle", "POST", "toggle_job",
          "Pause or resume a job (no body: flip)", body=JobToggle,
          responses=(200, 401, 404, 409, 413, 422, 503)),
    _Spec("/api/jobs/{job_id:int}", "DELETE", "delete_job",
          "Delete a job; a run in flight is cancelled", responses=(200, 401, 404, 503)),
    _Spec("/api/jobs/{job_id:int}/kill", "POST", "kill_job",
          "Cancel the job's runs in flight (409 when none is running)",
          responses=(202, 401, 404, 409, 503)),
    _Spec("/metrics", "GET", "metrics", "Prometheus text metrics", responses=(200, 401)),
    _Spec("/api/openapi.json", "GET", "openapi", "This document", responses=(200, 401)),
)  # fmt: skip


class ApiRoutes:
    """The API's Starlette routes over explicit dependencies (``scheduler`` may be None)."""

    def __init__(
        self,
        engine: Engine,
        scheduler: Scheduler | None = None,
        *,
        token: str | None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.engine = engine
        self.scheduler = scheduler
        self.token = token or None
        self._token = token.encode() if token else None
        self._clock = clock

    def routes(self) -> list[Route]:
        return [
            Route(
                spec.path,
                self._guarded(getattr(self, spec.name)),
                methods=[spec.method],
                name=f"api_{spec.name}",
            )
            for spec in _SPECS
        ]

    # -- plumbing ------------------------------------------------------------------------------

    def _guarded(self, handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def guarded(request: Request) -> Response:
            if not self._authorized(request):
                return JSONResponse(
                    {"error": "missing or wrong bearer token"},
                    status_code=401,
                    headers={"www-authenticate": "Bearer"},
                )
            try:
                return await handler(request)
            except _BadRequest as bad:
                return bad.response

        return guarded

    def _authorized(self, request: Request) -> bool:
        if self._token is None:
            return True
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(
            value.strip().encode(), self._token
        )

    async def _body(self, request: Request, model: type[BaseModel], *, optional: bool = False):
        """The validated body; ``_BadRequest`` with 413 or 422 otherwise."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise _BadRequest(_error(413, f"body over {MAX_BODY_BYTES} bytes"))
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _BadRequest(_error(413, f"body over {MAX_BODY_BYTES} bytes"))
            chunks.append(chunk)
        raw = b"".join(chunks)
        if optional and not raw.strip():
            return model()
        try:
            data = json.loads(raw)
        except ValueError:
            raise _BadRequest(_error(422, "body is not valid JSON")) from None
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            detail = json.loads(exc.json(include_url=False, include_context=False))
            raise _BadRequest(_error(422, "invalid body", detail=detail)) from None

    def _int_query(self, request: Request, name: str, default: int) -> int:
        value = request.query_params.get(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except ValueError:
            raise _BadRequest(_error(422, f"{name}: an integer is required")) from None

    def _jobs(self) -> Scheduler:
        if self.scheduler is None:
            raise _BadRequest(_error(503, "the scheduler is not running"))
        return self.scheduler

    async def _job(self, job_id: int) -> Job:
        job = await self._jobs().store.get(job_id)
        if job is None or job.deleted_at is not None or job.origin_source is None:
            raise _BadRequest(_error(404, f"job {job_id}: no such job"))
        return job

    # -- sessions ------------------------------------------------------------------------------

    async def list_sessions(self, request: Request) -> Response:
        source = request.query_params.get("source") or None
        page = self._int_query(request, "page", 1)
        per_page = self._int_query(request, "per_page", 20)
        try:
            listing = await self.engine.store.views.list_sessions(
                source=source, page=page, per_page=per_page
            )
        except ValueError as exc:
            return _error(422, str(exc))
        return JSONResponse(listing)

    async def session_detail(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        detail = await self.engine.store.views.session_detail(session_id)
        if detail is None:
            return _error(404, f"session {session_id}: no such session")
        return JSONResponse(detail)

    # -- the inbox -----------------------------------------------------------------------------

    async def inbox(self, request: Request) -> Response:
        now = self._clock()
        approvals = [
            self._approval_json(item, now) for item in await self.engine.pending_approvals()
        ]
        questions = [
            self._question_json(item, now) for item in await self.engine.pending_questions()
        ]
        return JSONResponse({"approvals": approvals, "clarifications": questions})

    @staticmethod
    def _common(item: InboxItem, now: datetime) -> dict[str, Any]:
        return {
            "session_id": item.session_id,
            "source": item.source,
            "agent_id": item.agent_id,
            "depth": item.depth,
            "context_label": item.context_label,
            "requested_at": item.requested_at.isoformat(),
            "age_s": round(max((now - item.requested_at).total_seconds(), 0.0), 3),
        }

    def _approval_json(self, item: InboxItem, now: datetime) -> dict[str, Any]:
        return {
            "tool_call_id": item.tool_call_id,
            "tool": item.name,
            "arguments": _arguments(item.arguments),
            **self._common(item, now),
        }

    def _question_json(self, item: InboxItem, now: datetime) -> dict[str, Any]:
        arguments = _arguments(item.arguments)
        question = arguments.get("question") if isinstance(arguments, dict) else None
        return {"request_id": item.tool_call_id, "question": question, **self._common(item, now)}

    async def resolve_approval(self, request: Request) -> Response:
        tool_call_id = request.path_params["tool_call_id"]
        body = await self._body(request, ApprovalDecision)
        try:
            if body.action == "approve":
                bypass = None
                if body.bypass_scope is not None or body.bypass_secs is not None:
                    bypass = BypassRequest(
                        scope=body.bypass_scope or "all",
                        value=body.bypass_value,
                        seconds=body.bypass_secs,
                    )
                decided = await self.engine.approve(tool_call_id, bypass)
            else:
                decided = await self.engine.reject(tool_call_id, body.note)
        except InboxError as exc:
            return _inbox_error(exc)
        except ValueError as exc:  # a bad bypass, refused before anything changed
            return _error(422, str(exc))
        resolution = decided.resolution
        return JSONResponse(
            {
                "tool_call_id": resolution.tool_call_id,
                "session_id": resolution.session_id,
                "action": body.action,
                "live": resolution.live,
            }
        )

    async def resolve_clarification(self, request: Request) -> Response:
        request_id = request.path_params["request_id"]
        body = await self._body(request, ClarificationAnswer)
        try:
            decided = await self.engine.resolve_question(request_id, body.answer)
        except InboxError as exc:
            return _inbox_error(exc)
        resolution = decided.resolution
        return JSONResponse(
            {
                "request_id": resolution.tool_call_id,
                "session_id": resolution.session_id,
                "live": resolution.live,
            }
        )

    # -- jobs ----------------------------------------------------------------------------------

    async def list_jobs(self, request: Request) -> Response:
        scheduler = self._jobs()
        jobs, running = await self.engine.store.db.run(_all_jobs)
        return JSONResponse(
            {"items": [self._job_json(scheduler, job, job.id in running) for job in jobs]}
        )

    @staticmethod
    def _job_json(scheduler: Scheduler, job: Job, running: bool = False) -> dict[str, Any]:
        data = {
            key: value.isoformat() if isinstance(value, datetime) else value
            for key, value in asdict(job).items()
        }
        data["description"] = scheduler.describe(job)
        data["running"] = running
        return data

    async def toggle_job(self, request: Request) -> Response:
        job = await self._job(request.path_params["job_id"])
        body = await self._body(request, JobToggle, optional=True)
        enabled = (not job.enabled) if body.enabled is None else body.enabled
        assert job.origin_source is not None
        try:
            job = await self._jobs().toggle(job.origin_source, job.id, enabled)
        except SchedulerError as exc:
            return _error(409, str(exc))
        return JSONResponse(self._job_json(self._jobs(), job))

    async def delete_job(self, request: Request) -> Response:
        job = await self._job(request.path_params["job_id"])
        assert job.origin_source is not None
        try:
            await self._jobs().delete(job.origin_source, job.id)
        except SchedulerError as exc:  # deleted meanwhile
            return _error(404, str(exc))
        return JSONResponse({"id": job.id, "deleted": True})

    async def kill_job(self, request: Request) -> Response:
        job = await self._job(request.path_params["job_id"])
        sessions = await self.engine.store.db.run(_running_sessions, job.id)
        if not sessions:
            return _error(409, f"job {job.id} has no run in flight")
        for session_id in sessions:
            self.engine.system_bus.publish(SessionCancelled(session_id))
        return JSONResponse({"id": job.id, "cancelled_sessions": sessions}, status_code=202)

    # -- metrics and the document --------------------------------------------------------------

    async def metrics(self, request: Request) -> Response:
        turns, tools, runs = await self.engine.store.db.run(_counts)
        approvals = len(await self.engine.pending_approvals())
        questions = len(await self.engine.pending_questions())
        lines = [
            "# HELP chathub_turns_total User messages that started a turn.",
            "# TYPE chathub_turns_total counter",
            f"chathub_turns_total {turns}",
            "# HELP chathub_tool_calls_total Tool calls by status.",
            "# TYPE chathub_tool_calls_total counter",
            *(f'chathub_tool_calls_total{{status="{s}"}} {n}' for s, n in sorted(tools.items())),
            "# HELP chathub_approvals_pending Gated tool calls waiting for a decision.",
            "# TYPE chathub_approvals_pending gauge",
            f"chathub_approvals_pending {approvals}",
            "# HELP chathub_clarifications_pending Questions waiting for an answer.",
            "# TYPE chathub_clarifications_pending gauge",
            f"chathub_clarifications_pending {questions}",
            "# HELP chathub_job_runs_total Scheduled job runs by status.",
            "# TYPE chathub_job_runs_total counter",
            *(f'chathub_job_runs_total{{status="{s}"}} {n}' for s, n in sorted(runs.items())),
        ]
        return PlainTextResponse(
            "\n".join(lines) + "\n", media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 for the routes of ``ApiRoutes`` (bearer auth on all of them)."""
    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {}
    for spec in _SPECS:
        path = spec.path.replace(":int}", "}")
        operation: dict[str, Any] = {
            "operationId": spec.name,
            "summary": spec.summary,
            "responses": {
                str(code): {"description": _STATUS_TEXT[code]} for code in spec.responses
            },
        }
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "integer"}}
            for name in _path_names(spec.path)
        ]
        parameters += [
            {
                "name": name,
                "in": "query",
                "required": False,
                "schema": {"type": "string" if name == "source" else "integer"},
            }
            for name in spec.query
        ]
        if parameters:
            operation["parameters"] = parameters
        if spec.body is not None:
            schemas[spec.body.__name__] = spec.body.model_json_schema()
            ref = {"$ref": f"#/components/schemas/{spec.body.__name__}"}
            operation["requestBody"] = {
                "required": spec.body is not JobToggle,
                "content": {"application/json": {"schema": ref}},
            }
        paths.setdefault(path, {})[spec.method.lower()] = operation
    paths["/healthz"] = {
        "get": {
            "operationId": "healthz",
            "summary": "Liveness (no token)",
            "security": [],
            "responses": {"200": {"description": "OK"}, "503": {"description": "Unhealthy"}},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "chathub API", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


_STATUS_TEXT = {
    200: "OK",
    202: "Accepted",
    401: "Missing or wrong bearer token",
    404: "Not found",
    409: "Conflict (already resolved, or nothing to do)",
    413: "Body too large",
    422: "Invalid input",
    503: "Not available in this process",
}


def _path_names(path: str) -> list[str]:
    return [part[1:].split(":")[0].rstrip("}") for part in path.split("/") if part.startswith("{")]


def _arguments(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _inbox_error(exc: InboxError) -> JSONResponse:
    status = 404 if exc.code == "not_found" else 409
    return _error(status, str(exc), code=exc.code)


# -- queries -----------------------------------------------------------------------------------


def _all_jobs(conn: Connection) -> tuple[list[Job], set[int]]:
    rows = conn.execute(sa.select(j).where(j.c.deleted_at.is_(None)).order_by(j.c.id)).all()
    running = conn.execute(
        sa.select(r.c.job_id).where(r.c.status == "running").distinct()
    ).scalars()
    return [Job(**dict(row._mapping)) for row in rows], set(running)


def _running_sessions(conn: Connection, job_id: int) -> list[int]:
    return list(
        conn.execute(
            sa.select(r.c.session_id)
            .where(r.c.job_id == job_id, r.c.status == "running", r.c.session_id.is_not(None))
            .order_by(r.c.id)
        ).scalars()
    )


def _counts(conn: Connection) -> tuple[int, dict[str, int], dict[str, int]]:
    turns = conn.execute(sa.select(sa.func.count()).where(h.c.role == "user")).scalar_one()
    tools = conn.execute(sa.select(t.c.status, sa.func.count()).group_by(t.c.status)).all()
    runs = conn.execute(sa.select(r.c.status, sa.func.count()).group_by(r.c.status)).all()
    return turns, dict(tools), dict(runs)  # type: ignore[arg-type]
