"""The web chat's frames: JSON text, one object per frame, each with a ``type``.

Version ``PROTOCOL_VERSION``; the server names it in its ``hello`` frame, and a client may
send ``"v": 1`` on any frame (another version is refused). Every client frame is
validated here before anything acts on it; a frame that fails is answered with one
``error`` frame and changes nothing. Server frames are built from the models below too, so
``docs/webchat.md``'s schemas and what is sent are the same thing.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticSerializationError

from bot.http.models import RequestError, check_shape, without_nul
from bot.webchat.uploads import MAX_ATTACHMENTS, UPLOAD_ID_PATTERN

__all__ = [
    "CLIENT_FRAMES",
    "PROTOCOL_VERSION",
    "SERVER_FRAMES",
    "AnswerQuestion",
    "ApproveTool",
    "ClientFrame",
    "FrameError",
    "Ping",
    "RejectTool",
    "Resume",
    "SendMessage",
    "Stop",
    "parse_client_frame",
]

PROTOCOL_VERSION = 1
MAX_REF_CHARS = 64
MAX_REASON_CHARS = 4000
MAX_ID = 2**63 - 1
_MAX_DEPTH = 8  # client frames are flat; a deeply nested one is junk, refused unparsed

Id = Annotated[int, Field(strict=True, ge=1, le=MAX_ID)]
Ref = Annotated[str, Field(max_length=MAX_REF_CHARS)]
#: An upload's id (``POST /chat/conversations/{id}/files`` answers it).
UploadId = Annotated[str, Field(pattern=UPLOAD_ID_PATTERN)]


class FrameError(ValueError):
    """A client frame refused: ``code`` for programs, ``message`` one sentence for people."""

    def __init__(self, code: str, message: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.ref = ref


# -- client → server ------------------------------------------------------------------------


class _ClientFrame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    #: Echoed on the frame that answers this one (``accepted``, ``pong``, ``error``).
    ref: Ref | None = None


class SendMessage(_ClientFrame):
    """A message to the agent; ``/name argument`` runs a command. ``attachments``: ids of
    files uploaded to this conversation first (the text may then be empty)."""

    type: Literal["message"]
    text: str
    attachments: Annotated[list[UploadId], Field(max_length=MAX_ATTACHMENTS)] = []


class Stop(_ClientFrame):
    """Stop the running turn and drop the queued messages (``/stop``)."""

    type: Literal["stop"]


class Resume(_ClientFrame):
    """Continue a turn a restart interrupted (nothing happens when none was)."""

    type: Literal["resume"]


def _one_of_the_bypasses(seconds: int) -> int:
    if seconds not in (0, 900):
        raise ValueError("must be 0 (this session), 900 (15 minutes) or null")
    return seconds


class ApproveTool(_ClientFrame):
    """Approve a waiting call; ``bypass_secs`` 900: no more asking for 15 minutes, 0: for
    this session."""

    type: Literal["approve_tool"]
    tool_call_id: Id
    # Strict: ``false`` or ``0.0`` (a client's "no bypass") was taken as 0, the widest
    # bypass there is (found by review on 2026-12-06).
    bypass_secs: Annotated[StrictInt, AfterValidator(_one_of_the_bypasses)] | None = None


class RejectTool(_ClientFrame):
    """Reject a waiting call; the model reads ``reason``."""

    type: Literal["reject_tool"]
    tool_call_id: Id
    reason: Annotated[str, Field(max_length=MAX_REASON_CHARS)] = ""


class AnswerQuestion(_ClientFrame):
    """Answer the agent's clarification question ``request_id``."""

    type: Literal["answer_question"]
    request_id: Id
    answer: str


class Ping(_ClientFrame):
    """Answered with ``pong`` (keeps proxies from closing an idle socket)."""

    type: Literal["ping"]


ClientFrame = Annotated[
    SendMessage | Stop | Resume | ApproveTool | RejectTool | AnswerQuestion | Ping,
    Field(discriminator="type"),
]
CLIENT_FRAMES: tuple[type[_ClientFrame], ...] = (
    SendMessage,
    Stop,
    Resume,
    ApproveTool,
    RejectTool,
    AnswerQuestion,
    Ping,
)
_CLIENT_TYPES = {model.model_fields["type"].annotation.__args__[0] for model in CLIENT_FRAMES}  # type: ignore[union-attr]
_client_adapter: TypeAdapter[Any] = TypeAdapter(ClientFrame)


