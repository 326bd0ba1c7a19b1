"""The Starlette app served by uvicorn on ``HTTP_HOST``/``HTTP_PORT``."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlparse

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bot.http.api import ApiRoutes
from bot.http.models import EventIn, RequestError, json_body, parse_json, read_body
from bot.http.web import WebInbox
from bot.telegram.poller import UpdateSink
from bot.telegram.store import TelegramStore
from scheduler.events import EventStore

__all__ = [
    "DEFAULT_WEBHOOK_PATH",
    "LOOPBACK_HOSTS",
    "ApiExposureError",
    "ApiRoutes",
    "TelegramWebhook",
    "WebInbox",
    "check_api_exposure",
    "create_app",
    "webhook_path",
]

log = logging.getLogger(__name__)

DEFAULT_WEBHOOK_PATH = "/telegram/webhook"
SECRET_HEADER = "x-telegram-bot-api-secret-token"
MAX_UPDATE_BYTES = 1024 * 1024
#: Without ``CHATHUB_API_TOKEN`` the API only serves on these.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})

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
        if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
            return JSONResponse({"error": "not an update (no integer update_id)"}, status_code=400)
        for fresh in await self.store.record_updates([update]):
            self.sink.submit(fresh)
        return JSONResponse({"ok": True})


class EventsEndpoint:
    """``POST /api/events``: an event for the tic (bearer ``CHATHUB_API_TOKEN``)."""

    MAX_BYTES = 256 * 1024

    def __init__(self, events: EventStore, token: str | None) -> None:
        self.events = events
        self._token = token.encode() if token else None

    async def handle(self, request: Request) -> JSONResponse:
        if self._token is not None:
            given = request.headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not secrets.compare_digest(
                value.encode(), self._token
            ):
                return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
        try:
            event = await json_body(request, EventIn, limit=self.MAX_BYTES)
        except RequestError as bad:
            return bad.response()
        event_id = await self.events.add(event.source, event.type, event.payload)
        return JSONResponse({"id": event_id}, status_code=201)


class ApiExposureError(ValueError):
    """The API would be reachable beyond this machine without a token."""


def check_api_exposure(host: str, token: str | None) -> None:
    """Without ``CHATHUB_API_TOKEN`` the API is served on loopback only."""
    if not token and host not in LOOPBACK_HOSTS:
        raise ApiExposureError("CHATHUB_API_TOKEN: required when HTTP_HOST is not 127.0.0.1")


def create_app(
    *,
    webhook: TelegramWebhook | None = None,
    webhook_url: str | None = None,
    health: Health | None = None,
    events: EventsEndpoint | None = None,
    api: ApiRoutes | None = None,
    web: WebInbox | None = None,
    host: str = "127.0.0.1",
) -> Starlette:
    """The app; with ``api`` or ``web`` and no token it refuses to serve beyond loopback."""
    if api is not None:
        check_api_exposure(host, api.token)
    if web is not None:
        check_api_exposure(host, web.token)
    routes: list[Route] = []
    if api is not None:
        routes.extend(api.routes())
    if web is not None:
        routes.extend(web.routes())
    if events is not None:
        routes.append(Route("/api/events", events.handle, methods=["POST"]))
    if webhook is not None:
        routes.append(Route(webhook_path(webhook_url), webhook.handle, methods=["POST"]))

    async def healthz(_request: Request) -> JSONResponse:
        report = await health() if health is not None else {"ok": True}
        return JSONResponse(report, status_code=200 if report.get("ok") else 503)

    routes.append(Route("/healthz", healthz, methods=["GET"]))
    return Starlette(routes=routes)
