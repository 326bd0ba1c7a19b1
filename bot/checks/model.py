"""The model endpoint: is it there, which models does it list, can a model call tools.

``list_models`` is ``GET <base>/models`` (every OpenAI-compatible server we know answers
it: Ollama, LM Studio, vLLM, llama.cpp's server, OpenRouter, OpenAI). ``check_tool_calling``
is one real chat completion offering one tool, through the engine's own client
(``OpenAICompatModel``), so it exercises exactly the request and parser a turn uses.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import httpx

from bot.checks.result import Problem
from engine.config import ModelConfig, http_url
from engine.llm import (
    LlmConnectionError,
    LlmEndpointError,
    LlmError,
    LlmRequestError,
    LlmTimeout,
    OpenAICompatModel,
)
from providers import UNSENDABLE

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Endpoint",
    "ToolCalling",
    "check_tool_calling",
    "list_models",
    "normalize_base_url",
]

log = logging.getLogger(__name__)

#: Long enough for a local server loading a model into memory for the tool call.
DEFAULT_TIMEOUT_S = 60.0

_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "IANA name"}},
            "required": ["timezone"],
        },
    },
}
_MESSAGES = [
    {"role": "system", "content": "You answer by calling tools. Always use a tool when one fits."},
    {"role": "user", "content": "What time is it in Europe/Rome? Use the get_time tool."},
]


@dataclass(frozen=True, slots=True)
class Endpoint:
    base_url: str
    api_key: str = ""

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True, slots=True)
class ToolCalling:
    """Whether the model called the offered tool; ``sentence`` says what happened."""

    works: bool
    sentence: str


def normalize_base_url(text: str) -> str:
    """A base URL as typed into one we can call; ``Problem`` (kind ``bad_url``) otherwise.

    A bare ``http://host:port`` gets ``/v1``: that is where every local server we know
    serves the OpenAI API, and people often copy the address without it.
    """
    url = text.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Problem(
            f"{text.strip() or 'an empty address'!r} is not a URL: it must start with "
            "http:// or https:// (for example http://127.0.0.1:11434/v1)",
            kind="bad_url",
        )
    if not parts.path:
        url += "/v1"
    try:  # a port or bracket mistyped (it ended setup with a traceback; found by review)
        return http_url(url)
    except ValueError as exc:
        raise Problem(str(exc), kind="bad_url") from None


async def list_models(http: httpx.AsyncClient, endpoint: Endpoint, timeout_s: float) -> list[str]:
    """The model ids the endpoint lists, in its order; ``Problem`` with a plain sentence."""
    url = endpoint.base_url.rstrip("/") + "/models"
    try:
        # The whole answer within the time: httpx's timeout is per read, and a server
        # that drips its answer held setup and the doctor for as long (found by review).
        async with asyncio.timeout(timeout_s):
            response = await http.get(url, headers=endpoint.headers(), timeout=timeout_s)
    except (httpx.TimeoutException, TimeoutError):
        raise Problem(
            f"{endpoint.base_url} did not answer within {timeout_s:g} s", kind="timeout"
        ) from None
    except httpx.HTTPError as exc:  # refused, DNS, TLS, dropped connection
        log.info("GET %s failed: %s: %s", url, type(exc).__name__, exc)
        raise Problem(f"nothing answers at {endpoint.base_url}", kind="unreachable") from None
    except UNSENDABLE as exc:
        log.info("GET %s refused: %s: %s", url, type(exc).__name__, exc)
        raise Problem(
            f"{endpoint.base_url} is not an address that can be called", kind="bad_url"
        ) from None
    if response.status_code in (401, 403):
        said = "needs an API key" if not endpoint.api_key else "refused the API key"
        raise Problem(
            f"{endpoint.base_url} {said} (HTTP {response.status_code})",
            kind="auth",
            fix="set LLM_API_KEY to a key this endpoint accepts",
        )
    if response.status_code == 404:
        raise Problem(
            f"{endpoint.base_url} has no model listing (HTTP 404): the OpenAI-compatible "
            "base URL usually ends in /v1",
            kind="not_found",
        )
    if response.status_code != 200:
        raise Problem(f"{endpoint.base_url} answered HTTP {response.status_code}", kind="status")
    try:
        data = response.json()
    except (ValueError, RecursionError):
        log.info("GET %s: not JSON: %r", url, response.text[:300])
        raise Problem(
            f"{endpoint.base_url} answers with a web page, not the OpenAI API: the base URL "
            "usually ends in /v1",
            kind="not_json",
        ) from None
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise Problem(f"{endpoint.base_url} did not send a model listing", kind="not_json")
    return [e["id"] for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]


async def check_tool_calling(
    http: httpx.AsyncClient, model: ModelConfig, timeout_s: float
) -> ToolCalling:
    """One chat completion offering ``get_time``: did the model call it?

    A model that answers in text, or an endpoint that refuses ``tools`` (HTTP 400), is a
    verdict (``works=False``); an endpoint that cannot be asked at all (down, timeout,
    refused key) is a ``Problem``: we could not find out.
    """
    client = OpenAICompatModel(replace(model, timeout_s=timeout_s), http)
    try:
        answer = await client.complete(_MESSAGES, [_TOOL])
    except (LlmRequestError, LlmEndpointError) as exc:  # an endpoint's refusal: 401, 403, 404
        if exc.status in (401, 403):
            raise Problem(
                f"{model.base_url} refused the API key (HTTP {exc.status})",
                kind="auth",
                fix="set LLM_API_KEY to a key this endpoint accepts",
            ) from None
        if exc.status == 404:
            raise Problem(
                f"{model.base_url} does not know the model {model.name!r} (HTTP 404)",
                kind="not_found",
            ) from None
        log.info("tool-call check for %s: %s (%s)", model.name, exc, exc.detail)
        return ToolCalling(False, f"{model.name} refused a request with tools ({exc})")
    except LlmTimeout:
        raise Problem(
            f"{model.name} did not answer within {timeout_s:g} s", kind="timeout"
        ) from None
    except LlmConnectionError:
        raise Problem(f"nothing answers at {model.base_url}", kind="unreachable") from None
    except LlmError as exc:
        log.info("tool-call check for %s: %s (%s)", model.name, exc, exc.detail)
        raise Problem(f"{model.name} could not be asked: {exc}", kind="error") from None
    if any(call.name == "get_time" for call in answer.tool_calls):
        return ToolCalling(True, f"{model.name} calls tools")
    return ToolCalling(
        False,
        f"{model.name} answered in text instead of calling the tool it was offered: "
        "chathub's tools (files, shell, schedules) will not work with it",
    )
