"""Slack as ``chathub serve`` runs it: the adapter, its redelivery, and its events.

Start order as for Discord: the adapter subscribes to the hub before the hub recovers (no
Slack call), then in the background the bot asks ``auth.test`` who it is and starts
taking events: in Socket Mode (``SLACK_APP_TOKEN``) over the socket that
``apps.connections.open`` names, in a fleet only on the holder of the ``slack:socket``
lease (docs/slack.md says why one socket); otherwise over the HTTP Events API
(``POST /slack/events`` on the service's HTTP app, every process of a fleet). A definitive
refusal (a revoked or mistyped token, Socket Mode off) is one line and the service's exit,
never a retry loop; a network failure or a 5xx is retried with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any

from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from slack_sdk.signature import SignatureVerifier
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from bot.delivery import Backoff, Pacing, RetrySchedule, keep_delivering
from bot.fleet.receiver import ReceiverElection
from bot.platform.access import PairingDesk
from bot.platform.front import FrontConfig, stop_platform
from bot.platform.jobs import Jobs
from bot.platform.tasks import Background
from bot.platform.voice_mode import VoiceMode
from bot.platform.voice_notes import VoiceNotes
from bot.platform.voice_out import Speak
from bot.settings import Settings
from bot.slack.adapter import SlackAdapter, SlackConfig
from bot.slack.incoming import source_of
from bot.slack.sending import SlackError, SlackRefused, per_method, slack_call, slack_pacing
from engine.hub import ChatHub, FleetConfig
from engine.store import Database, Leases
from memory.service import MemoryService

__all__ = ["EVENTS_PATH", "SOCKET_LEASE", "SlackService", "refusal"]

log = logging.getLogger(__name__)

#: The fleet's lease on the one Socket Mode connection.
SOCKET_LEASE = "slack:socket"
#: Where the HTTP Events API posts (the app's Request URL ends with it).
EVENTS_PATH = "/slack/events"
_BACKOFF = Backoff(first_s=0.5, cap_s=5.0)
#: The shape of Slack's signature headers: bolt's check raised (a 500, an error logged)
#: on a timestamp that is no integer or a signature beyond ASCII (until 2026-12-06).
_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")

_TOKEN_REFUSALS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)


def refusal(error: SlackError, variable: str) -> str | None:
    """The one line for an answer no retry changes; ``None`` for anything retriable."""
    if not isinstance(error, SlackRefused):
        return None
    code = error.description
    if code in _TOKEN_REFUSALS:
        return f"{variable}: Slack does not accept this token ({code})"
    if code == "not_allowed_token_type":
        kind = "an app-level token (xapp-)" if variable == "SLACK_APP_TOKEN" else "a bot token"
        return f"{variable}: Slack wants {kind} here ({code})"
    return f"Slack refused the app ({code}): check {variable} and SLACK_API_URL"


@dataclass
class SlackService:
    settings: Settings
    hub: ChatHub
    db: Database
    refused: asyncio.Future[str]
    jobs: Jobs | None = None
    memory: MemoryService | None = None
    desk: PairingDesk | None = None
    pacing: Pacing | None = None
    schedule: RetrySchedule | None = None
    #: A fleet member's (``CHATHUB_FLEET``): its process id, leases and scan interval.
    fleet: FleetConfig | None = None
    #: The owner's DM is the hub's default home (no other platform's owner is set).
    owner_home: bool = False
    #: Tests: how often the socket is pinged (a dropped one is noticed at the next ping).
    ping_interval_s: float = 10.0
    #: Audio files transcribed (``None``: files are not read).
    voice: VoiceNotes | None = None
    #: The chats whose replies are spoken (``/voice``), and what speaks them.
    voice_mode: VoiceMode | None = None
    speak: Speak | None = None
    adapter: SlackAdapter | None = None

    def __post_init__(self) -> None:
        self._tasks = Background()
        self._identified = asyncio.Event()
        self._socket: AsyncSocketModeHandler | None = None
        self._http: AsyncSlackRequestHandler | None = None

    @property
    def socket_mode(self) -> bool:
        return self.settings.slack_app_token is not None

    async def start(self) -> None:
        settings, hub, fleet = self.settings, self.hub, self.fleet
        token = settings.slack_bot_token
        assert token is not None
        settings.check_slack_events()
        ownership = hub.fleet.ownership if hub.fleet is not None else None
        config = SlackConfig(
            bot_token=token,
            api_url=settings.slack_api_url,
            signing_secret=None if self.socket_mode else settings.slack_signing_secret,
            front=FrontConfig(
                owner_id=settings.slack_owner_id,
                allowed_user_ids=frozenset(settings.slack_allowed_user_ids),
                recover_outbox_at_start=fleet is None,
                process_id=fleet.owner if fleet is not None else None,
                command_prefix="/chathub ",  # the slash command of the app's manifest
            ),
        )
        self.adapter = adapter = SlackAdapter(
            hub,
            self.db,
            config,
            per_method(self.pacing or slack_pacing(settings)),
            schedule=self.schedule,
            tenure=ownership,
            members=(lambda: len(ownership.members)) if ownership is not None else None,
            jobs=self.jobs,
            memory=self.memory,
            desk=self.desk,
            voice=self.voice,
            voice_mode=self.voice_mode,
            speak=self.speak,
        )
        await adapter.start()  # no Slack call: subscribed before the hub recovers
        if not self.socket_mode:
            self._http = AsyncSlackRequestHandler(adapter.app)
        outbound = adapter.outbound
        scan = fleet.scan_interval_s if fleet is not None else None
        self._tasks.spawn(keep_delivering(outbound, scan))
        self._tasks.spawn(self._run())

    def routes(self) -> list[Route]:
        """The HTTP Events API's route, for the service's HTTP app (none in Socket Mode)."""
        return [] if self._http is None else [Route(EVENTS_PATH, self._events, methods=["POST"])]

    async def _events(self, request: Request) -> Response:
        """Slack's POSTs: verified and acknowledged by bolt once the bot knows who it is
        (before that a 503, which Slack retries)."""
        if not _signed_like_slack(request) or not await self._signed_by_slack(request):
            return PlainTextResponse("invalid request", status_code=401)
        if self._http is None or not self._identified.is_set():
            return PlainTextResponse("starting", status_code=503)
        return await self._http.handle(request)

    async def _signed_by_slack(self, request: Request) -> bool:
        """The signature checked on the raw body before bolt reads it: bolt decodes and
        parses the body first, and junk with a wrong signature (not UTF-8, not JSON) was a
        500 and a traceback (found by review on 2026-12-06)."""
        secret = self.settings.slack_signing_secret
        if secret is None:
            return False
        try:
            body = (await request.body()).decode("utf-8")
        except UnicodeDecodeError:  # Slack sends UTF-8 (and the verifier decodes it)
            return False
        return SignatureVerifier(secret).is_valid(
            body,
            request.headers.get("x-slack-request-timestamp"),
            request.headers.get("x-slack-signature"),
        )

    async def _run(self) -> None:
        assert self.adapter is not None
        try:
            auth = await self._retried(lambda: self.adapter.web.auth_test(), "SLACK_BOT_TOKEN")
            self.adapter.identify(auth.data if isinstance(auth.data, dict) else {})
            self._identified.set()
            log.info("Slack: signed in as %s in %s", auth.get("user"), auth.get("team"))
            if self.owner_home and self.settings.slack_owner_id:
                self._tasks.spawn(self._home_at_owner(self.settings.slack_owner_id))
            if not self.socket_mode:
                if self.fleet is None:  # what it stored and did not handle before a stop
                    await self.hub.until_started()
                    await self.adapter.take_over()
                return  # the HTTP app takes the events from now on
            fleet = self.fleet
            if fleet is None:
                await self._connect()
            else:  # one socket for the fleet: the lease's holder's
                election = ReceiverElection(
                    Leases(self.db),
                    fleet.owner,
                    self._connect,
                    name=SOCKET_LEASE,
                    settle=self.adapter.front.handled,
                )
                await election.run()
        except _Refused as exc:
            log.error("Slack: %s", exc.line)
            if not self.refused.done():
                self.refused.set_result(exc.line)

    async def _retried(self, call: Any, variable: str) -> Any:
        """``call`` until Slack answers; a refusal raises ``_Refused`` with its line."""
        failures = 0
        while True:
            try:
                return await slack_call(call)
            except SlackError as exc:
                line = refusal(exc, variable)
                if line is not None:
                    raise _Refused(line) from None
                failures += 1
                delay = _BACKOFF.delay(failures)
                log.warning("Slack did not answer (%s); retrying in %.1f s", exc.description, delay)
                await asyncio.sleep(delay)

    async def _connect(self) -> None:
        """The Socket Mode connection, held until cancelled (the lease lost, a stop).
        The app token is tried first: slack_sdk would retry a refused one forever."""
        assert self.adapter is not None
        app_token = self.settings.slack_app_token
        web = self.adapter.web
        await self._retried(
            lambda: web.apps_connections_open(app_token=app_token), "SLACK_APP_TOKEN"
        )
        # What this process stored and did not handle before a stop, or what the socket's
        # last holder (a fleet's) did before it died.
        await self.hub.until_started()
        await self.adapter.take_over()
        handler = AsyncSocketModeHandler(
            self.adapter.app, app_token, ping_interval=self.ping_interval_s
        )
        self._socket = handler
        try:
            await handler.connect_async()
            await asyncio.Event().wait()
        finally:
            self._socket = None
            await handler.close_async()

    async def _home_at_owner(self, owner: str) -> None:
        """Background notifications go to the owner's DM unless a home was chosen."""
        assert self.adapter is not None
        channel = await self.adapter.sender.open_dm(owner)
        if channel is not None:
            self.hub.use_default_home(source_of(channel))

    async def close(self) -> None:
        await stop_platform(self._tasks, self.adapter)

    async def state(self) -> str:
        """For ``/healthz``: ``ok`` (events arrive: a live socket, or signed in for the
        HTTP Events API), ``standby`` (a fleet member another holds the socket for),
        ``connecting``, ``refused``."""
        if self.refused.done():
            return "refused"
        if not self._identified.is_set():
            return "connecting"
        if not self.socket_mode:
            return "ok"
        socket = self._socket
        if socket is not None and await socket.client.is_connected():
            return "ok"
        return "standby" if self.fleet is not None else "connecting"


class _Refused(Exception):
    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


def _signed_like_slack(request: Request) -> bool:
    """Whether the signature headers have Slack's shape (bolt checks their value)."""
    timestamp = request.headers.get("x-slack-request-timestamp", "")
    signature = request.headers.get("x-slack-signature", "")
    return bool(_TIMESTAMP.fullmatch(timestamp) and _SIGNATURE.fullmatch(signature))
