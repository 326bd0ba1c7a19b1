"""``TelegramAdapter``: Telegram updates into the hub, hub events back into chats.

A dispatcher over parts with one job each: ``messages.py`` (a message into the hub),
``callbacks.py`` (taps), ``bot.platform.outgoing`` (hub events into chats, through the platform
outbox with ``delivery.py`` as its sender), ``chat_cards.py`` and ``approvals.py``
(cards), ``progress.py`` (typing, streaming). Framework-neutral: it talks to Telegram
only through ``BotApi`` (either binding), stores what must survive a restart in
``TelegramStore``, and sends through ``Outbound``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from bot.delivery import Outbound
from bot.platform.access import Access, PairingDesk
from bot.platform.front import handled_then_marked
from bot.platform.lanes import Lanes
from bot.platform.outbox import Outbox
from bot.platform.outgoing import EventRenderer
from bot.platform.tasks import Background, Runtime
from bot.platform.voice_mode import VoiceMode
from bot.platform.voice_notes import VoiceNotes
from bot.telegram.chat_moves import moved_message
from bot.telegram.config import TelegramConfig
from bot.telegram.dispatch.access import PairedIds, PairingStore
from bot.telegram.dispatch.approvals import ApprovalTaps
from bot.telegram.dispatch.callbacks import Callbacks
from bot.telegram.dispatch.commands import telegram_commands
from bot.telegram.dispatch.jobs import JobsPanel
from bot.telegram.dispatch.memory import MemoryPanel
from bot.telegram.dispatch.messages import BotIdentity, MessageHandler
from bot.telegram.inbound.downloads import Downloads
from bot.telegram.inbound.updates import (
    Callback,
    ChatMove,
    Ignored,
    Message,
    chat_key,
    parse_update,
)
from bot.telegram.rendering.chat_cards import ChatCards
from bot.telegram.rendering.progress import ChatActivity
from bot.telegram.sending.api import BotApi, Json
from bot.telegram.sending.delivery import TelegramSender
from bot.telegram.store import TelegramStore
from engine.approval import Decider
from engine.hub import ChatHub, HubEvent
from memory.service import MemoryService

__all__ = ["PREFIX", "TelegramAdapter"]

#: Telegram's sources in the hub.
PREFIX = "telegram:"

log = logging.getLogger(__name__)


class TelegramAdapter:
    def __init__(
        self,
        hub: ChatHub,
        api: BotApi,
        store: TelegramStore,
        outbound: Outbound,
        config: TelegramConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jobs: JobsPanel | None = None,
        memory: MemoryService | None = None,
        desk: PairingDesk | None = None,
        voice: VoiceNotes | None = None,
        voice_mode: VoiceMode | None = None,
    ) -> None:
        """``voice``: voice notes transcribed; ``voice_mode``: the chats whose replies are
        spoken (``/voice``); ``memory``: long-term memory for ``/search``, ``/memory`` and ``/forget_me``
        (``None``, ``MEMORY_ENABLED=false``: they say it is switched off); ``desk``: every
        platform's pairing, for ``/pair`` (``None``: Telegram's alone)."""
        self.hub, self.api, self.store, self.outbound = hub, api, store, outbound
        self.config = config
        self._me = BotIdentity()
        self._background = background = Background()
        self.access = access = Access(
            PairingStore(store),
            allowed=config.allowed_user_ids,
            owner=config.owner_id,
            clock=clock,
            reminder_s=config.pairing_reminder_s,
        )
        self._paired = PairedIds(access)
        self.sender = sender = TelegramSender(api, outbound, voice_mode)
        self.outbox: Outbox[Any, Any] = Outbox(
            sender, clock=clock, progress_interval_s=config.progress_interval_s
        )
        self.outbox.attach(hub, PREFIX)
        self._runtime = runtime = Runtime(clock, sleep, background)
        self.cards = cards = ChatCards(hub, store.cards, sender)
        activity = ChatActivity(hub, sender, config, runtime)
        self._approvals = approvals = ApprovalTaps(
            hub, access, cards, sender, config.reject_window_s, runtime
        )
        panel = MemoryPanel(memory, sender)
        self.commands = telegram_commands(access, sender, jobs, panel, desk, voice_mode)
        downloads = Downloads(sender, config.workspace, config.max_download_bytes)
        self._messages = MessageHandler(
            hub,
            self._me,
            access,
            self.commands,
            cards,
            approvals,
            sender,
            downloads,
            activity,
            runtime,
            store.mark_handled,
            voice,
            album_quiet_s=config.album_quiet_s,
        )
        self._callbacks = Callbacks(access, sender, approvals, jobs, panel)
        self._events = EventRenderer(
            PREFIX, self.outbox, cards, activity, streaming=config.streaming, busy=hub.has_work
        )
        self._incoming: Lanes[int, Json] = Lanes(self._handle_in_lane, "tg-in")
        self._outgoing: Lanes[str, HubEvent] = Lanes(self._events.render, "tg-out")

    @property
    def bot_id(self) -> int | None:
        return self._me.id

    @bot_id.setter
    def bot_id(self, value: int | None) -> None:
        self._me.id = value

    @property
    def bot_username(self) -> str | None:
        return self._me.username

    @bot_username.setter
    def bot_username(self, value: str | None) -> None:
        self._me.username = value

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Local state and the hub subscription, before the hub recovers (answers to
        resumed turns reach their chats); no Telegram call: an outage must not hold up
        the hub. The caller's start-up calls (``startup.py``: getMe sets ``bot_id`` and
        ``bot_username``) come before any update. Deliveries recorded but unsent are due
        at once (``Redelivery``); answers stored without outbox rows are sent here."""
        await self.access.load()
        await self.cards.load(self._runtime)
        await self._approvals.restore_windows()
        self._background.spawn(self._events.pump(self.hub.events(), self._outgoing.submit))
        if self.config.recover_outbox_at_start:
            await self.outbound.recover()
        finals = await self.store.outbox.undelivered_finals()

        async def deliver_finals() -> None:
            for source, message_id, content in finals:
                try:
                    await self.outbox.final(source, message_id, content)
                except Exception:  # the database is away: found again at the next start
                    log.exception("delivering the stored answer %s failed", message_id)

        if finals:
            self._background.spawn(deliver_finals())

    async def close(self) -> None:
        await self._background.close()  # typing indicators and reject windows included
        await self._incoming.close()
        await self._outgoing.close()
        await self.outbound.flush()

    def submit(self, update: Json) -> None:
        """Handle a stored update: in order within its chat, concurrently across chats."""
        self._incoming.submit(chat_key(update), update)

    async def drain(self) -> None:
        """Wait until every submitted update and every received event was handled."""
        await self.handled()
        await self._outgoing.join()

    async def handled(self) -> None:
        """Until every update submitted so far is handled (a fleet's receiver lets its
        lease go only then), and every album gathered from them sent."""
        await self._incoming.join()
        await self._messages.gathered()

    # -- incoming ------------------------------------------------------------------------

    async def _handle_in_lane(self, _key: int, update: Json) -> None:
        update_id = update.get("update_id")

        async def mark() -> None:
            if isinstance(update_id, int):
                await self.store.mark_handled(update_id)

        await handled_then_marked(self.handle(update), mark)

    async def handle(self, update: Json) -> bool:
        """Act on one update; True when it was marked handled along the way.

        Junk never gets this far (``parse_update`` checks every field).
        """
        incoming = parse_update(update)
        if isinstance(incoming, Message | Callback) and incoming.chat_id is not None:
            incoming = await self._in_its_conversation(incoming)
        match incoming:
            case Ignored(reason=reason):
                log.info("ignored update %s: %s", incoming.update_id, reason)
            case ChatMove(old_chat_id=old, new_chat_id=new):
                await self.store.moves.record(old, new)
            case Message(edited=True):
                await self._messages.edited(incoming)
            case Message():
                return await self._messages.handle(incoming)
            case Callback():
                await self._callbacks.handle(incoming)
        return False

    async def _in_its_conversation(self, incoming: Message | Callback) -> Message | Callback:
        """A former group's supergroup speaks in the group's conversation, its messages
        known as moved (``bot/telegram/chat_moves.py``)."""
        assert incoming.chat_id is not None
        original = await self.store.moves.original(incoming.chat_id)
        if original == incoming.chat_id:
            return incoming
        if isinstance(incoming, Callback):
            message = incoming.message_id
            return replace(
                incoming,
                chat_id=original,
                message_id=None if message is None else moved_message(message),
            )
        reply_to = incoming.reply_to_message_id
        return replace(
            incoming,
            chat_id=original,
            message_id=moved_message(incoming.message_id),
            reply_to_message_id=None if reply_to is None else moved_message(reply_to),
        )

    def decider(self, user_id: int | None) -> Decider:
        """Who taps a card or replies to it, for the ``APPROVERS`` rule."""
        return self.access.decider(user_id)

    def is_allowed(self, user_id: int | None) -> bool:
        return self.access.is_allowed(user_id)
