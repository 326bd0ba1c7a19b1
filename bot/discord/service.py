"""Discord as ``chathub serve`` runs it: the adapter, its redelivery, and the gateway.

Start order as for Telegram: the adapter subscribes to the hub before the hub recovers
(no Discord call), then in the background the bot logs in (REST), registers its slash
commands when they changed, and connects to the gateway — in a fleet only the holder of
the ``discord:gateway`` lease connects (every process logs in and sends). A definitive
refusal (a bad token: 401 at login or close code 4004; intents Discord will not grant)
is one line and the service's exit, never a retry loop; a network failure or a 5xx at
login is retried with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import discord

from bot.delivery import Backoff, Pacing, RetrySchedule, keep_delivering
from bot.discord.adapter import DiscordAdapter, DiscordConfig
from bot.discord.gateway import point_at
from bot.discord.incoming import source_of
from bot.discord.messages import Listening
from bot.discord.sending import discord_pacing
from bot.fleet.receiver import ReceiverElection
from bot.platform.access import PairingDesk
from bot.platform.failures import report_failure
from bot.platform.front import FrontConfig, stop_platform
from bot.platform.jobs import Jobs
from bot.platform.tasks import Background
from bot.platform.voice_mode import VoiceMode
from bot.platform.voice_notes import VoiceNotes
from bot.platform.voice_out import Speak
from bot.settings import Settings
from engine.hub import ChatHub, FleetConfig
from engine.store import Database, Leases
from memory.service import MemoryService

__all__ = ["GATEWAY_LEASE", "DiscordService", "refusal"]

log = logging.getLogger(__name__)

#: The fleet's lease on the one gateway connection.
GATEWAY_LEASE = "discord:gateway"
_LOGIN_BACKOFF = Backoff(first_s=0.5, cap_s=5.0)
#: A new session after the gateway failed past discord.py's own reconnects: soon at
#: first, then up to five minutes apart. Discord allows 1,000 IDENTIFYs a day and resets
#: the bot's token past them; until 2026-12-07 a failure at every new session (an event
#: discord.py cannot read) identified every 5 s, 17,000 a day (found by review).
RECONNECT_BACKOFF = Backoff(first_s=0.5, cap_s=300.0)
#: A session that lasted this long worked: its failure starts the backoff again.
SESSION_WORKED_S = 600.0


def refusal(error: BaseException) -> str | None:
    """The one line for an answer no retry changes; ``None`` for anything retriable."""
    if isinstance(error, discord.LoginFailure):
        return "DISCORD_BOT_TOKEN: Discord does not accept this token (401 at login)"
    if isinstance(error, discord.PrivilegedIntentsRequired):
        return (
            "Discord refused the MESSAGE CONTENT intent (DISCORD_MESSAGE_CONTENT or "
            "DISCORD_OPEN_CHANNEL_IDS ask for it): switch it on for the bot in the Discord "
            "developer portal, or unset them"
        )
    if isinstance(error, discord.ConnectionClosed) and error.code == 4004:
        return "DISCORD_BOT_TOKEN: the Discord gateway refused the token (close code 4004)"
    if isinstance(error, discord.ConnectionClosed) and error.code in (4010, 4011, 4012, 4013):
        return f"the Discord gateway refused the connection (close code {error.code})"
    if isinstance(error, discord.HTTPException) and error.status in (401, 403, 404):
        return f"Discord refused the bot ({error.status} {error.text}): check DISCORD_API_URL"
    return None


#: The longest one wait before logging in again, whatever Discord asks for.
LOGIN_WAIT_MOST_S = 900.0


def _login_wait(error: Exception) -> float | None:
    """How long Discord asks the login to wait (0: a failure worth retrying at once, as
    the backoff says); ``None``: not worth retrying. A 429 is a wait, never a refusal:
    one past discord.py's 30 s cap (``RateLimited``), or Cloudflare's without ``Via``,
    shut the whole service down until 2026-12-07, Telegram with it (found by review)."""
    if isinstance(error, discord.RateLimited):
        wait = error.retry_after
        return wait if isinstance(wait, int | float) and math.isfinite(wait) else 0.0
    if isinstance(error, discord.HTTPException):
        return 0.0 if error.status == 429 or error.status >= 500 else None
    if isinstance(error, aiohttp.ClientError | OSError | TimeoutError):
        return 0.0
    return None


@dataclass
class DiscordService:
    settings: Settings
    hub: ChatHub
    db: Database
    workspace: Path
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
    #: Tests: no 5 s between IDENTIFYs.
    identify_gap_s: float | None = None
    #: Audio attachments and voice messages transcribed (``None``: kept as files).
    voice: VoiceNotes | None = None
    #: The chats whose replies are spoken (``/voice``), and what speaks them.
    voice_mode: VoiceMode | None = None
    speak: Speak | None = None
    #: Tests: the login's waits between tries.
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    adapter: DiscordAdapter | None = None

    def __post_init__(self) -> None:
        self._tasks = Background()

    async def start(self) -> None:
        settings, hub = self.settings, self.hub
        point_at(settings.discord_api_url)
        fleet = self.fleet
        ownership = hub.fleet.ownership if hub.fleet is not None else None
        config = DiscordConfig(
            front=FrontConfig(
                owner_id=settings.discord_owner_id,
                allowed_user_ids=frozenset(settings.discord_allowed_user_ids),
                recover_outbox_at_start=fleet is None,
                process_id=fleet.owner if fleet is not None else None,
            ),
            listening=Listening(
                guilds=frozenset(settings.discord_guild_ids),
                open_channels=frozenset(settings.discord_open_channel_ids),
                thread_channels=frozenset(settings.discord_thread_channel_ids),
                reads_content=settings.discord_reads_content,
            ),
            workspace=self.workspace,
            **({"identify_gap_s": self.identify_gap_s} if self.identify_gap_s is not None else {}),
        )
        self.adapter = adapter = DiscordAdapter(
            hub,
            self.db,
            config,
            self.pacing or discord_pacing(settings),
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
        await adapter.start()  # no Discord call: subscribed before the hub recovers
        outbound = adapter.outbound
        scan = fleet.scan_interval_s if fleet is not None else None
        self._tasks.spawn(keep_delivering(outbound, scan))
        self._tasks.spawn(self._run())

    async def _run(self) -> None:
        assert self.adapter is not None
        bot = self.adapter.bot
        token = self.settings.discord_bot_token
        assert token is not None
        try:
            await self._login(bot, token)
            if bot.user is not None:  # known from the login: a mention is one before READY
                self.adapter.known_as(str(bot.user.id))
            self._tasks.spawn(self._sync_commands(bot))
            if self.owner_home and self.settings.discord_owner_id:
                self._tasks.spawn(self._home_at_owner(bot, self.settings.discord_owner_id))
            fleet = self.fleet
            if fleet is None:
                await self._connect(bot)
            else:  # one gateway connection for the fleet: the lease's holder's
                election = ReceiverElection(
                    Leases(self.db),
                    fleet.owner,
                    lambda: self._connect(bot),
                    name=GATEWAY_LEASE,
                    settle=self.adapter.front.handled,
                )
                await election.run()
        except Exception as exc:
            line = refusal(exc)
            if line is None:
                log.exception("the Discord gateway stopped")
                line = f"the Discord connection failed ({type(exc).__name__})"
            log.error("Discord: %s", line)
            if not self.refused.done():
                self.refused.set_result(line)

    async def _login(self, bot: discord.Client, token: str) -> None:
        """Retried while Discord or the network fails or asks to wait; a refusal raises."""
        failures = 0
        while True:
            try:
                await bot.login(token)
                return
            except Exception as exc:
                wait = _login_wait(exc)
                if wait is None:
                    raise
                failures += 1
                delay = min(max(wait, _LOGIN_BACKOFF.delay(failures)), LOGIN_WAIT_MOST_S)
                log.warning("Discord login failed (%s); retrying in %.1f s", exc, delay)
                await self.sleep(delay)

    async def _connect(self, bot: discord.Client) -> None:
        assert self.adapter is not None
        await self.hub.until_started()
        # What this process stored and did not handle before a stop, or what the gateway's
        # last holder (a fleet's) did before it died.
        await self.adapter.front.take_over()
        failures = 0
        try:
            while True:
                began = time.monotonic()
                try:
                    await bot.connect(reconnect=True)
                    return
                except Exception as exc:
                    if refusal(exc) is not None:
                        raise
                    # discord.py reconnects by itself after what the network does; what it
                    # raises past that (an event it could not read) ended the service
                    # until 2026-12-06. A new session goes on, its catch-up reading what
                    # came meanwhile.
                    worked = time.monotonic() - began >= SESSION_WORKED_S
                    failures = 1 if worked else failures + 1
                    delay = RECONNECT_BACKOFF.delay(failures)
                    report_failure(log, "the Discord gateway connection")
                    log.warning("connecting to the Discord gateway again in %.1f s", delay)
                    await self._close_socket(bot)
                    await asyncio.sleep(delay)
        finally:
            await self._close_socket(bot)

    @staticmethod
    async def _close_socket(bot: discord.Client) -> None:
        if bot.ws is not None and not bot.is_closed():  # the lease is gone: let go
            with contextlib.suppress(Exception):
                await bot.ws.close(code=1000)

    async def _home_at_owner(self, bot: discord.Client, owner: str) -> None:
        """Background notifications (a job's result, the tic's) go to the owner's DM
        unless a home was chosen; a failure leaves the hub's default (logged)."""
        try:
            channel = await bot.create_dm(discord.Object(int(owner)))
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning("could not open the owner's DM for notifications: %s", exc)
            return
        self.hub.use_default_home(source_of(str(channel.id)))

    async def _sync_commands(self, bot: Any) -> None:
        try:
            if await bot.sync_commands():
                log.info("Discord slash commands registered")
        except discord.HTTPException as exc:
            log.warning("registering the Discord slash commands failed: %s", exc)

    async def close(self) -> None:
        await stop_platform(self._tasks, self.adapter)

    def state(self) -> str:
        """For ``/healthz``: ``ok`` (this process holds a live gateway connection),
        ``standby`` (a fleet member another holds it for), ``connecting``, ``refused``."""
        if self.refused.done():
            return "refused"
        adapter = self.adapter
        if adapter is not None and adapter.bot_id is not None and not adapter.bot.is_closed():
            ws = adapter.bot.ws
            if ws is not None and ws.open:
                return "ok"
        if self.fleet is not None:
            return "standby"
        return "connecting"
