"""A ``ChatModel`` over any OpenAI-compatible ``/chat/completions`` endpoint.

Whatever the endpoint sends is checked before it is used: a field of the wrong JSON type
where the answer itself lives (content, tool calls, choices, deltas) is a malformed
response, an ``LlmProtocolError`` (retriable: the round tries the next model); wrong side
information (usage numbers, reasoning, finish reason) is dropped. Our own parser never
raises anything else.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from engine.llm.protocols import ModelSettings
from engine.llm.types import (
    DeltaCallback,
    LlmConnectionError,
    LlmContextOverflow,
    LlmEndpointError,
    LlmError,
    LlmProtocolError,
    LlmProviderError,
    LlmRateLimited,
    LlmRequestError,
    LlmResponse,
    LlmServerError,
    LlmTimeout,
    Message,
    ToolCallRequest,
    ToolSchema,
    Usage,
)

_MAX_ERROR_TEXT = 500
#: Token counts above this are junk (and would not fit a 64-bit database column).
_MAX_COUNT = 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Malformed(Exception):
    """A part of the answer has the wrong shape; the model turns it into ``LlmProtocolError``."""


class OpenAICompatModel:
    """One configured model, called over a shared ``httpx.AsyncClient``.

    ``config.timeout_s`` bounds connecting and each read, so a server that stops
    sending halfway through a stream fails as ``LlmTimeout`` while a long but
    live stream is not cut off; and the time between two pieces of the answer, so a
    stream of keep-alive comments alone does too (``clock``: the stream's time).
    """

    def __init__(
        self,
        config: ModelSettings,
        http: httpx.AsyncClient,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._http = http
        self._clock = clock
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json"}
        if config.api_key:
            self._headers["Authorization"] = f"Bearer {config.api_key}"
        self._timeout = httpx.Timeout(config.timeout_s)

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def cache_hints(self) -> bool:
        return self._config.cache_hints

    @property
    def config(self) -> ModelSettings:
        return self._config

    def __repr__(self) -> str:
        return f"OpenAICompatModel({self._config.name!r}, {self._url!r})"

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> LlmResponse:
        """One chat completion; ``on_delta`` gets the content in order (one piece if not streaming).

        Raises an ``LlmError`` subclass for every failure.
        """
        stream = self._config.stream
        body: dict[str, Any] = {"model": self._config.name, "messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            if stream:
                return await self._streamed(payload, on_delta)
            return await self._whole(payload, on_delta)
        except (httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Nothing was sent (a host that drops packets: switched off, a VPN peer
            # offline): unreachable, as a refused connection is, not a slow answer to
            # this request (until 2026-12-07 an LlmTimeout; found by review).
            message = f"cannot connect to {self._url} within {self._config.timeout_s:g} s"
            raise self._error(LlmConnectionError, message, exc) from exc
        except httpx.TimeoutException as exc:
            message = f"timed out after {self._config.timeout_s:g} s"
            raise self._error(LlmTimeout, message, exc) from exc
        except httpx.ConnectError as exc:
            raise self._error(LlmConnectionError, f"cannot connect to {self._url}", exc) from exc
        except httpx.TransportError as exc:
            # Dropped connections, broken chunked encoding: the endpoint, not the request.
            raise self._error(LlmConnectionError, "connection failed", exc) from exc
        except httpx.DecodingError as exc:  # a Content-Encoding the body has not (a proxy's)
            message = "its answer could not be read (a broken Content-Encoding)"
            raise self._error(LlmConnectionError, message, exc) from exc
        except (httpx.InvalidURL, UnicodeEncodeError) as exc:
            # An address or a key no request can carry (a key pasted with a typographic
            # dash raised UnicodeEncodeError out of the client; found by review): the
            # next model may be set up right.
            message = "its address or API key cannot be used; check the settings"
            raise self._error(LlmConnectionError, message, exc) from exc

    async def _whole(self, payload: bytes, on_delta: DeltaCallback | None) -> LlmResponse:
        response = await self._http.post(
            self._url, content=payload, headers=self._headers, timeout=self._timeout
        )
        if response.status_code != 200:
            raise self._status_error(response.status_code, response.text, response.headers)
        return self._from_body(response, on_delta)

    def _from_body(self, response: httpx.Response, on_delta: DeltaCallback | None) -> LlmResponse:
        try:
            data = response.json()
        except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
            raise self._protocol("the body is not JSON", response.text) from None
        try:
            result = self._parse_whole(data)
        except _Malformed as exc:
            raise self._protocol(str(exc), response.text) from None
        if on_delta is not None and result.content:
            on_delta(result.content)
        return result

    def _parse_whole(self, data: Any) -> LlmResponse:
        if not isinstance(data, dict):
            raise _Malformed(f"the body is {_kind(data)}, not an object")
        if data.get("error"):  # OpenRouter and other gateways answer 200 with an error object
            raise self._body_error(data["error"])
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise _Malformed("the answer has no choices")
        choice = _required_object(choices[0], "the choice")
        self._check_choice(choice)
        message = _required_object(choice.get("message"), "the choice's message")
        return LlmResponse(
            content=_text(message.get("content"), "the content") or None,
            tool_calls=_distinct_ids(
                [_whole_call(raw) for raw in _list(message.get("tool_calls"), "the tool calls")]
            ),
            reasoning_content=_reasoning(message) or None,
            usage=_usage(data.get("usage")),
            model=self._config.name,
            finish_reason=_side_text(choice.get("finish_reason")),
        )

    async def _streamed(self, payload: bytes, on_delta: DeltaCallback | None) -> LlmResponse:
        async with self._http.stream(
            "POST", self._url, content=payload, headers=self._headers, timeout=self._timeout
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise self._status_error(response.status_code, response.text, response.headers)
            if response.headers.get("content-type", "").startswith("application/json"):
                # The server ignored ``stream``: take the whole answer.
                await response.aread()
                return self._from_body(response, on_delta)
            return await self._read_stream(response, on_delta)

    async def _read_stream(
        self, response: httpx.Response, on_delta: DeltaCallback | None
    ) -> LlmResponse:
        answer = _StreamedAnswer(on_delta, self._check_choice)
        done = False
        heard = self._clock()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                # Blank separators, ``event:`` lines, ``: keep-alive`` comments: each
                # resets httpx's read timeout, and a queued request's comments alone held
                # the turn until /stop (until 2026-12-07; found by review).
                waited = KEEP_ALIVE_TIMEOUTS * self._config.timeout_s
                if self._clock() - heard > waited:
                    raise LlmTimeout(
                        f"{self._config.name}: no answer within {waited:g} s "
                        "(the server only kept the connection open)",
                        model=self._config.name,
                    )
                continue
            heard = self._clock()
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                answer.feed(self._chunk(data))
            except _Malformed as exc:
                raise self._protocol(str(exc), data) from None
        try:
            return answer.result(self._config.name, done=done)
        except _Malformed as exc:
            raise self._protocol(str(exc)) from None

    def _chunk(self, data: str) -> dict[str, Any]:
        """One ``data:`` line's JSON object; an error object in it is raised as the error."""
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            raise _Malformed("a stream chunk is not JSON") from None
        if not isinstance(chunk, dict):
            raise _Malformed(f"a stream chunk is {_kind(chunk)}, not an object")
        if chunk.get("error"):  # OpenRouter-style failure after the stream began
            raise self._body_error(chunk["error"])
        return chunk

    def _status_error(
        self, status: int, text: str, headers: httpx.Headers | None = None
    ) -> LlmError:
        detail = f"HTTP {status}: {_error_text(text)}"
        if status == 429:
            limited = LlmRateLimited(
                f"{self._config.name}: {detail}", model=self._config.name, status=status
            )
            limited.retry_after = _seconds(headers.get("retry-after") if headers else None)
            return limited
        if status == 408:
            kind: type[LlmError] = LlmTimeout
        elif status >= 500:
            kind = LlmServerError
        elif status == 413 or (status >= 400 and says_context_overflow(text)):
            kind = LlmContextOverflow
        elif status in _ENDPOINT_REFUSALS or (status == 400 and _says_key_refused(text)):
            kind = LlmEndpointError
        elif status >= 400:
            kind = LlmRequestError
        else:
            kind = LlmProtocolError
        return kind(f"{self._config.name}: {detail}", model=self._config.name, status=status)

    def _check_choice(self, choice: dict[str, Any]) -> None:
        """A choice that ended in the provider's error (OpenRouter: ``finish_reason: "error"``
        and an ``error`` object beside it) is that error, not an empty answer."""
        error = choice.get("error")
        if error or choice.get("finish_reason") == "error":
            raise self._body_error(error or "the provider ended the answer with an error")

    def _body_error(self, error: Any) -> LlmError:
        """An error sent in an HTTP 200 answer. The request was accepted, so whatever its
        code says it happened while the provider answered: retriable, the next model may
        succeed (OpenRouter documents in-band errors this way)."""
        code = error.get("code") if isinstance(error, dict) else None
        valid = isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600
        status = code if valid else 502
        detail = _error_text(json.dumps({"error": error}))
        kind: type[LlmError] = LlmProviderError
        if status == 429:
            kind = LlmRateLimited
        elif status >= 500:
            kind = LlmServerError
        elif says_context_overflow(detail):  # OpenRouter tells it in band
            kind = LlmContextOverflow
        return kind(
            f"{self._config.name}: the provider reported an error: {detail}",
            model=self._config.name,
            status=status,
        )

    def _protocol(self, reason: str, raw: str = "") -> LlmProtocolError:
        """The user may see the message (one plain sentence); the raw text is for the log."""
        return LlmProtocolError(
            f"{self._config.name}: the model sent a malformed response ({reason})",
            model=self._config.name,
            detail=f"{reason}: {_clip(raw)!r}" if raw else reason,
        )

    def _error(self, kind: type[LlmError], message: str, cause: Exception) -> LlmError:
        # The exception's class is for the log, never for the message a user may see.
        return kind(
            f"{self._config.name}: {message}",
            model=self.name,
            detail=f"{type(cause).__name__}: {cause}",
        )


class _StreamedAnswer:
    """The pieces of a streamed answer, checked chunk by chunk as they arrive."""

    __slots__ = (
        "_calls",
        "_check_choice",
        "_content",
        "_finish",
        "_held",
        "_on_delta",
        "_reasoning",
        "_saw_choice",
        "_usage",
    )

    def __init__(
        self, on_delta: DeltaCallback | None, check_choice: Callable[[dict[str, Any]], None]
    ) -> None:
        self._on_delta = on_delta
        self._check_choice = check_choice
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls = _StreamedCalls()
        self._usage: Any = None
        self._finish: str | None = None
        self._saw_choice = False
        #: A high surrogate ending a delta: its pair may start the next (a token cut an
        #: emoji), and each half alone became U+FFFD (found by review).
        self._held = ""

    def feed(self, chunk: dict[str, Any]) -> None:
        if chunk.get("usage"):
            self._usage = chunk["usage"]  # checked once, at the end
        for choice in _list(chunk.get("choices"), "a stream chunk's choices"):
            self._choice(_required_object(choice, "a stream choice"))

    def _choice(self, choice: dict[str, Any]) -> None:
        self._saw_choice = True
        self._check_choice(choice)
        delta = _object(choice.get("delta"), "a stream delta")
        text = self._whole_so_far(_raw_text(delta.get("content"), "a content delta"))
        if text:
            self._content.append(text)
            if self._on_delta is not None:
                self._on_delta(text)
        thought = _reasoning(delta)
        if thought:
            self._reasoning.append(thought)
        for position, part in enumerate(_list(delta.get("tool_calls"), "the tool calls")):
            self._calls.feed(part, position)
        finish = _side_text(choice.get("finish_reason"))
        if finish:
            self._finish = finish

    def _whole_so_far(self, raw: str | None) -> str:
        text = self._held + (raw or "")
        self._held = ""
        if text and "\ud800" <= text[-1] <= "\udbff":
            text, self._held = text[:-1], text[-1]
        return _whole(text)

    def result(self, model: str, *, done: bool) -> LlmResponse:
        if not self._saw_choice:
            raise _Malformed("the stream carried no choices")
        if not done and self._finish is None:
            raise _Malformed("the stream ended before the answer was finished")
        if self._held:  # a half that never found its pair
            self._content.append("\ufffd")
            self._held = ""
        return LlmResponse(
            content="".join(self._content) or None,
            tool_calls=self._calls.result(),
            reasoning_content="".join(self._reasoning) or None,
            usage=_usage(self._usage),
            model=model,
            finish_reason=self._finish,
        )


def _whole_call(raw: Any) -> ToolCallRequest:
    entry = _required_object(raw, "a tool call")
    fn = _object(entry.get("function"), "a tool call's function")
    name = _text(fn.get("name"), "a tool call's name") or ""
    return ToolCallRequest(_call_id(entry.get("id")), name, _arguments(fn.get("arguments")))


class _Call:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class _StreamedCalls:
    """Streamed tool-call fragments folded into calls, in the order the calls began.

    A fragment continues the latest call at its ``index`` unless it carries an id other
    than that call's: Ollama streams every call whole at index 0, each with its own id,
    while OpenAI, vLLM, llama.cpp and the rest send the id once (or repeat the same one)
    and the arguments in pieces at one index per call.
    """

    __slots__ = ("_at", "_calls")

    def __init__(self) -> None:
        self._calls: list[_Call] = []
        self._at: dict[int, _Call] = {}  # the latest call begun at each index

    def feed(self, part: Any, position: int) -> None:
        part = _required_object(part, "a tool call fragment")
        index = part.get("index", position)
        if not _is_count(index):
            raise _Malformed(f"a tool call's index is {_kind(index)}, not a number from 0")
        given = part.get("id")
        call_id = given if isinstance(given, str) and given else ""
        call = self._at.get(index)
        if call is None or (call_id and call.id and call_id != call.id):
            call = self._at[index] = _Call()
            self._calls.append(call)
        if call_id and not call.id:
            call.id = call_id
        fn = _object(part.get("function"), "a tool call's function")
        name = _text(fn.get("name"), "a tool call's name")
        if name and name != call.name:  # some servers repeat the name on every fragment
            call.name += name
        if fn.get("arguments") is not None:
            call.arguments.append(_raw_arguments(fn["arguments"]))  # made whole once joined

    def result(self) -> tuple[ToolCallRequest, ...]:
        made = [
            ToolCallRequest(c.id, c.name, _whole("".join(c.arguments)))
            for c in self._calls
            if c.name or any(c.arguments)  # an id alone announces nothing to run
        ]
        return _distinct_ids(made)


def _distinct_ids(calls: list[ToolCallRequest]) -> tuple[ToolCallRequest, ...]:
    """Every call gets an id of its own: each result is paired with its call by id, so a
    missing or repeated one is replaced (the model sees the ids we sent back)."""
    seen: set[str] = set()
    out = []
    for call in calls:
        if not call.id or call.id in seen:
            call = ToolCallRequest(_new_id(), call.name, call.arguments)
        seen.add(call.id)
        out.append(call)
    return tuple(out)


def _arguments(value: Any) -> str:
    """Tool arguments as JSON text; the dispatcher checks that text and tells the model."""
    return _whole(_raw_arguments(value))


def _raw_arguments(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):  # a few servers send the object instead of JSON text
        return json.dumps(value)
    raise _Malformed(f"a tool call's arguments are {_kind(value)}, not text")


def _call_id(value: Any) -> str:
    """The model's id for a call; only used to pair the call with its result, so a missing
    or non-text one is replaced rather than fatal (``_distinct_ids``)."""
    return value if isinstance(value, str) else ""


def _reasoning(message: dict[str, Any]) -> str | None:
    return _side_text(message.get("reasoning_content")) or _side_text(message.get("reasoning"))


def _text(value: Any, what: str) -> str | None:
    """A field the answer is made of: text or absent, anything else is malformed."""
    raw = _raw_text(value, what)
    return None if raw is None else _whole(raw)


def _raw_text(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _Malformed(f"{what} is {_kind(value)}, not text")


def _side_text(value: Any) -> str | None:
    """Side information (reasoning, finish reason): a wrong type is dropped, not fatal."""
    return _whole(value) if isinstance(value, str) else None


def _whole(text: str) -> str:
    """``text`` with surrogate pairs joined and a lone surrogate as U+FFFD: JSON's
    ``"\\ud83d"`` is valid (a server emits one when a token cuts an emoji) but no
    character, and storing it failed the turn (found by review)."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _object(value: Any, what: str) -> dict[str, Any]:
    """An optional JSON object (absent or null: empty)."""
    return {} if value is None else _required_object(value, what)


def _required_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{what} is {_kind(value)}, not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    """An optional JSON array (absent or null: empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(f"{what} are {_kind(value)}, not a list")
    return value


def _kind(value: Any) -> str:
    """The JSON type of ``value``, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT


def _usage(raw: Any) -> Usage:
    """Token counts and cost; numbers of the wrong type or range are dropped (harmless)."""
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion, cost = (
        raw.get("prompt_tokens"),
        raw.get("completion_tokens"),
        raw.get("cost"),
    )
    return Usage(
        input_tokens=prompt if _is_count(prompt) else None,
        output_tokens=completion if _is_count(completion) else None,
        cost=_cost(cost),
    )


def _cost(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        cost = float(value)
    except OverflowError:  # an integer past the float range
        return None
    return cost if math.isfinite(cost) and cost >= 0 else None


#: How servers say a request is over the model's context window (OpenAI's code and
#: sentence, vLLM, llama.cpp, Ollama, LiteLLM, OpenRouter, Anthropic's and Gemini's
#: gateways), lower-cased.
CONTEXT_OVERFLOW_PHRASES = (
    "context_length_exceeded",
    "context length",
    "context window",
    "context size",
    "maximum context",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the maximum number of tokens",
)


def says_context_overflow(text: str) -> bool:
    """Whether an error's text says the request is over the model's context window."""
    lowered = text.lower()
    return any(phrase in lowered for phrase in CONTEXT_OVERFLOW_PHRASES)


def _seconds(retry_after: str | None) -> float | None:
    """``Retry-After`` in seconds (the number form; a date is not waited for)."""
    try:
        seconds = float(retry_after) if retry_after is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


def _error_text(text: str) -> str:
    """The server's own explanation from an OpenAI-style error body, else the raw text;
    a web page says it is one (its HTML reached the chat until 2026-12-07; found by
    review)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        if text.lstrip().startswith("<"):
            return "a web page, not an API's answer (is the base URL the API's, up to /v1?)"
        return _clip(text.strip()) or "(empty body)"
    if isinstance(data, list) and len(data) == 1:  # Gemini's: ``[{"error": {...}}]``
        data = data[0]
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail")
            if isinstance(message, str):
                return _clip(message)
        elif isinstance(error, str):
            return _clip(error)
    return _clip(text.strip())


#: What an endpoint that answers a bad key with a 400 says (Gemini: ``API_KEY_INVALID``):
#: the endpoint's refusal, the next model asked (until 2026-12-07 "the model rejected the
#: request", the fallback never asked; found by review).
_KEY_REFUSED = ("API_KEY_INVALID", "PERMISSION_DENIED", "UNAUTHENTICATED")


def _says_key_refused(text: str) -> bool:
    return any(reason in text for reason in _KEY_REFUSED)


#: How many ``timeout_s`` a stream may send keep-alive comments alone: a reasoning model
#: behind a gateway thinks for minutes while it says ``: PROCESSING`` (not forever).
KEEP_ALIVE_TIMEOUTS = 5
#: The statuses an endpoint refuses with whatever is asked (``LlmEndpointError``).
_ENDPOINT_REFUSALS = frozenset({401, 402, 403, 404})


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "…"


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
