"""The one request validation layer of the HTTP app: bodies, query strings and path ids.

Every JSON route reads its body through ``json_body`` and its query string through
``query_params``; both end in a pydantic model, so the checks live in the models and the
OpenAPI document is generated from the same models (``bot.http.api.openapi_document``).

What is refused, always with a 4xx and one plain sentence (never an exception's text):

* a body over the route's limit: 413, decided while reading (the ``content-length`` is
  checked first, then the bytes as they arrive), before anything is parsed;
* JSON that is not valid, carries a non-finite number (``NaN``, ``Infinity``, ``1e400``),
  an integer of more than ``MAX_INT_DIGITS`` digits, nesting deeper than ``MAX_JSON_DEPTH``
  or a lone UTF-16 surrogate (``"\\ud800"``): 422;
* a query parameter given more than once (``per_page=abc&per_page=2``), or one that fails
  the model: 422;
* a path id that is not a positive 64-bit integer (``IdConvertor``: the route answers 404,
  and a number of thousands of digits is never converted).
"""

from __future__ import annotations

import json
import logging
import math
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    Tag,
    ValidationError,
)
from pydantic.json_schema import SkipJsonSchema
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import JSONResponse

from engine.approval import MAX_BYPASS_SECONDS, BypassRequest
from engine.store import MAX_PAGE, MAX_PER_PAGE
from engine.tools import ToolCategory

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_ID",
    "MAX_JSON_DEPTH",
    "ApprovalDecision",
    "Approve",
    "ApproveCategory",
    "ApproveMcpServer",
    "ClarificationAnswer",
    "EventIn",
    "IdConvertor",
    "JobToggle",
    "Reject",
    "RequestError",
    "SafeJSONResponse",
    "SessionsQuery",
    "check_shape",
    "ids_in_range",
    "json_body",
    "parse_json",
    "query_params",
    "read_body",
    "without_nul",
]

log = logging.getLogger(__name__)

M = TypeVar("M", bound="BaseModel")

MAX_BODY_BYTES = 1024 * 1024
#: Objects and arrays nested deeper than this are refused (no route needs more than 3).
MAX_JSON_DEPTH = 32
#: Integers longer than this are refused (an id or a count never needs 20 digits).
MAX_INT_DIGITS = 40
MAX_NOTE_CHARS = 4000
#: A shorter bypass would last no time at all (``timedelta``'s resolution).
MIN_BYPASS_SECONDS = 1e-6
#: Ids are 64-bit signed integers in every database; a larger number names nothing.
MAX_ID = 2**63 - 1


