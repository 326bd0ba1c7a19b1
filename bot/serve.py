"""``chathub serve``: the engine, the hub, the HTTP app, Telegram or the terminal.

Start order matters: the Telegram adapter subscribes to the hub before the hub recovers,
so answers to turns resumed at start reach their chats. Shutdown leaves turns in flight
as a crash would (they resume at the next start): an accepted message is in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import uvicorn

from bot.http.app import (
    ApiRoutes,
    EventsEndpoint,
    TelegramWebhook,
    WebInbox,
    check_api_exposure,
    create_app,
)
from bot.http.operations import Operations
from bot.telegram.adapter import TelegramAdapter, TelegramConfig
from bot.telegram.api import BotApi
from bot.telegram.jobs import JobsPanel
from bot.telegram.outbound import Outbound, Pacing
from bot.telegram.poller import Poller
from bot.telegram.store import TelegramStore
from engine.config import AppConfig
from engine.core import Engine
from engine.hub import ChatHub
from engine.llm.registry import ModelRegistry
from engine.session.gate import ApprovalPolicy
from engine.store.schema import utcnow
from scheduler.service import Scheduler, SchedulerLimits
from scheduler.tools import scheduler_tools

__all__ = ["Service", "serve"]

log = logging.getLogger(__name__)

SHUTDOWN_S = 10.0


@dataclass
class Service:
    config: AppConfig
    models: ModelRegistry | None = None
    policy: ApprovalPolicy | None = None
    api: BotApi | None = None
    pacing: Pacing | None = None
    http: bool = True
    engine: Engine | None = None
    hub: ChatHub | None = None
    scheduler: Scheduler | None = None
    clock: Callable[[], datetime] = utcnow
    adapter: TelegramAdapter | None = None
    poller: Poller | None = None
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _server: uvicorn.Server | None = None

    async def start(self) -> None:
        settings = self.config.settings
        if self.http:  # refuse before anything starts: an open API needs a token
            check_api_exposure(settings.http_host, settings.chathub_api_token)
        self.engine = engine = await Engine.open(
            self.config, models=self.models, policy=self.policy
        )
        owner = settings.telegram_owner_id
        self.hub = hub = ChatHub(
            engine, self.config.hub, default_home=f"telegram:{owner}" if owner else "console"
        )
        self.scheduler = scheduler = Scheduler(
            engine,
            hub,
            timezone=settings.chathub_timezone,
            limits=SchedulerLimits(
                max_jobs_per_source=settings.scheduler_max_jobs_per_source,
                min_period_s=settings.scheduler_min_period_seconds,
            ),
            clock=self.clock,
            tic_interval_s=settings.tic_interval_seconds,
        )
        for tool in scheduler_tools(scheduler):
            engine.tools.register(tool)
        webhook = None
        if self.api is None and settings.telegram_bot_token:
            from bot.telegram.bindings.factory import make_bot_api

            self.api = make_bot_api(
                settings.telegram_library, settings.telegram_bot_token, settings.telegram_api_url
            )
        if self.api is not None:
            store = TelegramStore(engine.store.db)
            self.adapter = TelegramAdapter(
                hub,
                self.api,
                store,
                Outbound(self.api, store, self.pacing),
                TelegramConfig(
                    allowed_user_ids=frozenset(settings.telegram_allowed_user_ids),
                    owner_id=owner,
                    workspace=engine.workspace.root,
                    streaming=settings.telegram_streaming,
                ),
                jobs=JobsPanel(scheduler),
            )
            await self.adapter.start()
            if settings.telegram_webhook_url:
                secret = settings.telegram_webhook_secret or ""
                webhook = TelegramWebhook(store, self.adapter, secret)
                for update in await store.unhandled():  # stored before a crash, not handled
                    self.adapter.submit(update)
                await self.api.set_webhook(settings.telegram_webhook_url, secret_token=secret)
            else:
                self.poller = Poller(self.api, store, self.adapter)
                self._tasks.append(asyncio.create_task(self.poller.run(), name="tg-poller"))
        await hub.start()
        await scheduler.start()
        if self.http:
            operations = Operations(engine, hub, scheduler)
            app = create_app(
                webhook=webhook,
                webhook_url=settings.telegram_webhook_url,
                health=self.health,
                events=EventsEndpoint(scheduler.tic.events, settings.chathub_api_token),
                api=ApiRoutes(
                    operations,
                    token=settings.chathub_api_token,
                    clock=self.clock,
                    telegram=self.adapter.outbound.stats if self.adapter else None,
                ),
                web=WebInbox(operations, token=settings.chathub_api_token, clock=self.clock),
                host=settings.http_host,
            )
            server_config = uvicorn.Config(
                app, host=settings.http_host, port=settings.http_port, log_level="warning"
            )
            self._server = uvicorn.Server(server_config)
            self._tasks.append(asyncio.create_task(self._server.serve(), name="http"))

    async def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {"ok": True}
        try:
            assert self.engine is not None
            await self.engine.store.db.run(lambda conn: conn.execute(sa.text("SELECT 1")))
            report["database"] = "ok"
        except Exception as exc:
            report.update(ok=False, database=f"unreachable: {type(exc).__name__}")
        if self.poller is not None:
            report["telegram_last_poll_age_s"] = self.poller.age()
        if self.scheduler is not None:
            last = self.scheduler.dispatcher.last_step_at
            report["scheduler_last_step"] = last.isoformat() if last else None
        return report

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        for task in self._tasks:
            if task.get_name() != "http":
                task.cancel()
        if self.scheduler is not None:
            await self.scheduler.close()
        if self.adapter is not None:
            await self.adapter.close()
        if self.hub is not None:
            await self.hub.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.api is not None:
            await self.api.close()
        if self.engine is not None:
            await self.engine.close()


def freeze_startup_objects() -> None:
    """Keep what start-up built (modules, classes, schemas) out of later collections.

    Those ~150-300k objects live as long as the process; a full collection scanning them
    paused the event loop for 80-220 ms here (a stall in every chat's reply). Collect
    once, then freeze the survivors.
    """
    gc.collect()
    gc.freeze()


async def serve(config: AppConfig) -> None:
    """Run until SIGINT/SIGTERM (or, with the terminal chat, until it ends)."""
    service = Service(config)
    await service.start()
    freeze_startup_objects()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    terminal: asyncio.Task[None] | None = None
    if service.adapter is None and sys.stdin.isatty():
        from bot.terminal import TerminalChat

        assert service.engine is not None
        terminal = asyncio.create_task(TerminalChat(service.engine).run())
        terminal.add_done_callback(lambda _t: stop.set())
    if service.adapter is None and terminal is None:
        log.warning("TELEGRAM_BOT_TOKEN is not set and stdin is not a terminal: HTTP only")
    await stop.wait()
    if terminal is not None and not terminal.done():
        terminal.cancel()
    try:
        await asyncio.wait_for(service.stop(), SHUTDOWN_S)
    except TimeoutError:
        log.error("shutdown took longer than %.0f s; exiting anyway", SHUTDOWN_S)
