"""``DiscordAdapter``: Discord messages and interactions into the hub, hub events back.

A dispatcher over parts with one job each: ``messages.py`` (a message into the hub),
``interactions.py`` (clicks, modals, slash commands), ``cards.py`` (cards shown and
closed), ``activity.py`` (typing), and from ``bot/platform`` the event renderer and the
outbox with ``sending.py`` as its sender. A message is stored once by its id
(``platform_events``) before it is handled, in order within its channel: a RESUME's
replay or a second receiver never makes it twice, and one stored but not handled when
the process died is handed over at the next start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

import discord

from bot.delivery import (
    OTHER,
    Pacing,
    PlatformError,
    RetrySchedule,
    Tenure,
)
from bot.discord.activity import ChannelActivity
from bot.discord.cards import DiscordCards
from bot.discord.gateway import IDENTIFY_GAP_S, DiscordGateway
from bot.discord.incoming import DISCORD, Incoming, is_said
from bot.discord.interactions import Interactions
from bot.discord.messages import MESSAGE_ID_KEY, DiscordMe, Listening, MessageHandler
from bot.discord.sending import DiscordClient, DiscordSender, discord_call
from bot.platform.access import WELCOME, PairingDesk
from bot.platform.failures import report_failure
from bot.platform.front import Front, FrontConfig
from bot.platform.jobs import Jobs
from bot.platform.protocols import PairingCode
from bot.platform.voice_mode import VoiceMode, voice_command
from bot.platform.voice_notes import VoiceNotes
from bot.platform.voice_out import Speak
from engine.approval import Decider
from engine.hub import ChatHub
from engine.store import Database, utcnow
from memory.service import MemoryService

__all__ = ["DiscordAdapter", "DiscordConfig"]

log = logging.getLogger(__name__)

#: After a new gateway session: the conversations of this long ago are read again...
CATCH_UP_WINDOW = timedelta(days=1)
#: ...found among the newest stored messages, read in pages of this many, at most this
#: many pages (a busy open channel stores every message: one page of its talk hid every
#: other conversation until 2026-12-06)...
CATCH_UP_EVENTS = 2000
CATCH_UP_PAGES = 25
#: ...at most this many conversations...
CATCH_UP_CHANNELS = 100
#: ...and at most this many messages each, oldest first (pages of 100: a mention among a
#: busy channel's talk during a restart is found; 50 read only the first 50 after).
CATCH_UP_MESSAGES = 300


@dataclass(slots=True)
class _Held:
    """A new session's live messages that wait for their conversation's catch-up."""

    #: The conversations still to read; ``None``: not known yet, every one waits.
    waiting: set[str] | None = None
    messages: list[Incoming] = field(default_factory=list)

    def holds(self, channel: str) -> bool:
        return self.waiting is None or channel in self.waiting

    def release(self, waiting: set[str]) -> list[Incoming]:
        """Only ``waiting``'s conversations wait from now on: the others' messages, in
        the order they were written (live ones and those the catch-up read wait
        together; snowflake ids grow with time)."""
        self.waiting = waiting
        going = [m for m in self.messages if m.channel_id not in waiting]
        self.messages = [m for m in self.messages if m.channel_id in waiting]
        return sorted(going, key=lambda m: int(m.message_id))


@dataclass(frozen=True, slots=True)
class DiscordConfig:
    """What the adapter is told by the service (``bot/discord/service.py``)."""

    front: FrontConfig = field(default_factory=FrontConfig)
    listening: Listening = field(default_factory=Listening)
    workspace: Path = Path("workspace")
    progress_interval_s: float = 2.0
    identify_gap_s: float = IDENTIFY_GAP_S


class DiscordAdapter:
    def __init__(
        self,
        hub: ChatHub,
        db: Database,
        config: DiscordConfig,
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
        speak: Speak | None = None,
    ) -> None:
        """``tenure`` and ``members``: a fleet member's (its rows' hand-back; how many
        processes share the bot's cap); ``desk``: every platform's pairing, for ``/pair``;
        ``voice``: audio attachments transcribed; ``voice_mode``: the chats whose replies
        are spoken (``/voice``), and ``speak`` what speaks them."""
        self.hub, self.config = hub, config
        self._me = DiscordMe()
        #: The gateway session's start, and its live messages waiting for the catch-up.
        self._began: datetime | None = None
        self._held: _Held | None = None
        self.front = front = Front(
            DISCORD,
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
        self.access, self.commands, self.events = front.access, front.commands, front.events
        if voice_mode is not None:  # before the gateway: slash commands come from the registry
            self.commands.register(voice_command(voice_mode))
        self.bot = bot = DiscordGateway(
            self,
            self.commands,
            message_content=config.listening.reads_content,
            identify_gap_s=config.identify_gap_s,
        )
        self.outbound = outbound = front.deliver_with(DiscordClient(bot, speak))
        self.sender = sender = DiscordSender(bot, outbound, voice_mode)
        self.cards = cards = DiscordCards(hub, front.card_store, sender)
        self.activity = activity = ChannelActivity(hub, sender, front.runtime)
        self._messages = messages = MessageHandler(
            hub,
            self._me,
            config.listening,
            self.access,
            self.commands,
            cards,
            sender,
            activity,
            config.workspace,
            self.events,
            voice,
            memory,
        )
        self._interactions = Interactions(
            hub,
            self.access,
            config.listening,
            cards,
            self.commands,
            messages.offer_pairing,
        )
        front.attach(
            sender, cards, activity, messages.handle, progress_interval_s=config.progress_interval_s
        )

    @property
    def bot_id(self) -> str | None:
        return self._me.id

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Local state and the hub subscription, before the hub recovers; no Discord call.
        Messages stored but not handled before a stop are handed over again."""
        await self.front.start(self.cards)

    async def close(self) -> None:
        await self.front.close()
        await self.bot.close()

    async def drain(self) -> None:
        await self.front.drain()

    # -- what the gateway delivers (``GatewaySink``) ------------------------------------------

    def known_as(self, bot_id: str) -> None:
        """The bot's own id, from the login (before any event is taken)."""
        self._me.id = bot_id

    def session_began(self) -> None:
        """READY arrived: a new gateway session, before any of its messages is taken.
        Its live messages wait for their conversation's catch-up (``ready``)."""
        held, previous = _Held(), self._held
        if previous is not None and previous.waiting is None and self._began is not None:
            # The last session's catch-up never began (a second READY cancels discord.py's
            # wait for the first one's guilds, so its on_ready never comes): what it held
            # waits for this one's, which reads from the last one's start (until
            # 2026-12-06 it waited for a restart; found by review).
            held.messages, previous.messages = previous.messages, []
        else:
            self._began = utcnow()
        self._held = held

    def ready(self, bot_id: str) -> None:
        """A new gateway session (a start, an IDENTIFY after INVALID_SESSION, a fleet's
        fail-over) is ready: what was written meanwhile is fetched (``catch_up``)."""
        self._me.id = bot_id
        held = self._held
        if held is None or self._began is None:  # no READY seen for it: a session of now
            began, held = utcnow(), _Held(waiting=set())
        else:
            began = self._began
        self.front.background.spawn(self.catch_up(began, held))

    async def catch_up(self, began: datetime, held: _Held) -> int:
        """Messages written while no session was open (Discord does not replay them to a
        new one): each conversation of the last day is read after its newest message
        stored before the session ``began``, and what is for the bot is taken as if the
        gateway had sent it, once (stored by id). A live message of a conversation not
        read yet waits in ``held`` until it is, so a channel's messages go in order. Until
        2026-12-06 the newest stored message was any, a live one too: one written right
        after READY made the catch-up read after it, and what was written while the bot
        was away was lost; one read after a live message was answered after it (both
        found by review). Returns how many were new."""
        taken = 0
        try:
            newest = await self._newest_stored(before=began)
            reading = list(newest.values())[:CATCH_UP_CHANNELS]
            self._let_go(held.release({last.channel_id for last in reading}))
            for last in reading:
                try:
                    taken += await self._read_after(last)
                except Exception:  # this conversation's; the others are still read (one
                    # message discord.py could not read ended the whole catch-up until
                    # 2026-12-07; found by review)
                    report_failure(log, f"catching up with Discord channel {last.channel_id}")
                finally:
                    self._let_go(held.release((held.waiting or set()) - {last.channel_id}))
        except Exception:
            report_failure(log, "catching up with Discord")
        finally:
            self._let_go(held.release(set()))
            if self._held is held:
                self._held = None
        if taken:
            log.info("caught up with %d Discord message(s) written while disconnected", taken)
        return taken

    async def _newest_stored(self, *, before: datetime) -> dict[str, Incoming]:
        """Each conversation's newest message stored in the window before ``before``, the
        most recently active first, up to ``CATCH_UP_CHANNELS`` of them."""
        since = utcnow() - CATCH_UP_WINDOW
        newest: dict[str, Incoming] = {}
        for _page in range(CATCH_UP_PAGES):
            page = await self.events.received(since, CATCH_UP_EVENTS, before=before)
            for payload, _at in page:
                try:
                    seen = Incoming.from_json(payload)
                    order = int(seen.message_id)  # snowflakes grow with time
                except (TypeError, ValueError):
                    continue
                known = newest.get(seen.channel_id)
                if known is None or order > int(known.message_id):
                    newest[seen.channel_id] = seen
            if len(page) < CATCH_UP_EVENTS or len(newest) >= CATCH_UP_CHANNELS:
                break
            before = page[-1][1]
        return newest

    def _let_go(self, messages: list[Incoming]) -> None:
        for message in messages:
            self.front.queue(message)

    async def _read_after(self, last: Incoming) -> int:
        guild = None if last.guild_id is None else int(last.guild_id)  # its roles known
        channel = self.bot.get_partial_messageable(int(last.channel_id), guild_id=guild)

        async def read() -> list[discord.Message]:
            # The newest ones after it, then in order: what was written while the bot was
            # away is the newest, and in a busy channel (its talk not stored) the oldest
            # 300 after the last mention held none of it (until 2026-12-07; found by review).
            after = discord.Object(int(last.message_id))
            history = channel.history(after=after, limit=CATCH_UP_MESSAGES, oldest_first=False)
            return [message async for message in history][::-1]

        try:
            messages = await self.outbound.call(
                last.channel_id, lambda: discord_call(read), kind=OTHER
            )
        except PlatformError as exc:
            log.info("could not read channel %s to catch up: %s", last.channel_id, exc)
            return 0
        taken = 0
        for message in filter(is_said, messages):
            # The channel's place as its stored message knew it (a partial channel cannot
            # tell a thread from a channel, nor a DM from a guild's).
            incoming = replace(
                Incoming.of(message, self._me.id),
                parent_id=last.parent_id,
                guild_id=last.guild_id,
                thread_owner=last.thread_owner,
            )
            taken += await self._take(incoming)
        return taken

    async def message(self, message: discord.Message) -> None:
        """Stored once (by id) when it is for the bot, then handled in its channel's lane.
        A failure here (the database away) is logged with the message's id: Discord does
        not send it again."""
        if not is_said(message):
            return  # Discord's own line ("started a thread: <name>"): no one said it
        try:
            await self._take(Incoming.of(message, self._me.id))
        except Exception:
            report_failure(log, f"receiving Discord message {message.id}")

    async def edited(self, message: discord.Message) -> None:
        """A person's correction of a message of theirs (Discord lets only its author
        edit it); a failure here is logged with the message's id."""
        if not is_said(message):
            return
        try:
            edited = Incoming.of(message, self._me.id)
            # After its message, which may still be on its way.
            await self.front.edit(edited.key, partial(self._messages.edited, edited))
        except Exception:
            report_failure(log, f"receiving an edit of Discord message {message.id}")

    async def deleted(self, message_id: str) -> None:
        """A message deleted (by its author, or a moderator) while it waits for its turn
        is not read (until 2026-12-07 a password pasted by mistake and deleted at once
        was still read, and maybe repeated; found by review). Where it was is read from
        its stored event: a message never stored was never for the bot."""
        try:
            await self.front.deleted(message_id, MESSAGE_ID_KEY, message_id)
        except Exception:
            report_failure(log, f"receiving the deletion of Discord message {message_id}")

    async def _take(self, incoming: Incoming) -> int:
        """Stored and queued when it is for the bot and new (it waits while its
        conversation is still to be caught up); 1 when it was."""
        if not self._messages.addressed(incoming):
            return 0
        held = self._held
        if held is None:
            return await self.front.take(incoming)

        def park(stored: Incoming) -> bool:
            """Kept back while its conversation is still to be read (not when it was let
            go meanwhile); in order with the rest of its channel (until 2026-12-07 stored
            outside that order: on PostgreSQL two quick messages could swap). The
            catch-up's own messages wait too: one it read that was newer than a held
            live one was queued before it (until 2026-12-07; found by review)."""
            if not held.holds(stored.channel_id):
                return False
            held.messages.append(stored)
            return True

        return await self.front.take(incoming, park=park)

    async def interaction(self, interaction: discord.Interaction) -> None:
        await self._interactions.handle(interaction)

    async def slash(self, interaction: discord.Interaction, name: str, argument: str) -> None:
        await self._interactions.slash(interaction, name, argument)

    async def _welcome(self, paired: PairingCode) -> None:
        await self.sender.say_in(paired.chat, WELCOME)

    def decider(self, user_id: str | None) -> Decider:
        return self.front.decider(user_id)

    def is_allowed(self, user_id: str | None) -> bool:
        return self.front.is_allowed(user_id)