class RequestError(Exception):
    """A request the layer refuses: ``status`` and one plain sentence."""

    def __init__(self, status: int, message: str, detail: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail

    def response(self) -> JSONResponse:
        content: dict[str, Any] = {"error": self.message}
        if self.detail is not None:
            content["detail"] = self.detail
        return SafeJSONResponse(content, status_code=self.status)


class SafeJSONResponse(JSONResponse):
    """JSON whose text may hold a lone surrogate (from stored data): it is sent escaped."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(
                content, ensure_ascii=True, allow_nan=False, separators=(",", ":")
            ).encode("ascii")


# -- request models ----------------------------------------------------------------------------


class _Body(BaseModel):
    # Patterns mean what they mean to the fuzzer and to ``jsonschema``: Python's ``re``.
    model_config = ConfigDict(extra="forbid", strict=True, regex_engine="python-re")


#: How long a bypass may last: from the clock's resolution (a microsecond) to a year.
_BypassSecs = Annotated[float, Field(ge=MIN_BYPASS_SECONDS, le=MAX_BYPASS_SECONDS)]
#: An MCP server's name as a bypass names it: not empty, no ``__`` and no ``*``.
MCP_SERVER_PATTERN = r"^_?(?:[^_*]_?)*$"


class Reject(_Body):
    """Reject the call; ``note`` is passed on to the model."""

    action: Literal["reject"]
    note: str = Field(default="", max_length=MAX_NOTE_CHARS)


class _Approve(_Body):
    action: Literal["approve"]
    note: str = Field(default="", max_length=MAX_NOTE_CHARS, description="Ignored on approve.")
    bypass_secs: _BypassSecs | None = None


class Approve(_Approve):
    """Approve the call; with ``bypass_secs`` or ``bypass_scope: all`` every later gated call
    of the session runs without asking (for ``bypass_secs``, or while the process lives)."""

    bypass_scope: Literal["all"] | None = None
    bypass_value: None = None


class ApproveCategory(_Approve):
    """Approve the call, and let the session's later calls of one tool category through."""

    bypass_scope: Literal["category"]
    bypass_value: Literal[tuple(category.value for category in ToolCategory)]  # type: ignore[valid-type]


class ApproveMcpServer(_Approve):
    """Approve the call, and let the session's later calls of one MCP server through."""

    bypass_scope: Literal["mcp_server"]
    bypass_value: str = Field(min_length=1, max_length=255, pattern=MCP_SERVER_PATTERN)


_SCOPES = {"all": "approve", None: "approve", "category": "category", "mcp_server": "mcp_server"}


def _decision_tag(data: Any) -> str | None:
    """Which variant ``data`` means (``invalid``: an unknown action or scope, explained)."""
    if isinstance(data, BaseModel):
        return _TAGS[type(data)]
    if not isinstance(data, dict):
        return None
    action, scope = data.get("action"), data.get("bypass_scope")
    if action == "reject":
        return "reject"
    if action != "approve" or not isinstance(scope, str | None) or scope not in _SCOPES:
        return "invalid"
    return _SCOPES[scope]


class _InvalidDecision(BaseModel):
    """Never valid: names what is wrong with an unknown ``action`` or ``bypass_scope``."""

    model_config = ConfigDict(extra="allow", strict=True)

    action: Literal["approve", "reject"]
    bypass_scope: Literal["all", "category", "mcp_server"] | None = None


_TAGS: dict[type[BaseModel], str] = {
    Reject: "reject",
    Approve: "approve",
    ApproveCategory: "category",
    ApproveMcpServer: "mcp_server",
}


#: The variants of a decision, picked by ``action`` and ``bypass_scope`` (``_decision_tag``).
Decision = Annotated[
    Annotated[Reject, Tag("reject")]
    | Annotated[Approve, Tag("approve")]
    | Annotated[ApproveCategory, Tag("category")]
    | Annotated[ApproveMcpServer, Tag("mcp_server")]
    | Annotated[SkipJsonSchema[_InvalidDecision], Tag("invalid")],
    Discriminator(
        _decision_tag,
        custom_error_type="not_an_object",
        custom_error_message="Input should be an object",
    ),
]


class ApprovalDecision(RootModel[Decision]):
    """``POST /api/inbox/approvals/{id}/resolve``: one of the variants, picked by ``action``
    and ``bypass_scope`` (so a bypass's value is exactly what its scope takes)."""

    #: Tags of the union (``validate`` drops them from an error's location).
    union_tags: ClassVar[frozenset[str]] = frozenset({*_TAGS.values(), "invalid"})

    def bypass(self) -> BypassRequest | None:
        """The bypass an approval asks for (None: none, or a rejection)."""
        decision = self.root
        if isinstance(decision, Reject | _InvalidDecision):
            return None
        if decision.bypass_scope is None and decision.bypass_secs is None:
            return None
        return BypassRequest(
            scope=decision.bypass_scope or "all",
            value=decision.bypass_value,
            seconds=decision.bypass_secs,
        )


class ClarificationAnswer(_Body):
    answer: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)


class JobToggle(_Body):
    enabled: bool | None = None


class EventIn(_Body):
    """``POST /api/events``: an event for the tic session."""

    source: str = Field(min_length=1, max_length=255, pattern=r"\S")
    type: str = Field(min_length=1, max_length=255, pattern=r"\S")
    payload: Any = None


class SessionsQuery(BaseModel):
    """``GET /api/sessions``: the query string (every value arrives as text)."""

    model_config = ConfigDict(extra="ignore", regex_engine="python-re")

    source: str | None = Field(default=None, max_length=255)
    page: int = Field(default=1, ge=1, le=MAX_PAGE)
    per_page: int = Field(default=20, ge=1, le=MAX_PER_PAGE)


# -- reading and parsing -----------------------------------------------------------------------


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body's bytes; ``RequestError(413)`` as soon as it is known to exceed ``limit``."""
    declared = request.headers.get("content-length", "").strip()
    if declared.isdigit() and (len(declared) > 20 or int(declared) > limit):
        raise RequestError(413, f"The body is over the limit of {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"The body is over the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


class _Refused(Exception):
    pass


def _constant(name: str) -> Any:
    raise _Refused(f"Numbers must be finite; {name} is refused.")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused("Numbers must be finite; a number this large is refused.")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"Integers of more than {MAX_INT_DIGITS} digits are refused.")
    return int(text)


