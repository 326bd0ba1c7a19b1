"""The operator's JSON API: sessions, the Agent Inbox, scheduled jobs, memory, metrics.

Every route is behind the bearer ``CHATHUB_API_TOKEN`` (when no token is configured the
app only starts bound to loopback, see ``create_app``). Bodies are validated with pydantic
models, so a 422 lists the fields at fault; a body over ``MAX_BODY_BYTES`` is refused with
413 before it is parsed. ``OPERATIONS`` below lists every documented operation (the events
endpoint and ``/healthz`` too): the routes are built from it, and so is the OpenAPI
document (``/api/openapi.json``), from the request and response models' JSON schemas.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import httpx
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.completions import (
    ChatCompletion,
    CompletionRequest,
    ModelItem,
    ModelList,
    OpenAIErrorBody,
)
from bot.delivery import OutboundStats
from bot.fleet.receiver import RECEIVER_LEASE
from bot.http.credentials import Refusal, bearer_refusal, has_token, peer_of
from bot.http.health_details import HealthDetails
from bot.http.memory_pages import (
    FactDeleted,
    FactIn,
    FactItem,
    FactList,
    MemoryAdmin,
    MemoryHits,
    MemorySearchQuery,
    MemoryUserList,
    fact_json,
    hit_json,
    person_json,
)
from bot.http.metrics import CONTENT_TYPE, FleetStats, read_snapshot
from bot.http.models import (
    MAX_ID,
    ApprovalDecision,
    ApprovalResolved,
    ClarificationAnswer,
    ClarificationResolved,
    ErrorBody,
    EventCreated,
    EventIn,
    HealthDetailsQuery,
    HealthDetailsReport,
    HealthReport,
    InboxListing,
    JobDeleted,
    JobGrantsBody,
    JobItem,
    JobKilled,
    JobList,
    JobToggle,
    RequestError,
    SafeJSONResponse,
    SessionsPage,
    SessionsQuery,
    SessionTree,
    ids_in_range,
    json_body,
    query_params,
)
from bot.http.operations import OperationError, Operations
from bot.http.providers_api import (
    ProviderIn,
    ProviderItem,
    ProviderList,
    ProviderRemoved,
    ProviderTested,
)
from bot.http.signins import LoginThrottle
from engine.hub import REJECT, Choice
from engine.store import InboxItem, Leases, utcnow
from engine.text import strict_json
from memory.facts import FactError
from memory.service import MemoryService
from providers import Provider, ProviderError, ProviderRegistry, probe

__all__ = [
    "API_DECIDER",
    "OPERATIONS",
    "ApiRoutes",
    "Operation",
    "error_status",
    "openapi_document",
    "operation",
    "refused",
]

#: Who a decision taken through the API is shown as on the chat's card.
API_DECIDER = "the API"
Handler = Callable[[Request], Awaitable[Response]]


def _error(status: int, message: str, **extra: Any) -> SafeJSONResponse:
    return SafeJSONResponse({"error": message, **extra}, status_code=status)


# -- the route table (also the OpenAPI document) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Operation:
    """One documented operation: its route, body, query string and answers.

    ``served_by`` says who handles it: ``api`` (a method of ``ApiRoutes`` named ``name``),
    ``events`` (``EventsEndpoint``), ``health`` (``create_app``'s ``/healthz``) or
    ``openai`` (``bot.completions.CompletionsApi``, the OpenAI-compatible ``/v1``). The
    routes and the OpenAPI document are both built from ``OPERATIONS``.
    """

    path: str
    method: str
    name: str
    summary: str
    status: int = 200
    answer: type[BaseModel] | None = None
    errors: tuple[int, ...] = (401,)
    body: type[BaseModel] | None = None
    body_required: bool = True
    query: type[BaseModel] | None = None
    served_by: Literal["api", "events", "health", "openai"] = "api"
    secured: bool = True
    #: What a refusal looks like (``/v1`` answers in OpenAI's error shape).
    error_body: type[BaseModel] = ErrorBody
    #: The answer may also be ``text/event-stream`` (a streamed completion).
    streams: bool = False

    @property
    def document_path(self) -> str:
        return self.path.replace(":id}", "}")


OPERATIONS = (
    Operation("/api/sessions", "GET", "list_sessions", "Sessions, newest first, one page",
              answer=SessionsPage, query=SessionsQuery, errors=(401, 422)),
    Operation("/api/sessions/{session_id:id}", "GET", "session_detail",
              "A session and its whole message tree", answer=SessionTree, errors=(401, 404)),
    Operation("/api/inbox", "GET", "inbox", "Pending approvals and open clarification questions",
              answer=InboxListing),
    Operation("/api/inbox/approvals/{tool_call_id:id}/resolve", "POST", "resolve_approval",
              "Approve or reject a gated tool call", answer=ApprovalResolved,
              body=ApprovalDecision, errors=(401, 404, 409, 413, 422)),
    Operation("/api/inbox/clarifications/{request_id:id}/resolve", "POST",
              "resolve_clarification", "Answer an ask_user_clarification question",
              answer=ClarificationResolved, body=ClarificationAnswer,
              errors=(401, 404, 409, 413, 422)),
    Operation("/api/jobs", "GET", "list_jobs", "Scheduled jobs (not deleted)", answer=JobList,
              errors=(401, 503)),
    Operation("/api/jobs/{job_id:id}/toggle", "POST", "toggle_job",
              "Pause or resume a job (no body: flip)", answer=JobItem, body=JobToggle,
              body_required=False, errors=(401, 404, 409, 413, 422, 503)),
    Operation("/api/jobs/{job_id:id}/grants", "PUT", "set_job_grants",
              "Narrow or revoke what a job may do without asking (only fewer grants than "
              "now: more is asked for in a chat, where the owner approves the job's card)",
              answer=JobItem, body=JobGrantsBody, errors=(401, 404, 413, 422, 503)),
    Operation("/api/jobs/{job_id:id}", "DELETE", "delete_job",
              "Delete a job; a run in flight is stopped on whichever process runs it "
              "(runs_stopped: whether it had stopped when this answered)", answer=JobDeleted,
              errors=(401, 404, 503)),
    Operation("/api/jobs/{job_id:id}/kill", "POST", "kill_job",
              "Stop the job's runs in flight on whichever process runs them; answers once "
              "they have stopped (409 when none is running, 504 when they did not stop in "
              "time)", answer=JobKilled, errors=(401, 404, 409, 503, 504)),
    Operation("/api/events", "POST", "post_event",
              "An event for the tic session (served by the scheduler's endpoint)", status=201,
              answer=EventCreated, body=EventIn, errors=(401, 413, 422), served_by="events"),
    Operation("/api/memory/users", "GET", "list_memory_users",
              "People memory knows: their platform identities and how many facts",
              answer=MemoryUserList, errors=(401, 503)),
    Operation("/api/memory/users/{user_id:id}/facts", "GET", "list_memory_facts",
              "A person's facts, oldest first", answer=FactList, errors=(401, 404, 503)),
    Operation("/api/memory/users/{user_id:id}/facts", "POST", "add_memory_fact",
              "Add a fact about a person", status=201, answer=FactItem, body=FactIn,
              errors=(401, 404, 413, 422, 503)),
    Operation("/api/memory/facts/{fact_id:id}", "PATCH", "edit_memory_fact",
              "Change a fact's text", answer=FactItem, body=FactIn,
              errors=(401, 404, 413, 422, 503)),
    Operation("/api/memory/facts/{fact_id:id}", "DELETE", "delete_memory_fact",
              "Delete a fact", answer=FactDeleted, errors=(401, 404, 503)),
    Operation("/api/memory/search", "GET", "search_memory",
              "Search one chat's past conversations (ranked snippets)", answer=MemoryHits,
              query=MemorySearchQuery, errors=(401, 422, 503)),
    Operation("/api/providers", "GET", "list_providers",
              "The API providers (keys masked)", answer=ProviderList, errors=(401, 503)),
    Operation("/api/providers", "POST", "add_provider",
              "Add an API provider; every process reloads without a restart", status=201,
              answer=ProviderItem, body=ProviderIn, errors=(401, 409, 413, 422, 503)),
    Operation("/api/providers/{name}", "DELETE", "remove_provider", "Remove an API provider",
              answer=ProviderRemoved, errors=(401, 404, 503)),
    Operation("/api/providers/{name}/test", "POST", "test_provider",
              "Ask a provider for its models with its key", answer=ProviderTested,
              errors=(401, 404, 503)),
    Operation("/metrics", "GET", "metrics", "Prometheus text metrics"),
    Operation("/api/openapi.json", "GET", "openapi", "This document"),
    Operation("/api/health/details", "GET", "health_details",
              "Every check of chathub doctor, one per part (a report under 30 s old is reused)",
              answer=HealthDetailsReport, query=HealthDetailsQuery, errors=(401, 422, 503)),
    Operation("/v1/models", "GET", "list_models",
              "OpenAI-compatible: the agents one may talk to (their ids are the models)",
              answer=ModelList, errors=(401,), served_by="openai", error_body=OpenAIErrorBody),
    Operation("/v1/models/{model}", "GET", "retrieve_model",
              "OpenAI-compatible: one agent as a model (404 model_not_found: not an agent)",
              answer=ModelItem, errors=(401, 404), served_by="openai",
              error_body=OpenAIErrorBody),
    Operation("/v1/chat/completions", "POST", "create_chat_completion",
              "OpenAI-compatible: the request's new user message to the agent in a durable "
              "conversation, and its answer (stream: server-sent chunks, then [DONE])",
              answer=ChatCompletion, body=CompletionRequest, errors=(400, 401, 404, 413),
              served_by="openai", error_body=OpenAIErrorBody, streams=True),
    Operation("/healthz", "GET", "healthz", "Liveness (no token); 503 with the same report",
              answer=HealthReport, errors=(), served_by="health", secured=False),
)  # fmt: skip


def operation(name: str) -> Operation:
    """The documented operation called ``name``."""
    return next(spec for spec in OPERATIONS if spec.name == name)


def refused(refusal: Refusal) -> SafeJSONResponse:
    """A bearer refusal as every JSON route says it: 429 with ``Retry-After`` (too many
    wrong tokens from the address), else 401."""
    if refusal.retry_after is not None:
        wait = refusal.retry_after
        return SafeJSONResponse(
            {"error": f"Too many wrong tokens from this address; try again in {wait} s."},
            status_code=429,
            headers={"retry-after": str(wait)},
        )
    return SafeJSONResponse(
        {"error": "missing or wrong bearer token"},
        status_code=401,
        headers={"www-authenticate": "Bearer"},
    )


class ApiRoutes:
    """The API's Starlette routes over the operator's ``Operations``."""

    def __init__(
        self,
        operations: Operations,
        *,
        token: str | None,
        clock: Callable[[], datetime] = utcnow,
        telegram: OutboundStats | None = None,
        throttle: LoginThrottle | None = None,
        health_details: HealthDetails | None = None,
        memory: MemoryService | None = None,
        providers: ProviderRegistry | None = None,
    ) -> None:
        """``throttle``: wrong bearer tokens counted per address, shared with the page's
        sign-in (``chathub serve`` passes one); ``None`` counts nothing. ``memory``: the
        memory routes' (``None``, ``MEMORY_ENABLED=false``: they answer 503)."""
        self.ops = operations
        self._throttle = throttle
        self.engine = operations.engine
        self.token = token or None
        self._token = token.encode() if token else None
        self._clock = clock
        self._telegram = telegram
        self._health_details = health_details
        self._memory = None if memory is None else MemoryAdmin(memory, self.engine.store.db)
        self._providers = providers

    def routes(self) -> list[Route]:
        """A route per operation; the app makes a path's routes one (``one_route_per_path``:
        a method the path does not have is 405 with all the ones it has in ``Allow``)."""
        return [
            Route(
                spec.path,
                self._guarded(getattr(self, spec.name)),
                methods=[spec.method],
                name=f"api {spec.path}",
            )
            for spec in OPERATIONS
            if spec.served_by == "api"
        ]

    # -- plumbing ------------------------------------------------------------------------------

    def _guarded(self, handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def guarded(request: Request) -> Response:
            refusal = bearer_refusal(request, self._token, self._throttle)
            if refusal is not None:
                return refused(refusal)
            if not ids_in_range(request):
                return _error(404, "no such id")
            try:
                return await handler(request)
            except RequestError as bad:
                return bad.response()
            except OperationError as exc:
                return _error(error_status(exc), str(exc), code=exc.code)

        return guarded

    def _authorized(self, request: Request) -> bool:
        return has_token(request.headers, self._token, peer=peer_of(request))

    # -- providers -----------------------------------------------------------------------------

    def _registry(self) -> ProviderRegistry:
        if self._providers is None:
            raise OperationError("unavailable", "the provider registry is not running here")
        return self._providers

    async def list_providers(self, request: Request) -> Response:
        listed = await self._registry().store.all()
        return SafeJSONResponse({"items": [p.shown() for p in listed]})

    async def add_provider(self, request: Request) -> Response:
        registry = self._registry()
        body = await json_body(request, ProviderIn)
        try:
            provider = Provider.checked(
                body.name, body.base_url, body.api_key, body.serves, body.models
            )
        except ProviderError as exc:
            return _error(422, str(exc))
        try:
            await registry.add(provider)
        except ProviderError as exc:
            return _error(409, str(exc))
        return SafeJSONResponse(provider.shown(), status_code=201)

    async def remove_provider(self, request: Request) -> Response:
        name = request.path_params["name"]
        removed = await self._registry().remove(name)
        if removed is None:
            return _error(404, f"no provider named {name[:64]!r}")
        return SafeJSONResponse({"name": removed.name, "removed": True})

    async def test_provider(self, request: Request) -> Response:
        name = request.path_params["name"]
        provider = await self._registry().store.get(name)
        if provider is None:
            return _error(404, f"no provider named {name[:64]!r}")
        async with httpx.AsyncClient() as http:
            try:
                said, ok = await probe(http, provider), True
            except ProviderError as exc:
                said, ok = str(exc), False
        return SafeJSONResponse({"name": name, "ok": ok, "said": said})

    # -- sessions ------------------------------------------------------------------------------

    async def list_sessions(self, request: Request) -> Response:
        query = query_params(request, SessionsQuery)
        listing = await self.engine.store.views.list_sessions(
            source=query.source or None, page=query.page, per_page=query.per_page
        )
        return SafeJSONResponse(listing)

    async def session_detail(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        detail = await self.engine.store.views.session_detail(session_id)
        if detail is None:
            return _error(404, f"session {session_id}: no such session")
        return SafeJSONResponse(detail)

    # -- the inbox -----------------------------------------------------------------------------

    async def inbox(self, request: Request) -> Response:
        now = self._clock()
        approvals = [self._approval_json(item, now) for item in await self.ops.approvals()]
        questions = [self._question_json(item, now) for item in await self.ops.questions()]
        return SafeJSONResponse({"approvals": approvals, "clarifications": questions})

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
        decision = await json_body(request, ApprovalDecision)
        action = decision.root.action
        if action == "approve":
            choice, note = Choice(True, decision.bypass()), ""
        else:
            choice, note = REJECT, decision.root.note
        decided = await self.ops.decide(tool_call_id, choice, note=note, by=API_DECIDER)
        resolution = decided.resolution
        return SafeJSONResponse(
            {
                "tool_call_id": resolution.tool_call_id,
                "session_id": resolution.session_id,
                "action": action,
                "live": resolution.live,
            }
        )

    async def resolve_clarification(self, request: Request) -> Response:
        request_id = request.path_params["request_id"]
        body = await json_body(request, ClarificationAnswer)
        decided = await self.ops.answer(request_id, body.answer, by=API_DECIDER)
        resolution = decided.resolution
        return SafeJSONResponse(
            {
                "request_id": resolution.tool_call_id,
                "session_id": resolution.session_id,
                "live": resolution.live,
            }
        )

    # -- jobs ----------------------------------------------------------------------------------

    async def list_jobs(self, request: Request) -> Response:
        return SafeJSONResponse({"items": [view.as_json() for view in await self.ops.jobs()]})

    async def toggle_job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        await self.ops.job(job_id)  # 404 before the body is read
        body = await json_body(request, JobToggle, optional=True)
        return SafeJSONResponse((await self.ops.toggle_job(job_id, body.enabled)).as_json())

    async def set_job_grants(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        await self.ops.job(job_id)  # 404 before the body is read
        body = await json_body(request, JobGrantsBody)
        view = await self.ops.narrow_job_grants(job_id, body.model_dump())
        return SafeJSONResponse(view.as_json())

    async def delete_job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        stop = await self.ops.delete_job(job_id)
        return SafeJSONResponse({"id": job_id, "deleted": True, "runs_stopped": stop.stopped})

    async def kill_job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        sessions = await self.ops.kill_job(job_id)
        return SafeJSONResponse({"id": job_id, "cancelled_sessions": sessions})

    # -- memory --------------------------------------------------------------------------------

    def _memory_admin(self) -> MemoryAdmin:
        if self._memory is None:
            raise RequestError(503, "Long-term memory is switched off (MEMORY_ENABLED=false).")
        return self._memory

    async def list_memory_users(self, request: Request) -> Response:
        people = await self._memory_admin().people()
        return SafeJSONResponse({"items": [person_json(person) for person in people]})

    async def list_memory_facts(self, request: Request) -> Response:
        user_id = request.path_params["user_id"]
        facts = await self._memory_admin().facts(user_id)
        if facts is None:
            return _error(404, f"user {user_id}: no such user")
        return SafeJSONResponse({"items": [fact_json(fact) for fact in facts]})

    async def add_memory_fact(self, request: Request) -> Response:
        admin, user_id = self._memory_admin(), request.path_params["user_id"]
        if not await admin.exists(user_id):  # 404 before the body is read
            return _error(404, f"user {user_id}: no such user")
        body = await json_body(request, FactIn)
        try:
            fact = await admin.add(user_id, body.body)
        except FactError as exc:
            return _error(422, str(exc))
        if fact is None:  # the user went meanwhile
            return _error(404, f"user {user_id}: no such user")
        return SafeJSONResponse(fact_json(fact), status_code=201)

    async def edit_memory_fact(self, request: Request) -> Response:
        admin, fact_id = self._memory_admin(), request.path_params["fact_id"]
        if await admin.owner(fact_id) is None:  # 404 before the body is read
            return _error(404, f"fact {fact_id}: no such fact")
        body = await json_body(request, FactIn)
        try:
            fact = await admin.edit(fact_id, body.body)
        except FactError as exc:
            return _error(422, str(exc))
        if fact is None:
            return _error(404, f"fact {fact_id}: no such fact")
        return SafeJSONResponse(fact_json(fact))

    async def delete_memory_fact(self, request: Request) -> Response:
        fact_id = request.path_params["fact_id"]
        if not await self._memory_admin().delete(fact_id):
            return _error(404, f"fact {fact_id}: no such fact")
        return SafeJSONResponse({"id": fact_id, "deleted": True})

    async def search_memory(self, request: Request) -> Response:
        admin = self._memory_admin()
        query = query_params(request, MemorySearchQuery)
        hits = await admin.search(query.source, query.q, query.limit)
        return SafeJSONResponse({"items": [hit_json(hit) for hit in hits]})

    # -- health details, metrics and the document ----------------------------------------------

    async def health_details(self, request: Request) -> Response:
        query = query_params(request, HealthDetailsQuery)
        if self._health_details is None:
            return _error(503, "health details are not available in this process")
        return SafeJSONResponse(await self._health_details.report(fresh=query.fresh))

    async def metrics(self, request: Request) -> Response:
        snapshot = await self.engine.store.db.run(read_snapshot)
        snapshot.approvals_pending = len(await self.ops.approvals())
        snapshot.clarifications_pending = len(await self.ops.questions())
        snapshot.telegram = self._telegram
        hub = self.ops.hub
        if hub is not None and hub.fleet is not None:
            fleet = hub.fleet
            holder = await Leases(self.engine.store.db).holder(RECEIVER_LEASE)
            snapshot.fleet = FleetStats(
                process_id=fleet.ownership.owner,
                owned_sources=len(fleet.ownership.owned()),
                takeovers=fleet.takeovers,
                receiver=None if holder is None else holder.owner,
            )
        # prometheus_client (~1 MB) loads with the first scrape, not with the service.
        from bot.http.prometheus import render_text

        return Response(render_text(snapshot), media_type=CONTENT_TYPE)

    async def openapi(self, request: Request) -> Response:
        return SafeJSONResponse(openapi_document())


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 for ``OPERATIONS`` (bearer auth on all but ``/healthz``)."""
    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {}
    for spec in OPERATIONS:
        paths.setdefault(spec.document_path, {})[spec.method.lower()] = _operation(spec, schemas)
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


def _operation(spec: Operation, schemas: dict[str, Any]) -> dict[str, Any]:
    described: dict[str, Any] = {
        "operationId": spec.name,
        "summary": spec.summary,
        "responses": {str(spec.status): _response(spec.status, spec.answer, schemas)},
    }
    if not spec.secured:
        described["security"] = []
    throttled = (429,) if spec.served_by in ("api", "openai") and spec.secured else ()
    for code in (*spec.errors, *throttled):
        described["responses"][str(code)] = _response(code, spec.error_body, schemas)
    if spec.streams:
        described["responses"][str(spec.status)]["content"]["text/event-stream"] = {
            "schema": {"type": "string"}
        }
    if spec.served_by == "health":  # unhealthy: the same report
        described["responses"]["503"] = _response(503, spec.answer, schemas)
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": _path_schema(spec.path, name)}
        for name in _path_names(spec.path)
    ]
    if spec.query is not None:
        parameters += _query_parameters(spec.query)
    if parameters:
        described["parameters"] = parameters
    if spec.body is not None:
        described["requestBody"] = {
            "required": spec.body_required,
            "content": {"application/json": {"schema": _schema_ref(spec.body, schemas)}},
        }
    return described


def _schema_ref(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, str]:
    """``model``'s JSON schema put in ``components.schemas`` (its ``$defs`` beside it)."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}))
    schemas[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _response(code: int, answer: type[BaseModel] | None, schemas: dict[str, Any]) -> dict:
    """One documented answer: its model's schema (none: not JSON, e.g. the metrics' text)."""
    described: dict[str, Any] = {"description": _STATUS_TEXT[code]}
    if answer is not None:
        described["content"] = {"application/json": {"schema": _schema_ref(answer, schemas)}}
    return described


_STATUS_TEXT = {
    200: "OK",
    201: "Stored",
    202: "Accepted",
    400: "Invalid request (OpenAI's invalid_request_error)",
    401: "Missing or wrong bearer token",
    404: "Not found",
    409: "Conflict (already resolved, or nothing to do)",
    413: "Body too large",
    422: "Invalid input",
    429: "Too many wrong bearer tokens from this address (see Retry-After)",
    503: "Not available in this process (or, for /healthz, unhealthy)",
    504: "Asked of another part (a run to stop), which did not do it in time",
}


def _path_schema(path: str, name: str) -> dict[str, Any]:
    """An id (``{x:id}``) is a positive 64-bit integer; a name is a short word."""
    if f"{{{name}:id}}" in path:
        return {"type": "integer", "format": "int64", "minimum": 1, "maximum": MAX_ID}
    return {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[a-z0-9][a-z0-9_.-]*$"}


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """The model's fields as OpenAPI query parameters (each given at most once; required
    when the model has no default for it)."""
    schema_of = model.model_json_schema()
    properties, required = schema_of["properties"], set(schema_of.get("required", ()))
    parameters = []
    for name, schema in properties.items():
        schema = {key: value for key, value in schema.items() if key not in ("title", "default")}
        if "anyOf" in schema:  # ``str | None``: the parameter is simply left out
            schema = next(s for s in schema.pop("anyOf") if s.get("type") != "null") | schema
        parameters.append(
            {"name": name, "in": "query", "required": name in required, "schema": schema}
        )
    return parameters


def _path_names(path: str) -> list[str]:
    return [part[1:].split(":")[0].rstrip("}") for part in path.split("/") if part.startswith("{")]


def _arguments(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return strict_json(raw)  # a NaN the model wrote would make the answer a 500
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return raw


def error_status(exc: OperationError) -> int:
    return _ERROR_STATUS[exc.kind]


_ERROR_STATUS = {
    "not_found": 404,
    "conflict": 409,
    "unavailable": 503,
    "invalid": 422,
    "timeout": 504,  # asked of another part (a run to stop), which did not do it in time
}
