"""The HTTP app of ``chathub serve``, assembled from the running service's parts.

``chathub serve`` imports this module on its own, in a worker thread, once Telegram
polling has begun: Starlette, the API's models, the inbox and uvicorn cost about 0.2 s
and 15 MB of imports that no message has to wait for.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import uvicorn
from starlette.routing import BaseRoute, Route, Router, WebSocketRoute
from starlette.types import Receive, Scope, Send

from bot.checks.result import Check
from bot.completions import SOURCE_PREFIX as API_PREFIX
from bot.completions import CompletionsApi, ExchangeLimits, talkable_agents
from bot.delivery import OutboundStats
from bot.http.api import ApiRoutes
from bot.http.app import (
    EventsEndpoint,
    Health,
    TelegramWebhook,
    create_app,
    one_route_per_path,
)
from bot.http.health_details import HealthDetails
from bot.http.operations import Operations
from bot.http.signins import LoginThrottle, SignInPolicy, SignIns
from bot.http.web import Deliveries, WebInbox
from bot.platform.voice_notes import VoiceNotes
from bot.settings import Settings
from bot.webchat.layer import SOURCE_PREFIX as WEB_CHAT_PREFIX
from bot.webchat.limits import MAX_FRAME_BYTES as MAX_WEB_CHAT_FRAME_BYTES
from engine.core import Engine
from engine.hub import ChatHub
from engine.store import Database
from memory.service import MemoryService
from providers import ProviderRegistry
from scheduler.service import Scheduler

__all__ = ["HttpParts", "ListeningServer", "http_server"]


class ListeningServer(uvicorn.Server):
    """``uvicorn.Server`` that says when its socket is bound (``listening``) and ends the
    app's own tasks (``closing``: the web chat's) after its connections have closed."""

    def __init__(
        self, config: uvicorn.Config, closing: Sequence[Callable[[], Awaitable[None]]] = ()
    ) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()
        self._closing = tuple(closing)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        for close in self._closing:
            await close()


class LazyChat:
    """The web chat, built on its first request (``/chat...``, ``/ws/chat``): its frames'
    models, the page and the socket code (~1.5 MB) load then, in a worker thread, not with
    every service that may never see a browser."""

    def __init__(
        self,
        hub: ChatHub,
        db: Database,
        token: str | None,
        signins: SignIns | None,
        throttle: LoginThrottle,
        memory: MemoryService | None = None,
        voice: VoiceNotes | None = None,
    ) -> None:
        """``db``: where the web chat keeps its conversations; ``voice``: the service's
        voice notes, which hear the page's voice messages."""
        self._hub, self._db, self._token = hub, db, token
        self._signins, self._throttle = signins, throttle
        self._memory = memory
        self._voice = voice
        if hub.relay is not None:  # in a fleet its sockets watch turns of any process
            hub.relay.relay_only(WEB_CHAT_PREFIX)
        self._router: Router | None = None
        self._close: Callable[[], Awaitable[None]] | None = None
        self._building = asyncio.Lock()

    @property
    def token(self) -> str | None:
        return self._token

    def routes(self) -> list[BaseRoute]:
        return [Route("/chat{rest:path}", self), WebSocketRoute("/ws/chat", self)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        router = self._router or await self._build()
        await router(scope, receive, send)

    async def close(self) -> None:
        if self._close is not None:
            await self._close()

    async def _build(self) -> Router:
        async with self._building:
            if self._router is None:
                built = await asyncio.to_thread(importlib.import_module, "bot.webchat.serving")
                webchat = built.web_chat(
                    self._hub,
                    self._db,
                    self._token,
                    self._signins,
                    self._throttle,
                    self._memory,
                    voice=self._voice,
                )
                self._close = webchat.close
                # Every method of a path in its 405's Allow, as the rest of the app's.
                self._router = Router(routes=one_route_per_path(webchat.routes()))
        return self._router


@dataclass(frozen=True, slots=True)
class HttpParts:
    """What the app serves, from the service that runs it."""

    settings: Settings
    engine: Engine
    hub: ChatHub
    scheduler: Scheduler
    clock: Callable[[], datetime]
    health: Health
    #: The doctor's checks, for the inbox's Health page and the API's details.
    run_checks: Callable[[], Awaitable[Sequence[Check]]]
    webhook: TelegramWebhook | None = None
    #: The web inbox's "deliveries waiting" (Telegram's outbox), when Telegram runs.
    deliveries: Deliveries | None = None
    telegram_stats: OutboundStats | None = None
    #: Long-term memory (``None`` when MEMORY_ENABLED is off): commands, pages, API.
    memory: MemoryService | None = None
    #: Where platforms receive over HTTP (Slack's Events API), each verifying its own.
    receivers: Sequence[BaseRoute] = ()
    #: The API provider registry (``/api/providers``).
    providers: ProviderRegistry | None = None
    #: Voice notes heard (the web chat's microphone), one path for every platform.
    voice: VoiceNotes | None = None


async def http_server(parts: HttpParts) -> ListeningServer:
    """The app on ``HTTP_HOST:HTTP_PORT``, not yet serving (``Server.serve`` starts it)."""
    settings = parts.settings
    operations = Operations(parts.engine, parts.hub, parts.scheduler)
    # ApiRoutes checks the token before the doctor's checks run.
    details = HealthDetails(parts.run_checks, lambda _request: True)
    token = settings.chathub_api_token
    signins = None
    # Wrong tokens count together on the page's sign-in and the API's bearer header:
    # guessing the token through one is as slow as through the other.
    throttle = LoginThrottle(clock=parts.clock)
    if token:  # without a token nobody signs in (loopback only)
        policy = SignInPolicy(
            idle=timedelta(hours=settings.web_session_idle_hours),
            absolute=timedelta(days=settings.web_session_max_days),
        )
        signins = SignIns(parts.engine.store.db, token=token, policy=policy, clock=parts.clock)
        await signins.purge()  # rows of an old token or long expired go at start-up
    webchat = LazyChat(
        parts.hub, parts.engine.store.db, token, signins, throttle, parts.memory, parts.voice
    )
    if parts.hub.relay is not None:  # in a fleet a request follows a turn on any process
        parts.hub.relay.relay_only(API_PREFIX)
    agents = talkable_agents(parts.engine.agents)
    completions = CompletionsApi(
        parts.hub,
        parts.engine.store.db,
        lambda: agents,
        token=token,
        throttle=throttle,
        limits=ExchangeLimits(decision_wait_s=settings.openai_api_decision_wait_seconds),
    )
    app = create_app(
        webhook=parts.webhook,
        webhook_url=settings.telegram_webhook_url,
        receivers=parts.receivers,
        health=parts.health,
        events=EventsEndpoint(parts.scheduler.tic.events, token, throttle),
        api=ApiRoutes(
            operations,
            token=token,
            clock=parts.clock,
            telegram=parts.telegram_stats,
            throttle=throttle,
            health_details=details,
            memory=parts.memory,
            providers=parts.providers,
        ),
        web=WebInbox(
            operations,
            token=token,
            signins=signins,
            throttle=throttle,
            clock=parts.clock,
            deliveries=parts.deliveries,
            health=details,
            memory=parts.memory,
            providers=parts.providers,
        ),
        webchat=webchat,
        completions=completions,
        host=settings.http_host,
    )
    config = uvicorn.Config(
        app,
        host=settings.http_host,
        port=settings.http_port,
        log_level="warning",
        # uvicorn's records go to the root logger's handlers (a file while the terminal
        # chat runs): its own stderr handler printed them into the chat until 2026-12-06.
        log_config=None,
        # A bigger frame is refused by the socket layer itself (1009) before it is buffered.
        ws_max_size=2 * MAX_WEB_CHAT_FRAME_BYTES,
    )
    return ListeningServer(config, closing=[webchat.close])
