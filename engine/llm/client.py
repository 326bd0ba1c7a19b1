"""A ``ChatModel`` over any OpenAI-compatible ``/chat/completions`` endpoint."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import httpx

from engine.config import ModelConfig
from engine.llm.types import (
    DeltaCallback,
    LlmConnectionError,
    LlmError,
    LlmProtocolError,
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


class OpenAICompatModel:
    """One configured model, called over a shared ``httpx.AsyncClient``.

    ``config.timeout_s`` bounds connecting and each read, so a server that stops
    sending halfway through a stream fails as ``LlmTimeout`` while a long but
    live stream is not cut off.
    """

    def __init__(self, config: ModelConfig, http: httpx.AsyncClient) -> None:
        self._config = config
        self._http = http
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
    def config(self) -> ModelConfig:
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
        except httpx.TimeoutException as exc:
            message = f"timed out after {self._config.timeout_s:g} s"
            raise self._error(LlmTimeout, message, exc) from exc
        except httpx.ConnectError as exc:
            raise self._error(LlmConnectionError, f"cannot connect to {self._url}", exc) from exc
        except httpx.TransportError as exc:
            # Dropped connections, broken chunked encoding: the endpoint, not the request.
            raise self._error(LlmConnectionError, "connection failed", exc) from exc

    async def _whole(self, payload: bytes, on_delta: DeltaCallback | None) -> LlmResponse:
        response = await self._http.post(
            self._url, content=payload, headers=self._headers, timeout=self._timeout
        )
        if response.status_code != 200:
            raise self._status_error(response.status_code, response.text)
        return self._from_body(response, on_delta)

    def _from_body(self, response: httpx.Response, on_delta: DeltaCallback | None) -> LlmResponse:
        try:
            data = response.json()
        except ValueError:
            raise self._protocol(f"body is not JSON: {_clip(response.text)!r}") from None
        result = self._parse_whole(data)
        if on_delta is not None and result.content:
            on_delta(result.content)
        return result

    def _parse_whole(self, data: Any) -> LlmResponse:
        try:
            return self._parse_choice(data)
        except (AttributeError, TypeError):  # a field of the wrong JSON type somewhere
            raise self._protocol(f"malformed completion: {_clip(json.dumps(data))!r}") from None

    def _parse_choice(self, data: Any) -> LlmResponse:
        if not isinstance(data, dict):
            raise self._protocol(f"body is not a JSON object: {_clip(str(data))!r}")
        choices = data.get("choices")
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            if data.get("error"):  # some gateways answer 200 with an error object
                raise self._body_error(data["error"])
            raise self._protocol(f"no choices in response: {_clip(json.dumps(data))!r}")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise self._protocol("choice has no message object")
        calls = []
        for raw in message.get("tool_calls") or ():
            fn = raw.get("function") or {}
            arguments = fn.get("arguments")
            if not isinstance(arguments, str):
                # A few servers send the arguments as an object instead of JSON text.
                arguments = "" if arguments is None else json.dumps(arguments)
            call_id = raw.get("id") or _new_id()
            calls.append(ToolCallRequest(call_id, fn.get("name") or "", arguments))
        return LlmResponse(
            content=message.get("content") or None,
            tool_calls=tuple(calls),
            reasoning_content=message.get("reasoning_content") or message.get("reasoning") or None,
            usage=_usage(data.get("usage")),
            model=self._config.name,
            finish_reason=choice.get("finish_reason"),
        )

    async def _streamed(self, payload: bytes, on_delta: DeltaCallback | None) -> LlmResponse:
        async with self._http.stream(
            "POST", self._url, content=payload, headers=self._headers, timeout=self._timeout
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise self._status_error(response.status_code, response.text)
            if response.headers.get("content-type", "").startswith("application/json"):
                # The server ignored ``stream``: take the whole answer.
                await response.aread()
                return self._from_body(response, on_delta)
            return await self._read_stream(response, on_delta)

    async def _read_stream(
        self, response: httpx.Response, on_delta: DeltaCallback | None
    ) -> LlmResponse:
        content: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        usage: Any = None
        finish_reason: str | None = None
        saw_choice = done = False
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank separators, ``: keep-alive`` comments, ``event:`` lines
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                raise self._protocol(f"bad stream chunk: {_clip(data)!r}") from None
            if not isinstance(chunk, dict):
                raise self._protocol(f"bad stream chunk: {_clip(data)!r}")
            if chunk.get("error"):  # OpenRouter-style failure after the stream began
                raise self._body_error(chunk["error"])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                delta = (choice.get("delta") or {}) if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    raise self._protocol(f"bad stream chunk: {_clip(data)!r}")
                saw_choice = True
                text = delta.get("content")
                if text:
                    content.append(text)
                    if on_delta is not None:
                        on_delta(text)
                thought = delta.get("reasoning_content") or delta.get("reasoning")
                if thought:
                    reasoning.append(thought)
                for position, part in enumerate(delta.get("tool_calls") or ()):
                    _merge_call(calls, part, position)
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
        if not saw_choice:
            raise self._protocol("stream carried no choices")
        if not done and finish_reason is None:
            raise self._protocol("stream ended before the answer was finished")
        return LlmResponse(
            content="".join(content) or None,
            tool_calls=tuple(
                ToolCallRequest(c[0] or _new_id(), c[1], c[2]) for _, c in sorted(calls.items())
            ),
            reasoning_content="".join(reasoning) or None,
            usage=_usage(usage),
            model=self._config.name,
            finish_reason=finish_reason,
        )

    def _status_error(self, status: int, text: str) -> LlmError:
        detail = f"HTTP {status}: {_error_text(text)}"
        if status == 429:
            kind: type[LlmError] = LlmRateLimited
        elif status == 408:
            kind = LlmTimeout
        elif status >= 500:
            kind = LlmServerError
        elif status >= 400:
            kind = LlmRequestError
        else:
            kind = LlmProtocolError
        return kind(f"{self._config.name}: {detail}", model=self._config.name, status=status)

    def _body_error(self, error: Any) -> LlmError:
        code = error.get("code") if isinstance(error, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 500
        return self._status_error(status, json.dumps({"error": error}))

    def _protocol(self, message: str) -> LlmProtocolError:
        return LlmProtocolError(f"{self._config.name}: {message}", model=self._config.name)

    def _error(self, kind: type[LlmError], message: str, cause: Exception) -> LlmError:
        return kind(f"{self._config.name}: {message} ({type(cause).__name__})", model=self.name)


def _merge_call(calls: dict[int, list[str]], part: Any, position: int) -> None:
    """Fold one streamed tool-call fragment into the call at its ``index``."""
    if not isinstance(part, dict):
        return
    index = part.get("index", position)
    slot = calls.get(index)
    if slot is None:
        slot = calls[index] = ["", "", ""]
    if part.get("id") and not slot[0]:
        slot[0] = part["id"]  # some servers repeat the id on every fragment
    fn = part.get("function") or {}
    name = fn.get("name")
    if name and name != slot[1]:  # likewise a repeated name must not double
        slot[1] += name
    arguments = fn.get("arguments")
    if arguments:
        slot[2] += arguments if isinstance(arguments, str) else json.dumps(arguments)


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    cost = raw.get("cost")
    return Usage(
        input_tokens=raw.get("prompt_tokens"),
        output_tokens=raw.get("completion_tokens"),
        cost=float(cost) if isinstance(cost, int | float) else None,
    )


def _error_text(text: str) -> str:
    """The server's own explanation from an OpenAI-style error body, else the raw text."""
    try:
        data = json.loads(text)
    except ValueError:
        return _clip(text.strip()) or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail")
            if isinstance(message, str):
                return _clip(message)
        elif isinstance(error, str):
            return _clip(error)
    return _clip(text.strip())


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "…"


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