def parse_json(raw: bytes, *, surrogates: bool = False, keep_nul: bool = False) -> Any:
    """The JSON value of ``raw``, or ``RequestError(422)`` saying what is wrong with it;
    a NUL in a string as U+FFFD unless ``keep_nul`` (the caller refuses or replaces it)."""
    try:
        data = json.loads(raw, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except _Refused as refused:
        raise RequestError(422, str(refused)) from None
    except RecursionError:
        raise RequestError(422, _TOO_DEEP) from None
    except ValueError:
        raise RequestError(422, "body is not valid JSON") from None
    check_shape(data, surrogates=surrogates)
    return data if surrogates or keep_nul else without_nul(data)


def without_nul(value: Any) -> Any:
    """``value`` with each NUL character as U+FFFD: PostgreSQL stores none in text, and one
    in a field was a 500 there (found by review). Nothing else reads as a NUL."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {without_nul(key): without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_nul(item) for item in value]
    return value


_TOO_DEEP = f"The JSON is nested too deeply (at most {MAX_JSON_DEPTH} levels)."


def check_shape(data: Any, *, surrogates: bool = False) -> None:
    """Depth at most ``MAX_JSON_DEPTH``; no lone surrogate in any string unless
    ``surrogates`` (iterative walk); ``RequestError(422)`` saying which is wrong."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth >= MAX_JSON_DEPTH:
                raise RequestError(422, _TOO_DEEP)
            for key, item in value.items():
                _check_text(key, surrogates)
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            if depth >= MAX_JSON_DEPTH:
                raise RequestError(422, _TOO_DEEP)
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            _check_text(value, surrogates)


def _check_text(text: str, surrogates: bool) -> None:
    if surrogates:
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(
            422, "The text holds a lone UTF-16 surrogate, which is not a character."
        ) from None


def validate(model: type[M], data: Any) -> M:
    """``model`` from ``data``; ``RequestError(422)`` naming the first field at fault."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        tags = getattr(model, "union_tags", frozenset())
        detail = [
            {
                "loc": _location(error["loc"], tags),
                "msg": error["msg"],
                "type": error["type"],
            }
            for error in exc.errors(include_url=False, include_context=False, include_input=False)
        ]
        first = detail[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise RequestError(422, f"{where}: {first['msg']}.", detail) from None


def _location(loc: tuple[int | str, ...], tags: frozenset[str]) -> list[int | str]:
    """The error's location in the body, without the union's tag that pydantic puts first."""
    return list(loc[1:] if loc and loc[0] in tags else loc)


async def json_body(
    request: Request, model: type[M], *, optional: bool = False, limit: int = MAX_BODY_BYTES
) -> M:
    """The request's body as ``model`` (``optional``: an empty body is the model's defaults)."""
    raw = await read_body(request, limit)
    if optional and not raw.strip():
        return model()
    return validate(model, parse_json(raw))


def query_params(request: Request, model: type[M]) -> M:
    """The query string as ``model``; a parameter of the model given twice is refused."""
    values: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name not in model.model_fields:
            continue
        if name in values:
            raise RequestError(422, f"{name}: given more than once.")
        _check_text(value, False)
        if len(value) > 1000:
            raise RequestError(422, f"{name}: too long.")
        values[name] = without_nul(value)  # as in a body
    return validate(model, values)


# -- path ids ----------------------------------------------------------------------------------


class IdConvertor(Convertor[int]):
    """``{name:id}``: digits as a positive 64-bit id; anything longer is out of range (0)."""

    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        digits = value.lstrip("0")
        if len(digits) > 19:
            return 0  # never converted: ``ids_in_range`` answers 404
        return int(digits or "0")

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("id", IdConvertor())


def ids_in_range(request: Request) -> bool:
    """Whether every integer path parameter can be an id (the database would overflow)."""
    return all(
        0 < value <= MAX_ID for value in request.path_params.values() if isinstance(value, int)
    )


# -- response models (the OpenAPI document's answers; the handlers build the same shapes) -----


class FieldError(BaseModel):
    """A field at fault (``loc``: its path in the body), without the input echoed."""

    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx of the JSON API."""

    error: str
    code: str | None = None
    detail: list[FieldError] | None = None


class _Waiting(BaseModel):
    session_id: int
    source: str
    agent_id: str
    depth: int
    context_label: str | None
    requested_at: str
    age_s: float


class PendingApproval(_Waiting):
    tool_call_id: int
    tool: str
    arguments: Any


class OpenQuestion(_Waiting):
    request_id: int
    question: Any


class InboxListing(BaseModel):
    approvals: list[PendingApproval]
    clarifications: list[OpenQuestion]


class SessionSummary(BaseModel):
    """A session in ``GET /api/sessions`` (``engine.store.views``)."""

    id: int
    source: str
    agent_id: str
    is_ephemeral: bool
    is_interactive: bool
    context_label: str | None
    created_at: str | None
    message_count: int
    last_message_at: str | None


