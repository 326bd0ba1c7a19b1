"""``MatrixAdapter``: Matrix events into the hub, hub events back.

Events come from the sync loop (``sync.py``), which hands each batch to ``take``: the
events for the bot are stored once under their event ids (``platform_events``) before the
sync token moves past them, then handled in their room's lane. The parts with one job
each: ``messages.py`` (a message, an invite, an encrypted room), ``decisions.py``
(reactions and replies on cards), ``cards.py``, ``activity.py``, and from
``bot/platform`` the event renderer and the outbox with ``sending.py`` as its sender.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nio import AsyncClient, AsyncClientConfig

from bot.delivery import Pacing, RetrySchedule, Tenure
from bot.matrix.activity import RoomActivity
from bot.matrix.cards import MatrixCards
from bot.matrix.decisions import Decisions
from bot.matrix.incoming import MATRIX, Incoming
from bot.matrix.messages import MessageHandler
from bot.matrix.people import MatrixMe, People
from bot.matrix.sending import MatrixClient, MatrixSender, Rooms
from bot.matrix.sync import SyncLoop
from bot.platform.access import WELCOME, PairingDesk
from bot.platform.front import Front, FrontConfig
from bot.platform.jobs import Jobs
from bot.platform.protocols import PairingCode
from bot.platform.voice_mode import VoiceMode, voice_command
from bot.platform.voice_notes import VoiceNotes
from engine.approval import Decider
from engine.hub import ChatHub
from engine.store import AppSettings, Database
from memory.service import MemoryService

__all__ = ["MatrixAdapter", "MatrixConfig"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MatrixConfig:
    """What the adapter is told by the service (``bot/matrix/service.py``)."""

    homeserver: str
    user_id: str
    access_token: str
    front: FrontConfig = field(default_factory=FrontConfig)
    progress_interval_s: float = 5.0
    #: Events per room in one sync answer (more: the gap is read back).
    timeline_limit: int = 50
    sync_timeout_ms: int = 30_000
    #: What this database's transaction ids begin with (``transaction_prefix``).
    txn_prefix: str = "chathub"


class MatrixAdapter:
    def __init__(
        self,
        hub: ChatHub,
        db: Database,
        config: MatrixConfig,
        pacing: Pacing,
        *,
        schedule: RetrySchedule | None = None,
        tenure: Tenure | None = None,
        members: Callable[[], int] | None = None,
        jobs: Jobs | None = None,
        memory: MemoryService | None = None,
        desk: PairingDesk | None = None,
        voice: VoiceNotes | None = None,
        voice_mode: VoiceMode | None = None,
        speak: Callable[[str], Awaitable[bytes]] | None = None,
    ) -> None:
        """``voice``: audio messages transcribed; ``tenure`` and ``members``: a fleet member's (its rows' hand-back; how many
        processes share the account's cap); ``desk``: every platform's pairing."""
        self.hub, self.config = hub, config
        self.me = me = MatrixMe(user_id=config.user_id)
        # One try per call: the outbox retries, paced, what is worth retrying.
        self.nio = nio = AsyncClient(
            config.homeserver,
            config.user_id,
            config=AsyncClientConfig(
                max_limit_exceeded=0,
                max_timeouts=0,
                request_timeout=config.sync_timeout_ms / 1000 + 30,
                store_sync_tokens=False,
            ),
        )
        nio.access_token = config.access_token
        nio.user_id = config.user_id
        self.rooms = rooms = Rooms()
        settings = AppSettings(db)
        self.front = front = Front(
            MATRIX,
            Incoming,
            hub,
            db,
            pacing,
            config.front,
            welcome=self._welcome,
            schedule=schedule,
            tenure=tenure,
            members=members,
            jobs=jobs,
            memory=memory,
            desk=desk,
        )
        client = MatrixClient(nio, rooms, speak)
        self.outbound = front.deliver_with(client)
        self.access, self.commands = front.access, front.commands
        self.sender = sender = MatrixSender(
            client, self.outbound, voice_mode, txn_prefix=config.txn_prefix
        )
        if voice_mode is not None:
            front.commands.register(voice_command(voice_mode))
        self.cards = cards = MatrixCards(hub, front.card_store, sender)
        people = People(nio)
        activity = RoomActivity(sender, front.runtime)
        decisions = Decisions(hub, nio, front.access, cards, sender, people)
        self.messages = messages = MessageHandler(
            hub,
            nio,
            me,
            people,
            rooms,
            front.access,
            front.commands,
            cards,
            decisions,
            sender,
            activity,
            settings,
            voice,
        )
        front.attach(
            sender, cards, activity, messages.handle, progress_interval_s=config.progress_interval_s
        )
        self.sync = SyncLoop(
            nio,
            me,
            rooms,
            settings,
            self.take,
            timeline_limit=config.timeline_limit,
            timeout_ms=config.sync_timeout_ms,
        )

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Local state and the hub subscription, before the hub recovers; no Matrix call."""
        await self.front.start(self.cards)

    async def take_over(self) -> None:
        await self.front.take_over(addressed=self.messages.addressed)

    async def close(self) -> None:
        await self.front.close()
        await self.nio.close()

    async def drain(self) -> None:
        await self.front.drain()

    # -- events ------------------------------------------------------------------------------

    async def take(self, events: list[Incoming]) -> None:
        """A sync's events for the bot, stored (new ones queued in their lanes)."""
        for incoming in events:
            if await self.messages.addressed(incoming):
                await self.front.take(incoming)

    async def _welcome(self, paired: PairingCode) -> None:
        """In the person's direct room (a stranger's invite was declined: a new one)."""
        await self.messages.say_to_user(paired.user_id, WELCOME)

    def decider(self, user_id: str | None) -> Decider:
        return self.front.decider(user_id)

    def is_allowed(self, user_id: str | None) -> bool:
        return self.front.is_allowed(user_id)
