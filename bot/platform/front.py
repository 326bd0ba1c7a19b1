"""What every chat platform's adapter holds, built one way: ``Front``.

Access and pairing (its people in ``platform_people``, its codes redeemable from any
platform's ``/pair``), the command set, the inbound events (``platform_events``: a
message stored once under its key before it is handled, in order within its lane), the
paced ``Outbound`` with its outbox and redelivery rows, the cards' store, the hub's events
rendered in order per source, and the background tasks. A platform adds its transport,
its rendering (a sender, a ``CardShelf``, an ``Activity``) and how a message is handled;
``deliver_with`` (its client) and ``attach`` plug those in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, Self, TypeVar

from bot.delivery import (
    CardStore,
    EventStore,
    KeyedLocks,
    Outbound,
    OutboxStore,
    Pacing,
    PlatformClient,
    RetrySchedule,
    Tenure,
)
from bot.platform.access import Access, PairingDesk
from bot.platform.handover import hand_over_withdrawal
from bot.platform.jobs import Jobs
from bot.platform.lanes import Lanes
from bot.platform.menu import chat_commands
from bot.platform.open_cards import OpenCards
from bot.platform.outbox import Outbox
from bot.platform.outgoing import Activity, CardShelf, EventRenderer
from bot.platform.pairing import PairingStore
from bot.platform.protocols import OutboxSender, PairingCode
from bot.platform.tasks import Background, Runtime
from engine.approval import Decider
from engine.failpoints import failpoint
from engine.hub import ChatHub, HubEvent
from engine.store import Database
from memory.service import MemoryService

__all__ = ["Front", "FrontConfig", "Platform", "Stored", "stop_platform"]

log = logging.getLogger(__name__)

Json = dict[str, Any]


class Stored(Protocol):
    """A platform's inbound message as it is stored and handed to its lane."""

    @property
    def key(self) -> str:
        """Its id in ``platform_events`` (the platform's message id)."""

    @property
    def lane(self) -> str:
        """What it keeps its order within (a channel, a thread)."""

    @property
    def source(self) -> str:
        """The hub's source it is said in."""

    def to_json(self) -> Json: ...

    @classmethod
    def from_json(cls, data: Json) -> Self: ...


In = TypeVar("In", bound=Stored)


#: How long an edit waits for its message to come (``Front.edit``).
EDIT_WAIT_S = 120.0


@dataclass(slots=True)
class _Edits:
    until: float
    works: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FrontConfig:
    """Who may talk to the bot, and how this process shares the platform."""

    owner_id: str | None = None
    allowed_user_ids: frozenset[str] = frozenset()
    pairing_reminder_s: float = 600.0
    #: One process: every pending outbox row is due at start (a fleet finds dead ones').
    recover_outbox_at_start: bool = True
    #: A fleet's process (``None``: the only one).
    process_id: str | None = None
    #: How a command is written on the platform (Slack's: ``/chathub <command>``).
    command_prefix: str = "/"


