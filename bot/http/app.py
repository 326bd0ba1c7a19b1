"""The Starlette app served by uvicorn on ``HTTP_HOST``/``HTTP_PORT``."""

from __future__ import annotations

import inspect
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlparse

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.checks.exposure import check_api_exposure
from bot.http.api import ApiRoutes, operation, refused
from bot.http.credentials import Throttle, bearer_refusal
from bot.http.models import (
    MAX_ID,
    EventIn,
    RequestError,
    SafeJSONResponse,
    json_body,
    parse_json,
    read_body,
)
from bot.http.web import WebInbox
from bot.telegram.inbound.poller import UpdateSink
from bot.telegram.store import TelegramStore
from scheduler.events import EventStore


class ChatPart(Protocol):
    """A chat front end's part of the app (``bot.webchat.transport.WebChat``, or a
    stand-in that builds it on first use; ``bot.completions.CompletionsApi``): its routes,
    and the token it is behind."""

    @property
    def token(self) -> str | None: ...

    def routes(self) -> list[BaseRoute]: ...


__all__ = [
    "DEFAULT_WEBHOOK_PATH",
    "InternalErrors",
    "TelegramWebhook",
    "create_app",
    "webhook_path",
]

log = logging.getLogger(__name__)

DEFAULT_WEBHOOK_PATH = "/telegram/webhook"
SECRET_HEADER = "x-telegram-bot-api-secret-token"
MAX_UPDATE_BYTES = 1024 * 1024

Health = Callable[[], Awaitable[dict[str, Any]]]


def webhook_path(url: str | None) -> str:
    """The path of ``TELEGRAM_WEBHOOK_URL`` this app serves (a default for a bare host)."""
    path = urlparse(url or "").path
    return path if path and path != "/" else DEFAULT_WEBHOOK_PATH


class TelegramWebhook:
    """Telegram POSTs updates here; each is stored (deduplicated) before the 200."""

    def __init__(self, store: TelegramStore, sink: UpdateSink, secret: str) -> None:
        if not secret:
            raise ValueError("TELEGRAM_WEBHOOK_SECRET: required in webhook mode")
        self.store = store
        self.sink = sink
        self._secret = secret.encode()

    async def handle(self, request: Request) -> JSONResponse:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not secrets.compare_digest(given, self._secret):
            return JSONResponse({"error": "wrong or missing secret token"}, status_code=401)
        try:
            # Telegram escapes a lone surrogate and such text travels on (a chat may hold one).
            update = parse_json(await read_body(request, MAX_UPDATE_BYTES), surrogates=True)
        except RequestError as bad:
            return JSONResponse(
                {"error": bad.message}, status_code=413 if bad.status == 413 else 400
            )
        if not isinstance(update, dict) or not _is_update_id(update.get("update_id")):
            return JSONResponse({"error": "not an update (no integer update_id)"}, status_code=400)
        for fresh in await self.store.record_updates([update]):
            self.sink.submit(fresh)
        return JSONResponse({"ok": True})


