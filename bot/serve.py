"""``chathub serve``: the engine, the hub, the HTTP app, Telegram or the terminal.

Start order matters: the Telegram adapter subscribes to the hub before the hub recovers,
so answers to turns resumed at start reach their chats. That subscription needs no
Telegram call; reaching Telegram (getMe, setMyCommands, deleteWebhook or setWebhook, then
polling) runs in the background with retries (``bot/telegram/startup.py``), so a Telegram
outage at start holds up neither the hub, the scheduler nor the HTTP app, and ``/healthz``
says ``telegram: starting | ok | failing`` meanwhile. Only a definitive refusal (401, 404)
stops the service: one line, exit status 1. Shutdown leaves turns in flight as a crash
would (they resume at the next start): an accepted message is in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import secrets
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import sqlalchemy as sa

from bot.checks.exposure import check_api_exposure
from bot.checks.result import Check
from bot.delivery import (
    Outbound,
    Pacing,
    Redelivery,
    RetrySchedule,
    delivery_summary,
    recover_orphans_forever,
)
from bot.fleet.bot_identity import OtherBot, check_bot_identity, is_bot_token
from bot.fleet.receiver import ReceiverElection, process_identity
from bot.fleet.settings import check_fleet_database
from bot.fleet.single_sqlite import ServeLock, hold_serve_lock
from bot.platform.access import PairingDesk
from bot.platform.jobs import Jobs
from bot.platform.voice_mode import VoiceMode
from bot.platform.voice_notes import VoiceNotes
from bot.platform.voice_tool import SendVoiceMessage, VoiceOut
from bot.schema import LAYERS
from bot.settings import Settings, service_settings
from bot.telegram.adapter import TelegramAdapter
from bot.telegram.chat_moves import FollowingMoves
from bot.telegram.config import TelegramConfig
from bot.telegram.dispatch.jobs import JobsPanel
from bot.telegram.inbound.poller import Poller
from bot.telegram.sending.api import BotApi
from bot.telegram.sending.delivery import TelegramClient, telegram_pacing
from bot.telegram.sending.health import TelegramHealth
from bot.telegram.sending.retrying import StartupRefused
from bot.telegram.startup import HeldUpdates, TelegramStartup
from bot.telegram.store import TelegramStore
from engine.config import AppConfig
from engine.core import Engine
from engine.hub import ChatHub, FleetConfig, SourceEvents
from engine.llm import ModelRegistry
from engine.session import ApprovalPolicy
from engine.store import AppSettings, Leases, Notifier, Store, notifier_for, utcnow
from engine.tls import shared_tls_context
from memory.embedder import EmbedderLimits
from memory.embeddings import EmbeddingChoice
from memory.facts import FactLimits
from memory.profile import ProfileLimits
from memory.service import MemoryService
from memory.settings import embedding_config
from memory.tools import memory_tools
from memory.users import Identity
from providers import ProviderRegistry, ProviderStore
from providers.chat import ChatModels
from scheduler.events import EventStore
from scheduler.runner import OPERATOR_PLATFORMS
from scheduler.service import Scheduler, SchedulerLimits
from scheduler.tools import scheduler_tools
from voice import Speaker, Speech, SpeechError, Transcriber, Transcription

__all__ = ["Service", "open_engine", "serve"]


if TYPE_CHECKING:
    import uvicorn

    from bot.discord.adapter import DiscordAdapter
    from bot.discord.service import DiscordService
    from bot.http.app import TelegramWebhook
    from bot.http.web import Deliveries
    from bot.matrix.adapter import MatrixAdapter
    from bot.matrix.service import MatrixService
    from bot.slack.adapter import SlackAdapter
    from bot.slack.service import SlackService

#: The platforms a job's chat or owner may be of, besides the operator's own.
CHAT_PLATFORMS = ("telegram", "discord", "slack", "matrix")

log = logging.getLogger(__name__)


SHUTDOWN_S = 10.0
#: In a fleet, how often memory reads again what other processes changed (facts, opt-outs).
MEMORY_REREAD_S = 2.0
#: getUpdates failures back off to at most this: polling resumes within seconds of a
#: Telegram outage ending (the bar: within 10 s of a fault clearing).
POLL_MAX_BACKOFF_S = 5.0
#: How long ``Service.start`` waits, at most, for the Telegram start-up calls.
STARTUP_GRACE_S = 5.0


@dataclass
class Service:
    config: AppConfig
    models: ModelRegistry | None = None
    policy: ApprovalPolicy | None = None
    api: BotApi | None = None
    pacing: Pacing | None = None
    schedule: RetrySchedule | None = None
    http: bool = True
    #: Talk in this terminal when there is no Telegram (``console_events`` then set).
    console: bool = False
    engine: Engine | None = None
    hub: ChatHub | None = None
    scheduler: Scheduler | None = None
    #: The ChatEventBus's consumer: past conversations indexed for search_sessions.
    memory: MemoryService | None = None
    clock: Callable[[], datetime] = utcnow
    adapter: TelegramAdapter | None = None
    poller: Poller | None = None
    telegram_health: TelegramHealth | None = None
    #: Resolves with one line when Telegram refused the bot for good (``serve`` exits).
    refused: asyncio.Future[str] | None = None
    #: The ``console`` source's events, subscribed before the hub resumes anything.
    console_events: SourceEvents | None = None
    console_resuming: bool = False
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _server: uvicorn.Server | None = None
    #: In a fleet (``CHATHUB_FLEET``): this process's id, its notifier, its receiver.
    process_id: str | None = None
    notifier: Notifier | None = None
    receiver: ReceiverElection | None = None
    _checks_http: httpx.AsyncClient | None = None
    #: Voice notes transcribed, on every platform that takes them (docs/voice.md).
    voice: VoiceNotes | None = None
    _voice_http: httpx.AsyncClient | None = None
    #: The API providers registered while the service runs (``chathub providers``), and
    #: how often another process's change is looked for.
    providers: ProviderRegistry | None = None
    providers_watch_s: float = 2.0
    #: The chats whose replies are spoken (``/voice on``), and who speaks them.
    voice_mode: VoiceMode | None = None
    _speaker: Speaker | None = None
    _serve_lock: ServeLock | None = None
    #: Discord (``DISCORD_BOT_TOKEN``), beside Telegram or alone.
    discord: DiscordService | None = None
    #: Tests: Discord's pacing, the wait between IDENTIFYs (None: Discord's own) and the
    #: login's waits.
    discord_pacing: Pacing | None = None
    discord_identify_gap_s: float | None = None
    discord_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    #: Slack (``SLACK_BOT_TOKEN``), beside the others or alone.
    slack: SlackService | None = None
    #: Tests: Slack's pacing and socket ping interval (None: Slack's own).
    slack_pacing: Pacing | None = None
    slack_ping_interval_s: float | None = None
    #: Matrix (``MATRIX_HOMESERVER``), beside the others or alone.
    matrix: MatrixService | None = None
    #: Tests: Matrix's pacing and how long a sync waits (None: Matrix's own).
    matrix_pacing: Pacing | None = None
    matrix_sync_timeout_ms: int | None = None
    matrix_timeline_limit: int | None = None

    def _voice_notes(self, settings: Settings, workspace: Path) -> VoiceNotes:
        """One transcription path for every platform (its endpoint asked per voice note)."""
        if self.voice is None:
            assert self.engine is not None
            transcription = Transcription(settings, self.providers)
            self._spawn(transcription.follow(self.engine.system_bus), "transcription")
            self.voice = VoiceNotes(
                transcription,
                Transcriber(self._providers_http(), timeout_s=settings.transcribe_timeout_seconds),
                workspace,
                max_bytes=settings.voice_max_bytes,
                max_seconds=settings.voice_max_seconds,
            )
        return self.voice

    async def _voice_replies(self, settings: Settings) -> VoiceMode:
        """The chats that hear their replies (``/voice on``) and the speech that says them."""
        if self.voice_mode is None:
            assert self.engine is not None
            speech = Speech(settings, self.providers)
            self._spawn(speech.follow(self.engine.system_bus), "speech")
            self._speaker = Speaker(
                self._providers_http(), timeout_s=settings.speech_timeout_seconds
            )
            self.voice_mode = VoiceMode(AppSettings(self.engine.store.db), speech, self.notifier)
            await self.voice_mode.load()
            if self.notifier is not None:
                self._spawn(self.voice_mode.watch(), "fleet-voice")
        return self.voice_mode

    async def _speak(self, text: str) -> bytes:
        """A voice reply's audio; ``SpeechError`` when there is no speech (the text goes)."""
        assert self.voice_mode is not None and self._speaker is not None
        speech = self.voice_mode.speech
        endpoint = speech.endpoint()
        if endpoint is None:
            raise SpeechError("speech is not set up")
        return await self._speaker.speak(endpoint, text, speech.voice)

    async def _source_of(self, session_id: int) -> str | None:
        assert self.engine is not None
        session = await self.engine.store.sessions.get(session_id)
        return None if session is None else session.source

    def _providers_http(self) -> httpx.AsyncClient:
        """One client for what the providers serve here (audio, their chat models)."""
        if self._voice_http is None:
            self._voice_http = httpx.AsyncClient(verify=shared_tls_context())
        return self._voice_http

    async def _run_checks(self) -> Sequence[Check]:
        """The doctor's checks, over a client made on first use (each client costs its TLS
        set-up, not worth paying at start for a page few open)."""
        from bot.http.health_details import service_checks  # loaded with the HTTP app

        if self._checks_http is None:
            self._checks_http = httpx.AsyncClient(verify=shared_tls_context())
        return await service_checks(self.config, self._checks_http)()

    async def start(self) -> None:
        settings = service_settings(self.config)
        if self.http:  # refuse before anything starts: an open API needs a token
            check_api_exposure(
                settings.http_host,
                settings.chathub_api_token,
                public=settings.reached_from_outside(),
            )
        if settings.chathub_fleet:  # refused before anything starts, as the API's exposure
            check_fleet_database(settings.database_url)
        settings.check_slack_events()
        settings.check_matrix_account()
        settings.check_telegram_webhook()
        # SQLite serves one process: a second serve on the file is refused (SqliteInUse).
        self._serve_lock = hold_serve_lock(settings.database_url)
        self.engine = engine = await open_engine(
            self.config, models=self.models, policy=self.policy
        )
        self.providers = providers = ProviderRegistry(
            ProviderStore(engine.store.db), engine.system_bus
        )
        await providers.load()
        self._spawn(providers.watch(self.providers_watch_s), "providers-watch")
        chat = ChatModels(providers, engine.models, self._providers_http())
        self._spawn(chat.follow(engine.system_bus), "provider-models")
        # The platforms that send voice messages, for ``send_voice_message``.
        voice_outs: dict[str, VoiceOut] = {}
        token = settings.telegram_bot_token
        # One bot per database (OtherBot). A token that is no token is Telegram's to refuse.
        if token and is_bot_token(token):
            try:
                await check_bot_identity(engine.store.db, token)
            except OtherBot:
                await engine.close()
                self.engine = None
                raise
        owner = settings.telegram_owner_id
        fleet = None
        if settings.chathub_fleet:
            # Unique per start, so a restarted process never holds its predecessor's leases
            # as its own (CHATHUB_PROCESS_ID names it; the suffix tells the starts apart).
            name = settings.chathub_process_id
            self.process_id = f"{name}:{secrets.token_hex(3)}" if name else process_identity()
            self.notifier = notifier_for(settings.database_url, self.process_id)
            await self.notifier.start()
            ttl = settings.chathub_fleet_lease_seconds
            fleet = FleetConfig.for_lease(self.process_id, ttl)
            log.info("fleet member %s (leases of %.0f s)", self.process_id, ttl)
        self.hub = hub = ChatHub(
            engine,
            self.config.hub,
            default_home=f"telegram:{owner}" if owner else "console",
            fleet=fleet,
            notifier=self.notifier,
        )
        self.scheduler = scheduler = Scheduler(
            engine,
            hub,
            timezone=settings.chathub_timezone,
            limits=SchedulerLimits(
                max_jobs_per_source=settings.scheduler_max_jobs_per_source,
                min_period_s=settings.scheduler_min_period_seconds,
                approval_wait_s=round(settings.scheduler_approval_wait_minutes * 60),
            ),
            clock=self.clock,
            # In a fleet a run's lease names its process (its worker otherwise).
            owner=self.process_id[-64:] if self.process_id else None,
            lease=timedelta(seconds=settings.scheduler_lease_seconds),
            tic_interval_s=settings.tic_interval_seconds,
            owner_allowed=self._job_owner_allowed,
            chat_gone=self._job_chat_gone,
            chat_back=self._job_chat_back,
        )
        hub.visiting.on_standing_grant(scheduler.grant_for_session)
        for tool in scheduler_tools(scheduler):
            engine.tools.register(tool)
        if settings.memory_enabled:
            # A provider serving embeddings wins over EMBEDDING_*, chosen again on the bus.
            embeddings = EmbeddingChoice(
                embedding_config(settings),
                providers,
                timeout_s=settings.embedding_timeout_seconds,
            )
            self._spawn(embeddings.follow(engine.system_bus), "embeddings")
            # Subscribed before the hub starts: turns it resumes publish (catch-up apart).
            self.memory = await open_memory(
                engine,
                hub,
                settings,
                embeddings=embeddings,
                reread_s=MEMORY_REREAD_S if self.notifier is not None else None,
            )
        webhook: TelegramWebhook | None = None
        deliveries: Deliveries | None = None  # the web inbox's "deliveries waiting"
        # /pair on any platform redeems a code from any platform; in a fleet every process
        # reads the paired users again after another one's /pair or /unpair.
        desk = PairingDesk(self.notifier)
        if self.notifier is not None:
            self._spawn(desk.watch(), "fleet-pairing")
        if self.api is None and settings.telegram_bot_token:
            from bot.telegram.bindings.factory import make_bot_api

            self.api = make_bot_api(
                settings.telegram_library, settings.telegram_bot_token, settings.telegram_api_url
            )
        self.refused = asyncio.get_running_loop().create_future()
        if self.api is not None:
            store = TelegramStore(engine.store.db, process_id=self.process_id)
            api = FollowingMoves(self.api, store.moves)  # groups that became supergroups
            deliveries = partial(engine.store.db.run, delivery_summary)
            self.telegram_health = health = TelegramHealth()
            pacing = self.pacing or telegram_pacing(settings)
            ownership = hub.fleet.ownership if hub.fleet is not None else None
            voice_mode = await self._voice_replies(settings)
            outbound = Outbound(
                TelegramClient(api, speak=self._speak),
                store.outbox,
                pacing,
                schedule=self.schedule,
                health=health,
                tenure=ownership,
                # The bot's cap is the fleet's: each live member keeps its share.
                members=(lambda: len(ownership.members)) if ownership is not None else lambda: 1,
            )
            self.adapter = adapter = TelegramAdapter(
                hub,
                api,
                store,
                outbound,
                TelegramConfig(
                    allowed_user_ids=frozenset(settings.telegram_allowed_user_ids),
                    owner_id=owner,
                    workspace=engine.workspace.root,
                    streaming=settings.telegram_streaming,
                    recover_outbox_at_start=fleet is None,
                ),
                jobs=JobsPanel(scheduler, settings.approvers),
                memory=self.memory,
                desk=desk,
                voice=self._voice_notes(settings, engine.workspace.root),
                voice_mode=voice_mode,
            )
            voice_outs["telegram"] = adapter.sender
            await adapter.start()  # no Telegram call: subscribed before the hub recovers
            self._spawn(Redelivery(outbound, store.outbox).run(), "tg-redelivery")
            if fleet is not None:  # a dead process's unsent replies: due once they are old
                orphans = recover_orphans_forever(outbound, fleet.scan_interval_s)
                self._spawn(orphans, "tg-fleet-outbox")
            startup = TelegramStartup(api, health)
            receive: Callable[[], Awaitable[None]]
            if settings.telegram_webhook_url:
                url, secret = settings.telegram_webhook_url, settings.telegram_webhook_secret or ""
                from bot.http.app import TelegramWebhook

                held = HeldUpdates()  # until getMe: the adapter needs its own username
                webhook = TelegramWebhook(store, held, secret)

                async def receive() -> None:
                    held.release(adapter, await store.unhandled())  # stored before a crash
                    await startup.set_webhook(url, secret)

            else:
                self.poller = poller = Poller(
                    api, store, adapter, health=health, max_backoff_s=POLL_MAX_BACKOFF_S
                )
                receive = poller.run
                if fleet is not None:  # one process of the fleet polls: the lease's holder
                    self.receiver = ReceiverElection(
                        Leases(engine.store.db), fleet.owner, poller.run, settle=adapter.handled
                    )
                    receive = self.receiver.run
            self._spawn(self._reach_telegram(startup, adapter, receive), "tg-startup")
        # What every platform service beside Telegram is given.
        shared: dict[str, Any] = {
            "jobs": Jobs(scheduler, settings.approvers),
            "memory": self.memory,
            "desk": desk,
            "schedule": self.schedule,
            "fleet": fleet,
        }
        if settings.discord_bot_token:
            from bot.discord.service import DiscordService

            self.discord = DiscordService(
                settings,
                hub,
                engine.store.db,
                engine.workspace.root,
                self.refused,
                pacing=self.discord_pacing,
                owner_home=not owner,  # no Telegram owner: the Discord owner's DM is home
                voice=self._voice_notes(settings, engine.workspace.root),
                voice_mode=await self._voice_replies(settings),
                speak=self._speak,
                identify_gap_s=self.discord_identify_gap_s,
                sleep=self.discord_sleep,
                **shared,
            )
            await self.discord.start()  # subscribed before the hub recovers, as Telegram
            deliveries = deliveries or partial(engine.store.db.run, delivery_summary)
            assert self.discord.adapter is not None
            voice_outs["discord"] = self.discord.adapter.sender
        if settings.slack_bot_token:
            from bot.slack.service import SlackService

            self.slack = SlackService(
                settings,
                hub,
                engine.store.db,
                self.refused,
                pacing=self.slack_pacing,
                voice=self._voice_notes(settings, engine.workspace.root),
                voice_mode=await self._voice_replies(settings),
                speak=self._speak,
                **shared,
                # No Telegram or Discord owner: the Slack owner's DM is home.
                owner_home=not owner and not settings.discord_owner_id,
                **(
                    {"ping_interval_s": self.slack_ping_interval_s}
                    if self.slack_ping_interval_s is not None
                    else {}
                ),
            )
            await self.slack.start()  # subscribed before the hub recovers, as Telegram
            deliveries = deliveries or partial(engine.store.db.run, delivery_summary)
            assert self.slack.adapter is not None
            voice_outs["slack"] = self.slack.adapter.sender
        if settings.matrix_homeserver:
            from bot.matrix.service import MatrixService

            tuning = {
                "sync_timeout_ms": self.matrix_sync_timeout_ms,
                "timeline_limit": self.matrix_timeline_limit,
            }
            self.matrix = MatrixService(
                settings,
                hub,
                engine.store.db,
                self.refused,
                pacing=self.matrix_pacing,
                **shared,
                voice=self._voice_notes(settings, engine.workspace.root),
                voice_mode=await self._voice_replies(settings),
                speak=self._speak,
                # No other platform's owner: the Matrix owner's direct room is home.
                owner_home=not owner
                and not settings.discord_owner_id
                and not settings.slack_owner_id,
                **{k: v for k, v in tuning.items() if v is not None},
            )
            await self.matrix.start()  # subscribed before the hub recovers, as Telegram
            deliveries = deliveries or partial(engine.store.db.run, delivery_summary)
            assert self.matrix.adapter is not None
            voice_outs["matrix"] = self.matrix.adapter.sender
        if voice_outs:
            speech = (await self._voice_replies(settings)).speech
            engine.tools.register(SendVoiceMessage(self._source_of, speech, voice_outs))
        if self.console and self.api is None:
            from bot.terminal import SOURCE, console_interrupted

            self.console_events = hub.events(SOURCE)
            self.console_resuming = await console_interrupted(engine)
        await hub.start()
        await scheduler.start()
        if self.http and webhook is not None:  # Telegram posts as soon as the webhook is set
            await self._start_http(webhook, deliveries)
        if self.telegram_health is not None:
            # A moment for Telegram, which answers in milliseconds when it is well: start
            # returns with the bot reachable (webhook set, polling begun) — but at once on
            # the first failure, and never later than the grace, whatever Telegram does.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.telegram_health.settled.wait(), STARTUP_GRACE_S)
        if self.http and webhook is None:
            await self._start_http(None, deliveries)

    async def _job_owner_allowed(self, owner_id: str) -> bool | None:
        """Whether the user a scheduled job acts for may still use the bot: a platform's
        user while allowed (owner, allowlist, paired); the operator's own front ends
        (``web:``, ``console:``) always; ``None`` when their platform is not running
        here (nobody can tell)."""
        platform, _, user = owner_id.partition(":")
        if platform in OPERATOR_PLATFORMS:
            return True
        if platform not in CHAT_PLATFORMS:
            return False
        adapter = self._adapter_of(platform)
        return None if adapter is None else adapter.access.is_allowed(user)

    async def _job_chat_gone(self, source: str) -> str | None:
        """Why a job's chat takes nothing more from the bot (its platform refused a
        delivery there for good, and nothing went through since, or the platform is not
        running here), or ``None``."""
        platform = source.partition(":")[0]
        if platform in CHAT_PLATFORMS and self._adapter_of(platform) is None:
            return f"{platform} is not running in this service"
        conversation = self._conversation_of(source)
        if conversation is None:
            return None
        adapter, where = conversation
        return await adapter.outbound.store.gone_reason(where)

    async def _job_chat_back(self, source: str) -> None:
        """A job resumed in ``source``: its chat's refusal for good is forgotten."""
        conversation = self._conversation_of(source)
        if conversation is not None:
            adapter, where = conversation
            await adapter.outbound.store.forget_gone(where)

    def _conversation_of(
        self, source: str
    ) -> tuple[TelegramAdapter | DiscordAdapter | SlackAdapter | MatrixAdapter, str] | None:
        """The adapter running ``source``'s platform here, and its conversation there
        (``None``: not running here, or a source it cannot read)."""
        adapter = self._adapter_of(source.partition(":")[0])
        if adapter is None:
            return None
        try:
            return adapter, adapter.cards.conversation(source)
        except ValueError:  # a job's chat no platform here can read
            return None

    def _adapter_of(
        self, platform: str
    ) -> TelegramAdapter | DiscordAdapter | SlackAdapter | MatrixAdapter | None:
        """The platform's adapter when it runs here."""
        if platform == "telegram":
            return self.adapter
        service = {"discord": self.discord, "slack": self.slack, "matrix": self.matrix}.get(
            platform
        )
        return None if service is None else service.adapter

    async def _start_http(
        self, webhook: TelegramWebhook | None, deliveries: Deliveries | None
    ) -> None:
        """The HTTP app, its modules loaded in a worker thread (bot/http/serving.py): the
        event loop meanwhile goes on polling Telegram and answering."""
        assert self.engine is not None and self.hub is not None and self.scheduler is not None
        serving = await asyncio.to_thread(importlib.import_module, "bot.http.serving")
        settings = service_settings(self.config)
        parts = serving.HttpParts(
            settings=settings,
            engine=self.engine,
            hub=self.hub,
            scheduler=self.scheduler,
            clock=self.clock,
            health=self.health,
            run_checks=self._run_checks,
            webhook=webhook,
            deliveries=deliveries,
            telegram_stats=self.adapter.outbound.stats if self.adapter else None,
            memory=self.memory,
            receivers=self.slack.routes() if self.slack is not None else [],
            providers=self.providers,
            voice=self._voice_notes(settings, self.engine.workspace.root),
        )
        self._server = server = await serving.http_server(parts)
        serving_task = asyncio.create_task(server.serve(), name="http")
        self._tasks.append(serving_task)
        # start returns with the app listening (or its failure logged by uvicorn)
        listening = asyncio.ensure_future(server.listening.wait())
        await asyncio.wait({serving_task, listening}, return_when=asyncio.FIRST_COMPLETED)
        listening.cancel()

    async def _reach_telegram(
        self,
        startup: TelegramStartup,
        adapter: TelegramAdapter,
        receive: Callable[[], Awaitable[None]],
    ) -> None:
        """getMe (retried), the command menu in the background, then updates: polling (until
        cancelled) or the webhook. A refusal resolves ``refused`` instead of raising."""
        try:
            me = await startup.identify()
            adapter.bot_id, adapter.bot_username = me.get("id"), me.get("username")
            self._spawn(startup.register_commands(adapter.commands.listed()), "tg-commands")
            await adapter.hub.until_started()  # nothing reaches the hub while it recovers
            await receive()
        except StartupRefused as exc:
            if self.refused is not None and not self.refused.done():
                self.refused.set_result(exc.explain())

    def _spawn(self, work: Coroutine[Any, Any, Any], name: str) -> None:
        self._tasks.append(asyncio.create_task(work, name=name))

    async def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {"ok": True}
        try:
            assert self.engine is not None
            await self.engine.store.db.run(lambda conn: conn.execute(sa.text("SELECT 1")))
            report["database"] = "ok"
        except Exception:
            # The details in the log: /healthz is open to anyone (it showed the
            # exception's class name until 2026-12-06).
            log.warning("the health check could not reach the database", exc_info=True)
            report.update(ok=False, database="unreachable")
        if self.telegram_health is not None:
            report.update(self.telegram_health.report())
        if self.poller is not None:
            report["telegram_last_poll_age_s"] = self.poller.age()
        if self.discord is not None:
            report["discord"] = self.discord.state()
        if self.slack is not None:
            report["slack"] = await self.slack.state()
        if self.matrix is not None:
            report["matrix"] = self.matrix.state()
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
        if self.discord is not None:
            await self.discord.close()
        if self.slack is not None:
            await self.slack.close()
        if self.matrix is not None:
            await self.matrix.close()
        if self.hub is not None:
            await self.hub.close()
        if self.memory is not None:
            await self.memory.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.notifier is not None:
            await self.notifier.close()
        if self.api is not None:
            await self.api.close()
        if self._checks_http is not None:
            await self._checks_http.aclose()
        if self._voice_http is not None:
            await self._voice_http.aclose()
        if self.engine is not None:
            await self.engine.close()
        if self._serve_lock is not None:
            self._serve_lock.close()
            self._serve_lock = None