class Front(Generic[In]):
    def __init__(
        self,
        name: str,
        stored: type[In],
        hub: ChatHub,
        db: Database,
        pacing: Pacing,
        config: FrontConfig,
        *,
        welcome: Callable[[PairingCode], Awaitable[None]],
        schedule: RetrySchedule | None = None,
        tenure: Tenure | None = None,
        members: Callable[[], int] | None = None,
        jobs: Jobs | None = None,
        memory: MemoryService | None = None,
        desk: PairingDesk | None = None,
    ) -> None:
        """``tenure`` and ``members``: a fleet member's (its rows' hand-back; how many
        processes share the platform's cap); ``desk``: every platform's pairing."""
        self.name, self.prefix = name, f"{name}:"
        self.hub, self.config = hub, config
        self._stored = stored
        self.background = Background()
        self.runtime = Runtime(time.monotonic, asyncio.sleep, self.background)
        self.access = Access(
            PairingStore(db, name),
            allowed=config.allowed_user_ids,
            owner=config.owner_id,
            clock=time.monotonic,
            reminder_s=config.pairing_reminder_s,
            command_prefix=config.command_prefix,
        )
        desk = desk if desk is not None else PairingDesk()
        desk.add(self.access, welcome)
        self.commands = chat_commands(desk, jobs, memory)
        self.events = EventStore(db, name)
        self.card_store = CardStore(db, name)
        self._outbox_store = OutboxStore(db, name, process_id=config.process_id)
        self._pacing, self._schedule = pacing, schedule
        self._tenure, self._members = tenure, members or (lambda: 1)

    def deliver_with(self, client: PlatformClient) -> Outbound:
        """The paced ``Outbound`` every call to the platform goes through, over its client
        (made once the platform's library object exists: it may need the commands)."""
        self.outbound = Outbound(
            client,
            self._outbox_store,
            self._pacing,
            schedule=self._schedule,
            tenure=self._tenure,
            members=self._members,
        )
        return self.outbound

    def attach(
        self,
        sender: OutboxSender[Any, Any],
        cards: CardShelf,
        activity: Activity,
        handle: Callable[[In], Awaitable[bool]],
        *,
        progress_interval_s: float,
    ) -> None:
        """The platform's parts: its sender behind the outbox (replies of its sources
        recorded with their answers), its cards and activity for the hub's events, and
        ``handle`` for a stored message (True: it marked the message handled itself)."""
        self.outbox: Outbox[Any, Any] = Outbox(
            sender, clock=time.monotonic, progress_interval_s=progress_interval_s
        )
        self.outbox.attach(self.hub, self.prefix)
        self._handle = handle
        self._renderer = EventRenderer(
            self.prefix,
            self.outbox,
            cards,
            activity,
            streaming=False,
            busy=lambda source: self.hub.has_work(source),
        )
        self._incoming: Lanes[str, In] = Lanes(self._handle_in_lane, f"{self.name}-in")
        #: Keys queued or being handled here: a take-over never queues one twice.
        self._queued: set[str] = set()
        #: Edits of messages still on their way here, by the message's key (``edit``).
        self._edits: dict[str, _Edits] = {}
        self._arrivals: KeyedLocks[str] = KeyedLocks()  # a lane's arrivals, in order
        self._outgoing: Lanes[str, HubEvent] = Lanes(self._renderer.render, f"{self.name}-out")

    # -- life cycle ----------------------------------------------------------------------

    async def start(self, cards: OpenCards) -> None:
        """Local state and the hub subscription, before the hub recovers; no platform
        call. The messages stored but not handled before a stop wait for ``take_over``,
        which the service calls once the hub started and the bot knows who it is (until
        2026-12-06 they were handled here: before the hub's recovery, which queued them
        a second time, and before the bot knew its own id, so a mention stayed in the
        text and "@bot /new" went to the model; found by review)."""
        await self.access.load()
        await cards.load(self.runtime)
        self.background.spawn(self._renderer.pump(self.hub.events(), self._outgoing.submit))
        if self.config.recover_outbox_at_start:
            await self.outbound.recover()

    async def take_over(self, *, addressed: Callable[[In], Awaitable[bool]] | None = None) -> None:
        """The messages stored but not handled, to their lanes: this process's before a
        restart, or a dead fleet member's (one handled twice is refused by its mark).

        ``addressed`` (the check a message passed when it was stored) is made again of
        each for what it notes: a mention joins its thread, so a follow-up sent there
        while the mention waits is for the bot (until 2026-12-07 it was dropped after a
        restart: the thread had neither been joined in this process nor had a session
        yet; found by review). Its answer is not asked: each was for the bot then."""
        for payload in await self.events.unhandled():
            try:
                stored = self._stored.from_json(payload)
            except (TypeError, ValueError):
                log.warning("a stored %s event could not be read; left as it is", self.name)
                continue
            if stored.key not in self._queued:
                if addressed is not None:
                    await self._noted(addressed, stored)
                self.queue(stored)

    async def _noted(self, addressed: Callable[[In], Awaitable[bool]], stored: In) -> None:
        """What ``addressed`` notes; a platform that fails to say (Matrix asks the
        homeserver) holds up no take-over: the message is queued all the same."""
        try:
            await addressed(stored)
        except Exception as exc:
            log.info("taking over a stored %s event: %s (queued all the same)", self.name, exc)

    async def close(self, grace_s: float = Lanes.GRACE_S) -> None:
        """``grace_s``: how long the item each lane has in hand may take to finish."""
        await self.background.close()
        await self._incoming.close(grace_s)
        await self._outgoing.close(grace_s)
        await self.outbound.flush()

    async def drain(self) -> None:
        await self.handled()
        await self._outgoing.join()

    async def stop_taking(self, grace_s: float = Lanes.GRACE_S) -> None:
        """The messages in hand get ``grace_s`` to be handled; no more are (a stop)."""
        await self._incoming.close(grace_s)

    async def handled(self) -> None:
        """Until every message taken so far is handled (a fleet's receiver lets its lease
        go only then)."""
        await self._incoming.join()

    # -- messages ------------------------------------------------------------------------

    async def take(
        self,
        stored: In,
        *,
        addressed: Callable[[In], Awaitable[bool]] | None = None,
        park: Callable[[In], bool] | None = None,
    ) -> int:
        """Stored (under its key) and queued in its lane when new and, when ``addressed``
        says, for the bot; 1 when it was. ``park`` may keep a stored message back (True:
        the caller queues it later, a conversation still being caught up). A lane's
        messages are stored and queued (or parked) in the order they came to ``take``,
        though each comes in a task of its own (slack_sdk's envelopes, discord.py's
        events) and awaits the store and ``addressed`` (a mention overtook a line whose
        thread was being looked up; found by review on 2026-12-07)."""
        async with self._arrivals.hold(stored.lane):
            if addressed is not None and not await addressed(stored):
                return 0
            new = await self._record(stored)
            if new and not (park is not None and park(stored)):
                self.queue(stored)
            return int(new)

    async def _record(self, stored: In) -> bool:
        """Stored under its key, to be queued by the caller (``queue``; a take-over does not
        queue it meanwhile); whether it was new."""
        new = bool(await self.events.record([(stored.key, None, stored.to_json())]))
        if new:
            self._queued.add(stored.key)
        return new

    def queue(self, stored: In) -> None:
        """A recorded message to its lane."""
        self._queued.add(stored.key)
        self._incoming.submit(stored.lane, stored)

    async def edit(self, key: str, work: Callable[[], Awaitable[None]]) -> None:
        """``work``, a person's edit of message ``key``, done once the message is handed
        over: now when it is not on its way here, else after it is handled (queued in its
        lane or held back, ``park``), and again if it comes within ``EDIT_WAIT_S``. Each
        event comes in a task of its own (discord.py's, slack_sdk's), so an edit can
        overtake its message: until 2026-12-07 it found nothing waiting, and the words
        taken back were what the agent read (found by review). Not stored: lost with the
        process, as the platform's edit event is."""
        now = time.monotonic()
        self._forget_edits(now)
        self._edits.setdefault(key, _Edits(now + EDIT_WAIT_S)).works.append(work)
        if key in self._queued:
            log.info("an edit of %s message %s waits for it to be handled", self.name, key)
        else:
            await work()  # the message is in the hub already (or never comes)

    async def deleted(self, key: str, id_key: str, value: object) -> None:
        """Message ``key`` deleted: not read if it still waits for its turn (until
        2026-12-07 it was; found by review), after it is handed over when it is still on
        its way (``edit``). Where it was is read from its stored event: a message never
        stored was never for the bot. ``id_key``/``value``: its id in the hub's metadata."""

        async def withdraw() -> None:
            stored = await self.events.payload(key)
            if stored is not None:
                source = self._stored.from_json(stored).source
                await hand_over_withdrawal(self.hub, source, id_key, value)

        await self.edit(key, withdraw)

    def _forget_edits(self, now: float) -> None:
        """Edits kept for messages that never came (not for the bot, stored before)."""
        for key in [k for k, edits in self._edits.items() if edits.until < now]:
            if key not in self._queued:
                del self._edits[key]

    async def _handle_in_lane(self, _lane: str, stored: In) -> None:
        """Handled, then marked so (unless the hub's queue push marked it): a failure
        marks it too (a message that breaks its handler is not handed over forever), but
        a stop that cuts it short leaves it unhandled, for the next start. Its edits
        that came meanwhile follow."""
        failpoint("before_event_handled")
        try:
            await handled_then_marked(
                self._handle(stored), lambda: self.events.mark_handled(stored.key)
            )
        finally:
            self._queued.discard(stored.key)
            edits = self._edits.pop(stored.key, None)
        for work in edits.works if edits is not None else ():
            try:
                await work()
            except Exception:
                log.exception("an edit of %s message %s failed", self.name, stored.key)

    def decider(self, user_id: str | None) -> Decider:
        return self.access.decider(user_id)

    def is_allowed(self, user_id: str | None) -> bool:
        return self.access.is_allowed(user_id)


async def handled_then_marked(
    handling: Awaitable[bool], mark: Callable[[], Awaitable[None]]
) -> None:
    """Every platform's rule for a stored inbound event: ``mark`` it handled once
    ``handling`` is done, unless handling marked it (the hub's queue push does); a failure
    marks it too (an event that breaks its handler is not handed over forever), but a stop
    that cuts it short leaves it unhandled, for the next start."""
    try:
        marked = await handling
    except Exception:
        await mark()
        raise
    if not marked:
        failpoint("before_event_marked")
        await mark()


class Platform(Protocol):
    """A platform's adapter as its service stops it."""

    @property
    def front(self) -> Front[Any]: ...

    async def close(self) -> None: ...


async def stop_platform(tasks: Background, adapter: Platform | None) -> None:
    """A platform service's stop: its tasks and its messages in hand together (a fleet's
    election, stopping, lets its lease go once those are handled, which the lanes' close
    gives its grace to; one after the other, a stop waited for both, past the service's
    budget with three platforms), then the rest of the adapter."""
    closing = [tasks.close()]
    if adapter is not None:
        closing.append(adapter.front.stop_taking())
    await asyncio.gather(*closing)
    if adapter is not None:
        await adapter.close()