def _is_update_id(value: Any) -> bool:
    """An integer (not a boolean) that fits the database's 64-bit column."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_ID


class EventsEndpoint:
    """``POST /api/events``: an event for the tic (bearer ``CHATHUB_API_TOKEN``)."""

    MAX_BYTES = 256 * 1024

    def __init__(
        self, events: EventStore, token: str | None, throttle: Throttle | None = None
    ) -> None:
        """``throttle``: wrong tokens counted per address with the API's and the inbox's."""
        self.events = events
        self._token = token.encode() if token else None
        self._throttle = throttle

    async def handle(self, request: Request) -> JSONResponse:
        refusal = bearer_refusal(request, self._token, self._throttle)
        if refusal is not None:
            return refused(refusal)
        try:
            event = await json_body(request, EventIn, limit=self.MAX_BYTES)
        except RequestError as bad:
            return bad.response()
        event_id = await self.events.add(event.source, event.type, event.payload)
        return JSONResponse({"id": event_id}, status_code=201)


class InternalErrors:
    """An exception no route handled: logged with an id, answered 500 with one sentence.

    JSON ``{"error": "internal error (id …)"}`` everywhere but on the page's routes
    (``pages``), which get the same sentence as plain text. The exception's text and
    traceback go to the log only. An exception after the answer started is logged and the
    connection ends (nothing more can be said); a client that left while its body was
    read is no error.
    """

    def __init__(self, app: ASGIApp, *, pages: list[Route] | tuple[Route, ...] = ()) -> None:
        self.app = app
        self.pages = tuple(pages)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except ClientDisconnect:  # gone while its body was read: nobody is left to answer
            log.info("client left during %s %s", scope.get("method"), scope.get("path"))
        except Exception:
            error_id = secrets.token_hex(6)
            log.exception(
                "internal error %s on %s %s", error_id, scope.get("method"), scope.get("path")
            )
            if not started:
                await self._answer(scope, error_id)(scope, receive, send)

    def _answer(self, scope: Scope, error_id: str) -> Response:
        sentence = f"internal error (id {error_id})"
        if any(route.matches(scope)[0] is not Match.NONE for route in self.pages):
            return PlainTextResponse(f"Sorry, an {sentence}.", status_code=500)
        if str(scope.get("path", "")).startswith("/v1/"):  # OpenAI's clients read this shape
            error = {"message": f"An {sentence}.", "type": "server_error", "param": None}
            return JSONResponse({"error": {**error, "code": "internal_error"}}, status_code=500)
        return JSONResponse({"error": sentence}, status_code=500)


def create_app(
    *,
    webhook: TelegramWebhook | None = None,
    webhook_url: str | None = None,
    health: Health | None = None,
    events: EventsEndpoint | None = None,
    api: ApiRoutes | None = None,
    web: WebInbox | None = None,
    webchat: ChatPart | None = None,
    completions: ChatPart | None = None,
    receivers: Sequence[BaseRoute] = (),
    host: str = "127.0.0.1",
) -> Starlette:
    """The app; with ``api``, ``web`` or ``webchat`` and no token it refuses to serve beyond
    loopback."""
    if api is not None:
        check_api_exposure(host, api.token)
    if web is not None:
        check_api_exposure(host, web.token)
    if webchat is not None:
        check_api_exposure(host, webchat.token)
    if completions is not None:
        check_api_exposure(host, completions.token)
    routes: list[BaseRoute] = []
    pages: list[Route] = web.routes() if web is not None else []
    if completions is not None:  # /v1, the OpenAI-compatible API: first, on its hot path
        routes.extend(completions.routes())
    if api is not None:
        routes.extend(api.routes())
    routes.extend(pages)
    if webchat is not None:
        routes.extend(webchat.routes())
    if events is not None:
        routes.append(_route("post_event", events.handle))
    if webhook is not None:
        routes.append(Route(webhook_path(webhook_url), webhook.handle, methods=["POST"]))
    routes.extend(receivers)

    async def healthz(_request: Request) -> JSONResponse:
        report = await health() if health is not None else {"ok": True}
        return SafeJSONResponse(report, status_code=200 if report.get("ok") else 503)

    routes.append(_route("healthz", healthz))
    return Starlette(
        routes=one_route_per_path(routes),
        middleware=[Middleware(InternalErrors, pages=pages)],
        exception_handlers={404: _not_routed, 405: _not_routed},
    )


_NOT_ROUTED = {404: "no such route", 405: "method not allowed on this route"}


def one_route_per_path(routes: Sequence[BaseRoute]) -> list[BaseRoute]:
    """The routes of one path (a method each) as one route: Starlette answers a method no
    route takes from the first route of the path, and its 405 named that route's methods
    only (``PUT /login`` said ``Allow: GET, HEAD``; found by review on 2026-12-06)."""
    by_path: dict[str, list[Route]] = {}
    for route in routes:
        if isinstance(route, Route):
            by_path.setdefault(route.path, []).append(route)
    merged: list[BaseRoute] = []
    for route in routes:
        if not isinstance(route, Route):
            merged.append(route)
            continue
        same = by_path.pop(route.path, None)
        if same is None:
            continue  # merged with the path's first route
        if len(same) == 1 or not all(_answers_requests(r.endpoint) for r in same):
            merged.extend(same)
            continue
        endpoints = {method: r.endpoint for r in same for method in r.methods or ()}
        merged.append(
            Route(route.path, _by_method(endpoints), methods=list(endpoints), name=route.name)
        )
    return merged


def _answers_requests(endpoint: Any) -> bool:
    """A request-to-response function (not an ASGI app), as Starlette tells them."""
    return inspect.isfunction(endpoint) or inspect.ismethod(endpoint)


def _by_method(
    endpoints: dict[str, Callable[[Request], Awaitable[Response]]],
) -> Callable[[Request], Awaitable[Response]]:
    async def dispatch(request: Request) -> Response:
        return await endpoints[request.method](request)

    return dispatch


async def _not_routed(request: Request, exc: Exception) -> Response:
    """No route took the request: JSON under ``/api/`` (``ErrorBody``), plain text elsewhere."""
    assert isinstance(exc, HTTPException)
    if request.url.path.startswith("/api/"):
        return JSONResponse(
            {"error": _NOT_ROUTED[exc.status_code]},
            status_code=exc.status_code,
            headers=exc.headers,
        )
    return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)


def _route(name: str, endpoint: Callable[[Request], Awaitable[JSONResponse]]) -> Route:
    """The route of the documented operation ``name`` (``bot.http.api.OPERATIONS``)."""
    spec = operation(name)
    return Route(spec.path, endpoint, methods=[spec.method], name=name)
