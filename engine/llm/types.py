"""Types at the seam between the turn engine and a chat-completions model.

The seam itself (``ChatModel``) is in ``engine.llm.protocols``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
"""One OpenAI chat-completions message (``{"role": ..., "content": ...}``)."""

ToolSchema = dict[str, Any]
"""One OpenAI ``tools`` entry: ``{"type": "function", "function": {...}}``."""

DeltaCallback = Callable[[str], None]
"""Receives streamed text deltas of the assistant's content, in order."""


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A tool call as the model asked for it; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class LlmResponse:
    content: str | None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    reasoning_content: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None


class LlmError(Exception):
    """A model call failed. ``retriable`` errors make the round try the next model.

    The message is plain words a user may be shown (never an exception's class or a raw
    body); ``detail`` is what only the log gets (the raw text, the underlying error).
    """

    retriable: bool = False

    @property
    def away(self) -> bool:
        """The model could not be asked (unreachable, busy: 429, 503): whatever was sent
        is not to blame (a 500, a timeout or an unreadable answer may be the request's
        doing, every time)."""
        return False

    def __init__(
        self,
        message: str,
        *,
        model: str = "",
        status: int | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.status = status
        self.detail = detail


class LlmTimeout(LlmError):
    """Not ``away``: a request too big for a slow model times out every time."""

    retriable = True


class LlmConnectionError(LlmError):
    retriable = True
    away = True  # type: ignore[assignment]


class LlmRateLimited(LlmError):
    retriable = True
    away = True  # type: ignore[assignment]
    #: How long the server asked to wait (``Retry-After``, seconds), if it said.
    retry_after: float | None = None


class LlmServerError(LlmError):
    """HTTP 5xx."""

    retriable = True

    @property
    def away(self) -> bool:
        # 503 only: a gateway's 502 or 504 may answer this request so every time (a
        # batch too big for the model behind it), and would then never be passed over.
        return self.status == 503


class LlmProviderError(LlmError):
    """The endpoint accepted the request and then reported an error in its answer (an HTTP
    200 with an ``error`` object, or a choice ending ``finish_reason: "error"``)."""

    retriable = True


class LlmEndpointError(LlmError):
    """HTTP 401, 402, 403, 404: the endpoint refused (a key revoked, credit run out, a
    model removed): not the request's doing, so the next model (another endpoint, another
    key) is asked. Until 2026-12-07 these ended the turn with the fallback never tried
    (found by review)."""

    retriable = True


class LlmRequestError(LlmError):
    """HTTP 4xx other than 429: the request itself is wrong; another model will not help."""

    retriable = False


class LlmContextOverflow(LlmRequestError):
    """The request does not fit the model's context window (a 413, or a 4xx saying so):
    the same request fails every time, a smaller one may not."""


class LlmProtocolError(LlmError):
    """The endpoint answered with something that is not a chat completion."""

    retriable = True
