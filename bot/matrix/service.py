"""Matrix as ``chathub serve`` runs it: the adapter, its redelivery, and its sync loop.

Start order as for Slack: the adapter subscribes to the hub before the hub recovers (no
Matrix call); then in the background the bot signs in (``MATRIX_ACCESS_TOKEN``, or
``MATRIX_PASSWORD`` logged in with once and the token kept in ``app_settings``), asks
``whoami`` who it is, and syncs: in a fleet only on the holder of the ``matrix:sync``
lease (every process may send). A definitive refusal (a wrong password, a revoked token,
the token of another account) is one line and the service's exit, never a retry loop; an
unreachable homeserver is retried with backoff. A token revoked while running is the
same line, and the sync stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from secrets import token_hex
from typing import Any

from nio import LoginResponse, WhoamiResponse

from bot.delivery import Backoff, Pacing, RetrySchedule, keep_delivering
from bot.fleet.receiver import ReceiverElection
from bot.matrix.adapter import MatrixAdapter, MatrixConfig
from bot.matrix.incoming import source_of
from bot.matrix.sending import MatrixError, MatrixRefused, TokenRevoked, call, matrix_pacing
from bot.platform.access import PairingDesk
from bot.platform.front import FrontConfig, stop_platform
from bot.platform.jobs import Jobs
from bot.platform.tasks import Background
from bot.platform.voice_mode import VoiceMode
from bot.platform.voice_notes import VoiceNotes
from bot.settings import Settings
from engine.hub import ChatHub, FleetConfig
from engine.store import AppSettings, Database, Leases
from memory.service import MemoryService

__all__ = ["SYNC_LEASE", "MatrixService", "token_setting"]

log = logging.getLogger(__name__)

#: The fleet's lease on the one sync loop.
SYNC_LEASE = "matrix:sync"
_BACKOFF = Backoff(first_s=0.5, cap_s=10.0)
REVOKED = "MATRIX_ACCESS_TOKEN: the homeserver does not accept this token (M_UNKNOWN_TOKEN)"


#: Where this database's transaction-id prefix is kept (``app_settings``).
TXN_PREFIX_SETTING = "matrix:txn_prefix"


async def transaction_prefix(kept: AppSettings) -> str:
    """What every transaction id of this database begins with, made once and kept: a
    homeserver keeps a device's transaction ids a day and answers a reused one with its
    old event, so a fresh database (ids from 1 again) on the same access token had its
    first replies taken for old ones, never shown (until 2026-12-07; found by review).
    Every process of a fleet reads the same one."""
    return await kept.change(TXN_PREFIX_SETTING, lambda old: old or f"chathub.{token_hex(4)}")


def token_setting(user_id: str) -> str:
    """Where the token a password login gave is kept (``app_settings``)."""
    return f"matrix:access_token:{user_id}"


@dataclass
class MatrixService:
    settings: Settings
    hub: ChatHub
    db: Database
    refused: asyncio.Future[str]
    jobs: Jobs | None = None
    memory: MemoryService | None = None
    desk: PairingDesk | None = None
    pacing: Pacing | None = None
    schedule: RetrySchedule | None = None
    fleet: FleetConfig | None = None
    #: The owner's direct room is the hub's default home (no other platform's owner).
    owner_home: bool = False
    #: Tests: how long a sync waits for events, and events per room in one answer.
    sync_timeout_ms: int = 30_000
    timeline_limit: int = 50
    #: Audio messages transcribed (``None``: not read).
    voice: VoiceNotes | None = None
    #: The rooms whose replies are spoken (``/voice``), and what speaks them.
    voice_mode: VoiceMode | None = None
    speak: Callable[[str], Awaitable[bytes]] | None = None
    adapter: MatrixAdapter | None = None

    def __post_init__(self) -> None:
        self._tasks = Background()
        self._signed_in = asyncio.Event()
        self._syncing = False

    async def start(self) -> None:
        settings, fleet = self.settings, self.fleet
        settings.check_matrix_account()
        homeserver, user_id = settings.matrix_homeserver, settings.matrix_user_id
        assert homeserver is not None and user_id is not None
        kept = AppSettings(self.db)
        token = settings.matrix_access_token or await kept.get(token_setting(user_id)) or ""
        txn_prefix = await transaction_prefix(kept)
        ownership = self.hub.fleet.ownership if self.hub.fleet is not None else None
        config = MatrixConfig(
            homeserver=homeserver,
            user_id=user_id,
            access_token=token,
            front=FrontConfig(
                owner_id=settings.matrix_owner_id,
                allowed_user_ids=frozenset(settings.matrix_allowed_user_ids),
                recover_outbox_at_start=fleet is None,
                process_id=fleet.owner if fleet is not None else None,
            ),
            timeline_limit=self.timeline_limit,
            sync_timeout_ms=self.sync_timeout_ms,
            txn_prefix=txn_prefix,
        )
        self.adapter = adapter = MatrixAdapter(
            self.hub,
            self.db,
            config,
            self.pacing or matrix_pacing(settings),
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
        await adapter.start()  # no Matrix call: subscribed before the hub recovers
        outbound = adapter.outbound
        scan = fleet.scan_interval_s if fleet is not None else None
        self._tasks.spawn(keep_delivering(outbound, scan))
        self._tasks.spawn(self._run())

    async def _run(self) -> None:
        assert self.adapter is not None
        settings = self.settings
        logged_in_again = homed = False
        failures = 0
        while True:
            try:
                await self._sign_in()
                self._signed_in.set()
                if self.owner_home and settings.matrix_owner_id and not homed:
                    homed = True
                    self._tasks.spawn(self._home_at_owner(settings.matrix_owner_id))
                if self.fleet is None:
                    await self._sync()
                else:  # one sync loop for the fleet: the lease's holder's
                    election = ReceiverElection(
                        Leases(self.db),
                        self.fleet.owner,
                        self._sync,
                        name=SYNC_LEASE,
                        settle=self.adapter.front.handled,
                    )
                    await election.run()
                return
            except _Refused as exc:
                self._refuse(exc.line)
                return
            except TokenRevoked:
                if settings.matrix_access_token or logged_in_again:
                    self._refuse(REVOKED if settings.matrix_access_token else _password_line())
                    return
                # The token a password's login gave was revoked while running: log in
                # again now (until 2026-12-06 it said MATRIX_ACCESS_TOKEN, which nobody
                # set, and kept the dead token for the next start; found by review).
                assert settings.matrix_user_id is not None
                await AppSettings(self.db).set(token_setting(settings.matrix_user_id), "")
                self.adapter.nio.access_token = ""
                logged_in_again = True
            except Exception:
                # A failure of ours (the database away while signing in or taking over):
                # signed in and synced again after a pause (until 2026-12-07 the task
                # ended, and the bot heard nothing more until a restart; found by review).
                failures += 1
                delay = _BACKOFF.delay(failures)
                log.exception("Matrix receiving stopped; started again in %.1f s", delay)
                await asyncio.sleep(delay)

    def _refuse(self, line: str) -> None:
        log.error("Matrix: %s", line)
        if not self.refused.done():
            self.refused.set_result(line)

    async def _sign_in(self) -> None:
        """The access token (a password's login kept), checked with ``whoami``."""
        assert self.adapter is not None
        nio, settings = self.adapter.nio, self.settings
        user_id = settings.matrix_user_id
        assert user_id is not None
        if not nio.access_token:
            password = settings.matrix_password
            assert password is not None
            answer = await self._retried(
                lambda: nio.login(password, device_name="chathub"), "MATRIX_PASSWORD"
            )
            assert isinstance(answer, LoginResponse)
            nio.access_token = answer.access_token
            await AppSettings(self.db).set(token_setting(user_id), answer.access_token)
        variable = "MATRIX_ACCESS_TOKEN" if settings.matrix_access_token else "MATRIX_PASSWORD"
        me = await self._retried(lambda: nio.whoami(), variable)
        assert isinstance(me, WhoamiResponse)
        if me.user_id != user_id:
            raise _Refused(f"MATRIX_ACCESS_TOKEN is {me.user_id}'s, not MATRIX_USER_ID {user_id}")
        try:
            profile = await call(nio.get_displayname(user_id))
            self.adapter.me.display_name = getattr(profile, "displayname", None)
        except MatrixError as exc:
            log.info("the bot's display name: %s", exc.description)
        log.info("Matrix: signed in as %s", user_id)

    async def _retried(self, op: Any, variable: str) -> Any:
        """``op()`` until the homeserver answers; a refusal raises ``_Refused``."""
        failures = 0
        while True:
            try:
                return await call(op())
            except TokenRevoked:
                kept = AppSettings(self.db)
                if variable == "MATRIX_PASSWORD" and self.settings.matrix_user_id:
                    # the kept token was revoked: log in again once, with the password
                    await kept.set(token_setting(self.settings.matrix_user_id), "")
                raise _Refused(
                    REVOKED if variable == "MATRIX_ACCESS_TOKEN" else _password_line()
                ) from None
            except MatrixRefused as exc:
                raise _Refused(
                    f"{variable}: the homeserver refused it ({exc.description})"
                ) from None
            except MatrixError as exc:
                failures += 1
                delay = _BACKOFF.delay(failures)
                log.warning("Matrix did not answer (%s); again in %.1f s", exc.description, delay)
                await asyncio.sleep(delay)

    async def _sync(self) -> None:
        """The sync loop, until cancelled (the lease lost, a stop)."""
        assert self.adapter is not None
        # What this process stored and did not handle before a stop, or what the loop's
        # last holder (a fleet's) did before it died.
        await self.hub.until_started()
        await self.adapter.take_over()
        self._syncing = True
        try:
            await self.adapter.sync.run()
        finally:
            self._syncing = False

    async def _home_at_owner(self, owner: str) -> None:
        """Background notifications go to the owner's direct room unless a home was chosen."""
        assert self.adapter is not None
        room = await self.adapter.messages.direct_room(owner)
        if room is not None:
            self.hub.use_default_home(source_of(room))

    async def close(self) -> None:
        await stop_platform(self._tasks, self.adapter)

    def state(self) -> str:
        """For ``/healthz``: ``ok`` (synced), ``standby`` (another process syncs),
        ``connecting``, ``refused``."""
        if self.refused.done():
            return "refused"
        if self.adapter is None or not self._signed_in.is_set():
            return "connecting"
        if self._syncing and self.adapter.sync.synced.is_set():
            return "ok"
        return "standby" if self.fleet is not None else "connecting"


def _password_line() -> str:
    return "MATRIX_PASSWORD: the token it gave was revoked; restart to log in again"


class _Refused(Exception):
    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line
