"""The Starlette app served by uvicorn on ``HTTP_HOST``/``HTTP_PORT``."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlparse

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bot.telegram.poller import UpdateSink
from bot.telegram.store import TelegramStore

__all__ = ["DEFAULT_WEBHOOK_PATH", "TelegramWebhook", "create_app", "webhook_path"]

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
        body = await request.body()
        if len(body) > MAX_UPDATE_BYTES:
            return JSONResponse({"error": "update too large"}, status_code=413)
        try:
            update = json.loads(body)
        except ValueError:
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
            return JSONResponse({"error": "not an update (no integer update_id)"}, status_code=400)
        for fresh in await self.store.record_updates([update]):
            self.sink.submit(fresh)
        return JSONResponse({"ok": True})


def create_app(
    *,
    webhook: TelegramWebhook | None = None,
    webhook_url: str | None = None,
    health: Health | None = None,
) -> Starlette:
    routes = []
    if webhook is not None:
        routes.append(Route(webhook_path(webhook_url), webhook.handle, methods=["POST"]))

    async def healthz(_request: Request) -> JSONResponse:
        report = await health() if health is not None else {"ok": True}
        return JSONResponse(report, status_code=200 if report.get("ok") else 503)

    routes.append(Route("/healthz", healthz, methods=["GET"]))
    return Starlette(routes=routes)