def parse_client_frame(text: str) -> Any:
    """The frame ``text`` holds, or ``FrameError`` saying in a sentence what is wrong."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        raise FrameError("bad_json", "A frame must be one JSON object.") from None
    if not isinstance(data, dict):
        raise FrameError("bad_json", "A frame must be one JSON object.")
    ref = data.get("ref") if isinstance(data.get("ref"), str) else None
    ref = ref if ref is not None and len(ref) <= MAX_REF_CHARS and _encodable(ref) else None
    if _depth(data) > _MAX_DEPTH:
        raise FrameError("invalid", "The frame is nested too deeply.", ref)
    try:  # a lone surrogate ("\ud800"): no character, and no row can store it
        check_shape(data)
    except RequestError as bad:  # (until 2026-12-06 the write failed: "internal")
        raise FrameError("invalid", bad.message, ref) from None
    data = without_nul(data)  # PostgreSQL stores no NUL in text (it was "internal" there)
    kind = data.get("type")
    if not isinstance(kind, str):
        raise FrameError("invalid", "A frame needs a string field 'type'.", ref)
    if kind not in _CLIENT_TYPES:
        raise FrameError("unknown_type", f"Unknown frame type {kind[:40]!r}.", ref)
    if "v" in data and data["v"] != PROTOCOL_VERSION:
        raise FrameError("version", f"This server speaks protocol version {PROTOCOL_VERSION}.", ref)
    try:
        return _client_adapter.validate_python(data)
    except ValidationError as exc:
        raise FrameError("invalid", _first_problem(kind, exc), ref) from None


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e400
        raise ValueError("not a finite number")
    return number


def _depth(value: Any, level: int = 0) -> int:
    if level > _MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def _first_problem(kind: str, exc: ValidationError) -> str:
    """One sentence naming the first bad field (never pydantic's whole report)."""
    error = exc.errors(include_url=False, include_input=False)[0]
    location = [str(part) for part in error["loc"] if part != kind]
    field = ".".join(location) or "frame"
    if error["type"] == "missing":
        return f"A '{kind}' frame needs the field '{field}'."
    if error["type"] == "extra_forbidden":
        return f"A '{kind}' frame has no field '{field}'."
    if error["type"] == "string_pattern_mismatch":
        return f"Field '{field}' of the '{kind}' frame is not in the form the server gave."
    if error["type"] == "too_long" and field == "attachments":
        return f"A message carries at most {MAX_ATTACHMENTS} files."
    return f"Field '{field}' of the '{kind}' frame: {error['msg']}."


def _encodable(text: str) -> bool:
    """No lone surrogate: a ``ref`` echoed with one silenced the socket (found by review)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- server → client ------------------------------------------------------------------------


class _ServerFrame(BaseModel):
    model_config = ConfigDict(frozen=True)

    def dump(self) -> str:
        try:
            return self.model_dump_json()
        except PydanticSerializationError:  # a lone surrogate in some text: sent escaped
            # Raised, it marked the socket gone: every frame after it was dropped while
            # the tab stayed open (found by review on 2026-12-06).
            return json.dumps(self.model_dump(mode="json"))


class Limits(BaseModel):
    max_frame_bytes: int
    max_message_chars: int
    frames_per_second: float
    burst: int
    #: An upload's size limit, and the files one message may carry.
    max_upload_bytes: int
    max_attachments: int = MAX_ATTACHMENTS
    #: A voice note's limits (``VOICE_MAX_BYTES``, ``VOICE_MAX_SECONDS``); ``None``: this
    #: web chat was given no way to hear one.
    max_voice_bytes: int | None = None
    max_voice_seconds: int | None = None


class Hello(_ServerFrame):
    """First frame on every socket: the protocol version and what it talks to."""

    type: Literal["hello"] = "hello"
    protocol: int = PROTOCOL_VERSION
    conversation_id: str
    session_id: int
    limits: Limits


class TurnRunning(_ServerFrame):
    """Sent right after the socket subscribed: whether a turn runs now (SEND or STOP)."""

    type: Literal["turn_running"] = "turn_running"
    running: bool


class Accepted(_ServerFrame):
    """A ``message`` was stored (it will be answered even if this socket closes)."""

    type: Literal["accepted"] = "accepted"
    ref: str | None = None
    queued_id: int | None = None


class Pong(_ServerFrame):
    type: Literal["pong"] = "pong"
    ref: str | None = None


class Notice(_ServerFrame):
    """A command's reply, to the socket that sent it; what a voice note said (``🎤 “…”``,
    to every tab, ``ref`` null) or the warning about it (to its sender)."""

    type: Literal["notice"] = "notice"
    text: str
    ref: str | None = None


class Attachment(BaseModel):
    """A file a user message carries, as saved in the workspace."""

    #: Workspace-relative (what the model is told).
    path: str
    name: str
    kind: str
    mime_type: str | None = None
    size: int | None = None


class UserMessageFrame(_ServerFrame):
    """A user message as stored (every tab shows it; none shows one optimistically)."""

    type: Literal["user_message"] = "user_message"
    id: int
    text: str
    attachments: list[Attachment] = []


class QueuedMessageFrame(_ServerFrame):
    """A message taken and waiting for its turn, shown to a tab that opens meanwhile (a
    reload, a second tab): its ``user_message`` comes when its turn takes it."""

    type: Literal["queued_message"] = "queued_message"
    queued_id: int
    text: str
    attachments: list[Attachment] = []


class TextDeltaFrame(_ServerFrame):
    type: Literal["text_delta"] = "text_delta"
    text: str
    depth: int = 0


class ThinkingDelta(_ServerFrame):
    """Text the model wrote beside its tool calls, or its reasoning."""

    type: Literal["thinking_delta"] = "thinking_delta"
    text: str
    depth: int = 0
    #: The text beside the calls rendered as an answer is (its streamed deltas were raw
    #: Markdown); ``None`` for reasoning.
    html: str | None = None


class ToolStartFrame(_ServerFrame):
    type: Literal["tool_start"] = "tool_start"
    tool_call_id: int
    name: str
    arguments: str
    depth: int = 0


class ToolEndFrame(_ServerFrame):
    type: Literal["tool_end"] = "tool_end"
    tool_call_id: int
    name: str
    status: Literal["done", "failed", "cancelled", "rejected"]
    #: The result (or error, or reason) cut to ``RESULT_PREVIEW_CHARS``.
    preview: str
    depth: int = 0


class Choice(BaseModel):
    choice: str
    label: str
    #: What ``approve_tool`` sends for it (``None``: a plain approval; reject: none).
    bypass_secs: int | None = None


class ApprovalRequiredFrame(_ServerFrame):
    """A card: the call in full (``bot.platform.cards.card_content``) and the choices."""

    type: Literal["approval_required"] = "approval_required"
    tool_call_id: int
    tool: str
    agent: str
    depth: int
    label: str
    content: str
    language: str
    workdir: str | None = None
    path: str | None = None
    new_file: bool = False
    deciders: str | None = None
    #: A scheduled job's title when its run asks here (not this conversation's own turn).
    asked_by: str | None = None
    choices: list[Choice]


class ApprovalResolved(_ServerFrame):
    """A card closes: decided here, in another tab, in the inbox or over the API."""

    type: Literal["approval_resolved"] = "approval_resolved"
    tool_call_id: int
    outcome: str
    #: The closed card's line, e.g. "✅ Approved" (``bot.platform.cards.outcome_line``).
    line: str
    by: str | None = None
    note: str = ""


class AgentQuestion(_ServerFrame):
    type: Literal["agent_question"] = "agent_question"
    request_id: int
    question: str
    depth: int = 0


class QuestionAnswered(_ServerFrame):
    type: Literal["question_answered"] = "question_answered"
    request_id: int
    answer: str


class AgentStartFrame(_ServerFrame):
    type: Literal["agent_start"] = "agent_start"
    agent_id: str
    depth: int


class AgentEndFrame(_ServerFrame):
    type: Literal["agent_end"] = "agent_end"
    agent_id: str
    status: str
    depth: int


class DoneFrame(_ServerFrame):
    """The turn's answer, whole (the deltas before it were its parts); ``html`` is its
    Markdown rendered on the server, safe to insert (``bot.webchat.markdown``)."""

    type: Literal["done"] = "done"
    message_id: int
    content: str
    html: str
    truncated: bool = False


class NewSessionFrame(_ServerFrame):
    """``/new``: the conversation starts afresh (the client clears the thread)."""

    type: Literal["new_session"] = "new_session"
    session_id: int


class ErrorFrame(_ServerFrame):
    """One sentence. ``code`` ``turn``: the running turn ended with it (stop, failure);
    ``internal`` without ``ref``: an event of the turn could not be shown; any other code
    answers a client frame, which changed nothing."""

    type: Literal["error"] = "error"
    code: str
    message: str
    ref: str | None = None


class LaggedFrame(_ServerFrame):
    """This socket fell behind and missed ``missed`` events: reload the history."""

    type: Literal["lagged"] = "lagged"
    missed: int


SERVER_FRAMES: tuple[type[_ServerFrame], ...] = (
    Hello,
    TurnRunning,
    Accepted,
    Pong,
    Notice,
    UserMessageFrame,
    QueuedMessageFrame,
    TextDeltaFrame,
    ThinkingDelta,
    ToolStartFrame,
    ToolEndFrame,
    ApprovalRequiredFrame,
    ApprovalResolved,
    AgentQuestion,
    QuestionAnswered,
    AgentStartFrame,
    AgentEndFrame,
    DoneFrame,
    NewSessionFrame,
    ErrorFrame,
    LaggedFrame,
)
ServerFrame = _ServerFrame