async def open_engine(
    config: AppConfig,
    *,
    models: ModelRegistry | None = None,
    policy: ApprovalPolicy | None = None,
) -> Engine:
    """The engine as every ``chathub`` command that serves runs it: over a store of every
    layer's tables (bot/schema.py; the engine on its own migrates only its own), with MCP
    notifications going to the scheduler's events, which the tic reads."""
    store = await Store.open(config.settings.database_url, LAYERS)
    return await Engine.open(
        config, models=models, policy=policy, store=store, notifications=EventStore(store.db)
    )


async def open_memory(
    engine: Engine,
    hub: ChatHub,
    settings: Settings,
    *,
    embeddings: EmbeddingChoice | None = None,
    reread_s: float | None = None,
) -> MemoryService:
    """Long-term memory as ``MEMORY_*`` set it, started, its tools registered and its
    profile in every turn of ``hub`` (before the hub starts: the turns it resumes publish);
    ``embeddings``: semantic recall (none: full text alone)."""
    memory = MemoryService(
        engine.store.db,
        engine.bus,
        fact_limits=FactLimits(max_chars=settings.memory_fact_chars),
        profile_limits=ProfileLimits(max_chars=settings.memory_profile_chars),
        # MEMORY_MODEL first, the other models as fallbacks (unset: the main model).
        models=(lambda: engine.models.candidates(settings.memory_model))
        if settings.memory_derive_facts
        else None,
        embeddings=embeddings,
        embedder_limits=EmbedderLimits(batch=settings.embedding_batch),
        min_similarity=settings.embedding_min_similarity,
        reread_s=reread_s,
    )
    await memory.start()
    if settings.telegram_owner_id:  # the owner's web chat and console: their Telegram self
        await memory.link_operator(Identity("telegram", str(settings.telegram_owner_id)))
    for tool in memory_tools(engine.store, memory):
        engine.tools.register(tool)
    hub.add_turn_context(memory.turn_context)
    return memory


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
    service = Service(config, console=sys.stdin.isatty())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Before start: polling begins before start returns (the HTTP app loads meanwhile), and
    # a SIGTERM then must stop the service as it would later.
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    await service.start()
    freeze_startup_objects()
    assert service.refused is not None
    refused = service.refused
    refused.add_done_callback(lambda _f: stop.set())
    terminal: asyncio.Task[None] | None = None
    if service.console_events is not None:
        from bot.terminal import TerminalChat, log_to_file

        print(f"chathub: the log is in {log_to_file()}", file=sys.stderr, flush=True)

        assert service.hub is not None
        assert service.scheduler is not None
        chat = TerminalChat(
            service.hub,
            service.console_events,
            resuming=service.console_resuming,
            jobs=Jobs(service.scheduler),  # /jobs, as in Telegram
            memory=service.memory,
        )
        terminal = asyncio.create_task(chat.run())
        terminal.add_done_callback(lambda _t: stop.set())
    if service.adapter is None and service.http:
        settings = service_settings(config)
        host = "127.0.0.1" if settings.http_host in ("0.0.0.0", "::") else settings.http_host
        # stderr, whatever the log level, and not mixed into the terminal chat's output
        print(
            f"chathub: web chat at http://{host}:{settings.http_port}/chat",
            file=sys.stderr,
            flush=True,
        )
    platforms = (service.adapter, service.discord, service.slack, service.matrix)
    if all(platform is None for platform in platforms) and terminal is None:
        log.warning(
            "none of TELEGRAM_BOT_TOKEN, DISCORD_BOT_TOKEN, SLACK_BOT_TOKEN and "
            "MATRIX_HOMESERVER is set and stdin is not a terminal: HTTP only"
        )
    await stop.wait()
    if terminal is not None and not terminal.done():
        terminal.cancel()
    try:
        await asyncio.wait_for(service.stop(), SHUTDOWN_S)
    except TimeoutError:
        log.error("shutdown took longer than %.0f s; exiting anyway", SHUTDOWN_S)
    else:
        log.info("chathub stopped")
    if refused.done():  # one line, no traceback, exit status 1
        raise SystemExit(f"chathub: {refused.result()}")
