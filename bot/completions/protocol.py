"""OpenAI's chat completions format: the request as pydantic models, the answers and the
error shape as OpenAI's clients read them (``openai`` for Python, Open WebUI, LibreChat).

Parameters the agent does not take from a client are accepted and ignored (the agent's
model, sampling and tools are chathub's: ``temperature``, ``max_tokens``, ``tools`` …);
those whose meaning cannot be honoured are refused (``n`` above 1). docs/openai-api.md
lists both.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bot.http.models import SafeJSONResponse

__all__ = [
    "ROLES",
    "ApiError",
    "ChatCompletion",
    "ChatMessage",
    "CompletionRequest",
    "ErrorDetail",
    "ModelItem",
    "ModelList",
    "OpenAIErrorBody",
    "chunk",
    "completion",
    "completion_id",
    "model_list",
    "parse_request",
    "usage_chunk",
]

#: The roles of OpenAI's chat format; another is refused.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
MAX_MESSAGES = 10_000
MAX_NAME_CHARS = 200


class ApiError(Exception):
    """A refusal in OpenAI's error shape: ``status``, one sentence, its ``type`` and ``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        kind: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.kind = kind
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """OpenAI's error object (a response's body, or a failed stream's last event)."""
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> SafeJSONResponse:
        return SafeJSONResponse(self.body(), status_code=self.status, headers=self.headers)


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorBody(BaseModel):
    """Every refusal of ``/v1``, in OpenAI's shape."""

    error: ErrorDetail


class ChatMessage(BaseModel):
    """One message of the request. ``content`` is text, or a list of parts of which the
    text ones are taken (``{"type": "text", "text": ...}``)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text parts, joined; a part that is neither text nor an image is
        refused (``ApiError``)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            kind = part.get("type")
            if kind == "text":
                if not isinstance(part.get("text"), str):  # it said text parts are not taken
                    raise ApiError(
                        400,
                        "A text part's 'text' must be a string.",
                        param="messages",
                        code="invalid_content",
                    )
                texts.append(part["text"])
            elif kind == "refusal" and self.role == "assistant":  # what it declined, said
                texts.append(str(part.get("refusal") or ""))
            elif kind not in _IMAGE_PARTS:
                raise ApiError(
                    400,
                    f"A content part of type {_shown(kind)} is not taken; send text or images.",
                    param="messages",
                    code="unsupported_content",
                )
        return "\n".join(texts)

    def image_urls(self) -> list[str]:
        """The URLs of the message's image parts (``image_url``, ``input_image``)."""
        if not isinstance(self.content, list):
            return []
        urls = []
        for part in self.content:
            if part.get("type") not in _IMAGE_PARTS:
                continue
            image = part.get("image_url", part.get("url"))
            url = image.get("url") if isinstance(image, dict) else image
            urls.append(url if isinstance(url, str) else "")
        return urls


_IMAGE_PARTS = ("image_url", "input_image")


class CompletionRequest(BaseModel):
    """``POST /v1/chat/completions``'s body (what chathub reads of it)."""

    model_config = ConfigDict(extra="allow")

    #: Longer than any model's name: an unknown one is answered 404 ``model_not_found``.
    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatMessage] = Field(max_length=MAX_MESSAGES)
    #: ``null`` is OpenAI's "not set". Strict, as OpenAI is: ``"yes"`` or ``1`` is a 400
    #: (it was taken as ``true`` until 2026-12-07).
    stream: bool | None = Field(default=False, strict=True)
    user: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    n: int | None = Field(default=None, ge=1, strict=True)
    stream_options: dict[str, Any] | None = None

    @property
    def include_usage(self) -> bool:
        """The client asked for a last chunk with the tokens (``stream_options``)."""
        return bool(self.stream and (self.stream_options or {}).get("include_usage") is True)

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int | None) -> int | None:
        if value is not None and value > 1:
            raise ValueError("only one choice is made: n must be 1")
        return value


def parse_request(data: Any) -> CompletionRequest:
    """The body as a ``CompletionRequest``; ``ApiError(400)`` naming the first bad field."""
    if not isinstance(data, dict):
        raise ApiError(400, "The body must be a JSON object.")
    try:
        request = CompletionRequest.model_validate(data)
    except ValidationError as invalid:
        first = invalid.errors(include_url=False, include_input=False)[0]
        where, message = _described(first["loc"], str(first["msg"]))
        raise ApiError(400, f"{where}: {message}.", param=where) from None
    if not request.messages:
        raise ApiError(400, "messages: at least one message is needed.", param="messages")
    return request


#: The request's and a message's fields: what an error's place may name.
_FIELDS = frozenset(CompletionRequest.model_fields) | frozenset(ChatMessage.model_fields)


def _described(loc: tuple[int | str, ...], message: str) -> tuple[str, str]:
    """An error's place written as OpenAI writes it (``messages[0].content``), without
    pydantic's union branches (``messages.0.content.str``), and its sentence in the
    request's terms (until 2026-12-07 "Input should be a valid dictionary or instance of
    ChatMessage" reached the client; found by review)."""
    where = ""
    for part in loc:
        if isinstance(part, int):
            where += f"[{part}]"
        elif part in _FIELDS:
            where += f".{part}" if where else part
        else:
            break  # a union's branch, or a model's name: pydantic's, not the request's
    where = where or "body"
    if where.endswith(".content"):
        return where, "must be a string or a list of content parts"
    if where.startswith("messages[") and where.endswith("]"):
        return where, "must be an object with a role and its content"
    return where, message.removeprefix("Value error, ")


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def completion(
    ident: str,
    created: int,
    model: str,
    content: str,
    conversation: str,
    usage: tuple[int, int] | None = None,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    """A whole answer (``stream`` false); ``usage``: the final model call's tokens;
    ``finish_reason`` ``length``: the model's last answer was cut at its token limit."""
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage_of(usage),
        "chathub": {"conversation": conversation},
    }


def usage_of(usage: tuple[int, int] | None) -> dict[str, int]:
    prompt, answer = usage or (0, 0)
    return {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": prompt + answer}


def usage_chunk(
    ident: str, created: int, model: str, usage: tuple[int, int] | None
) -> dict[str, Any]:
    """The last chunk a client asking for ``stream_options.include_usage`` gets."""
    return {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_of(usage),
    }


def chunk(
    ident: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One streamed piece (``stream`` true); ``extra``: chathub's own field, which OpenAI's
    clients ignore (what the agent does, for a client that wants it)."""
    body: dict[str, Any] = {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if extra:
        body["chathub"] = extra
    return body


def model_list(agents: list[str], created: int | None = None) -> dict[str, Any]:
    stamp = int(time.time()) if created is None else created
    return {
        "object": "list",
        "data": [
            {"id": agent, "object": "model", "created": stamp, "owned_by": "chathub"}
            for agent in agents
        ],
    }


def _shown(kind: Any) -> str:
    if isinstance(kind, str) and kind.isidentifier() and len(kind) <= 40:
        return f"'{kind}'"
    return "unknown"


# -- the answers, as the OpenAPI document describes them ---------------------------------------


class ModelItem(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    """``GET /v1/models``: the agents one may talk to."""

    object: Literal["list"]
    data: list[ModelItem]


class AnswerMessage(BaseModel):
    role: Literal["assistant"]
    content: str
    refusal: None = None


class CompletionChoice(BaseModel):
    index: int
    message: AnswerMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    """``POST /v1/chat/completions`` with ``stream`` false (true: ``text/event-stream`` of
    ``chat.completion.chunk`` objects, then ``data: [DONE]``)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