class SessionsPage(BaseModel):
    items: list[SessionSummary]
    total: int
    page: int
    per_page: int


class SessionInfo(BaseModel):
    id: int
    source: str
    agent_id: str
    is_interactive: bool
    is_ephemeral: bool
    context_label: str | None
    created_at: str | None


class UserRow(BaseModel):
    kind: Literal["user"]
    id: int
    content: str | None
    is_synthetic: bool
    status: str
    created_at: str | None
    attachments: list[Any]


class AssistantRow(BaseModel):
    """An answer of the model (``thinking``: it called tools, listed right after it)."""

    kind: Literal["assistant", "thinking"]
    id: int
    content: str | None
    reasoning: str | None
    created_at: str | None
    input_tokens: int | None
    output_tokens: int | None
    model: str | None
    is_synthetic: bool
    depth: int


class ToolRow(BaseModel):
    kind: Literal["tool"]
    id: int
    name: str
    arguments: Any
    status: str
    result: str | None
    depth: int


class AgentStartRow(BaseModel):
    """A sub-agent's frame begins (``content``: its prompt)."""

    kind: Literal["agent"]
    agent_id: str
    depth: int
    content: str | None
    created_at: str | None


class AgentEndRow(BaseModel):
    kind: Literal["agent_end"]
    agent_id: str
    depth: int


class SessionTree(BaseModel):
    session: SessionInfo
    messages: list[
        Annotated[
            UserRow | AssistantRow | ToolRow | AgentStartRow | AgentEndRow,
            Field(discriminator="kind"),
        ]
    ]


class ApprovalResolved(BaseModel):
    tool_call_id: int
    session_id: int
    action: Literal["approve", "reject"]
    live: bool


class ClarificationResolved(BaseModel):
    request_id: int
    session_id: int
    live: bool


class JobLastRun(BaseModel):
    status: str
    result: str | None
    error: str | None
    at: str | None


class JobGrantsBody(_Body):
    """A job's grants; as a body of ``PUT /api/jobs/{id}/grants``, only fewer than now."""

    tools: list[str] = []
    mcp_servers: list[str] = []
    read: list[str] = []
    write: list[str] = []
    working_directory: str | None = None


class JobItem(BaseModel):
    """A scheduled job (``bot.http.operations.JobView.as_json``): the stored job, its
    schedule in words, whether a run is in flight and the last run's outcome."""

    id: int
    kind: str
    title: str
    prompt: str
    timezone: str
    spec: str | None
    agent_id: str
    origin_source: str | None
    parent_session_id: int | None
    run_context: dict[str, Any] | None
    owner_id: str | None
    approval_wait_s: int | None
    enabled: bool
    single_run: bool
    coalesce: bool
    misfire_grace_s: int
    max_attempts: int
    next_run_at: str | None
    created_at: str | None
    deleted_at: str | None
    description: str
    #: What its runs may do without asking (``scheduler.grants``), and the same as lines.
    grants: JobGrantsBody
    grant_lines: list[str]
    running: bool
    #: A one-off task that is over (a single run that fired, a background task started):
    #: it cannot be resumed, only deleted.
    finished: bool
    last_run: JobLastRun | None


class JobList(BaseModel):
    items: list[JobItem]


class JobDeleted(BaseModel):
    id: int
    deleted: bool
    #: Whether its runs in flight (if any) had stopped when the answer was sent.
    runs_stopped: bool


class JobKilled(BaseModel):
    id: int
    cancelled_sessions: list[int]


class EventCreated(BaseModel):
    id: int


class CheckItem(BaseModel):
    """One check of ``chathub doctor`` (``bot/checks/result.py``); ``fix`` when it failed."""

    name: str
    ok: bool
    summary: str
    fix: str


class HealthDetailsReport(BaseModel):
    """``GET /api/health/details``: every check of ``chathub doctor`` (docs/setup.md)."""

    ok: bool
    checked_at: str
    checks: list[CheckItem]


class HealthDetailsQuery(BaseModel):
    """``?fresh=true`` runs the checks anew instead of answering a report under 30 s old."""

    model_config = ConfigDict(extra="ignore")

    fresh: bool = False


class HealthReport(BaseModel):
    """``GET /healthz`` (200 healthy, 503 not): ``ok`` and what was checked."""

    model_config = ConfigDict(extra="allow")

    ok: bool
    database: str | None = None
    telegram_last_poll_age_s: float | None = None
    scheduler_last_step: str | None = None
