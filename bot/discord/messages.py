"""A Discord message, from its stored form to the hub (or to its one answer here).

In order: bots (this one included) are ignored; in a guild only the configured guilds,
and there only what mentions the bot (or anything in an open channel); strangers get a
pairing code in their DM; ``/commands`` typed as text run from the registry; a message may
answer a question; files are downloaded; the rest becomes a hub message, stored and
marked handled in one commit.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import discord

from bot.delivery import CardRow, EventStore, PlatformError
from bot.discord.activity import ChannelActivity
from bot.discord.cards import DiscordCards
from bot.discord.incoming import DISCORD, REPLY_TO_KEY, Attachment, Incoming, source_of
from bot.discord.sending import DiscordError, DiscordSender, discord_call
from bot.platform.access import Access
from bot.platform.commands import ABOUT_A_CONVERSATION, CommandRegistry
from bot.platform.failures import SORRY_MESSAGE, report_failure
from bot.platform.handover import hand_over, hand_over_edit, marking
from bot.platform.outgoing import typing_for_its_turn
from bot.platform.voice_notes import VoiceNotes
from engine.hub import ChatHub
from engine.store import SENDER_KEY
from memory.service import MemoryService

__all__ = ["UNREADABLE_MESSAGE", "DiscordMe", "Listening", "MessageHandler"]

log = logging.getLogger(__name__)

UNREADABLE_MESSAGE = "I cannot read this kind of message yet; please send text or a file."
#: Discord may keep a message's text from a bot without the message content intent when
#: it mentions the bot's role rather than the bot.
ROLE_ONLY_MESSAGE = "I could not read that: please mention me by name, not by my role."
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
#: Discord: "A thread has already been created for this message".
THREAD_EXISTS = 160004
#: A message's Discord id in its metadata (an edit finds it so while it waits).
MESSAGE_ID_KEY = "discord_message_id"
_COMMAND = re.compile(r"^/([a-z0-9_]{1,32})(?:\s+(.*))?$", re.DOTALL)


@dataclass(slots=True)
class DiscordMe:
    """Who the bot is, known once the gateway is READY."""

    id: str | None = None


@dataclass(frozen=True, slots=True)
class Listening:
    """Where the bot listens: its guilds (none: DMs only), channels open to every message,
    channels where a mention starts a thread; whether it reads messages that do not
    mention it (the MESSAGE_CONTENT intent: then its own threads need no mention)."""

    guilds: frozenset[str] = frozenset()
    open_channels: frozenset[str] = frozenset()
    thread_channels: frozenset[str] = frozenset()
    reads_content: bool = False
    max_download_bytes: int = 25 * 1024 * 1024

    def starts_threads(self, parent_id: str | None, channel_id: str) -> bool:
        """A channel where a mention starts a thread, not one of its threads: each thread
        is a conversation, the channel itself none."""
        return parent_id is None and channel_id in self.thread_channels


#: A command about one conversation (``ABOUT_A_CONVERSATION``) in a channel whose threads
#: are the conversations.
IN_ITS_THREAD = (
    "In this channel each thread is its own conversation: use /{name} in the thread it is about."
)


class MessageHandler:
    def __init__(
        self,
        hub: ChatHub,
        me: DiscordMe,
        listening: Listening,
        access: Access,
        commands: CommandRegistry,
        cards: DiscordCards,
        sender: DiscordSender,
        activity: ChannelActivity,
        workspace: Path,
        events: EventStore,
        voice: VoiceNotes | None = None,
        memory: MemoryService | None = None,
    ) -> None:
        """``events``: where a thread the bot starts is recorded (its catch-up reads it);
        ``voice``: audio attachments and voice messages transcribed; ``memory``: told of
        each DM, one person's conversation (its source does not say so)."""
        self._hub = hub
        self._me = me
        self._listening = listening
        self._access = access
        self._commands = commands
        self._cards = cards
        self._sender = sender
        self._activity = activity
        self._workspace = workspace
        self._events = events
        self._voice = voice
        self._memory = memory

    async def handle(self, m: Incoming) -> bool:
        """True when the event was marked handled along the way. A failure of ours is
        logged with a short error id, and the sender told that id: never the exception."""
        place = [m.channel_id]  # the thread it began, once it began one
        try:
            return await self._on_message(m, place)
        except Exception:
            error = report_failure(log, f"message {m.message_id} in channel {m.channel_id}")
            if self._access.is_allowed(m.user_id):  # a stranger learns nothing more
                # Where the talk goes on: the parent channel heard of a thread's failure
                # until 2026-12-06.
                await self._sender.say_in(place[-1], SORRY_MESSAGE.format(error=error))
            return False

    async def edited(self, m: Incoming) -> None:
        """A person's correction of a message that still waits for its turn: the turn
        reads it as corrected (until 2026-12-07 every edit was ignored, and the agent
        acted on the words taken back). One read already keeps its answer; a message
        with a sound file keeps its words (they hold what was heard); one with other
        files is corrected too (they are named apart: until 2026-12-07 its edit was
        ignored; found by review). A channel message the bot answers in a thread of its
        own waits in that thread: the channel's threads are looked in too."""
        heard = any(a.voice or (a.content_type or "").startswith("audio/") for a in m.attachments)
        if heard or not self.addressed(m) or not self._access.is_allowed(m.user_id):
            return
        text = m.text(self._me.id)
        if not text or _COMMAND.match(text):
            return
        await hand_over_edit(
            self._hub, m.source, MESSAGE_ID_KEY, m.message_id, text, by=m.user_id, threads=True
        )

    def addressed(self, m: Incoming) -> bool:
        """Whether the bot answers ``m`` at all (checked before anything is stored)."""
        if m.is_bot or m.user_id == self._me.id:
            return False
        if m.is_dm:
            return True
        if m.guild_id not in self._listening.guilds:
            return False
        channel = m.parent_id or m.channel_id
        if m.mentions_me or channel in self._listening.open_channels:
            return True
        if m.replies_to_me and self._listening.reads_content:
            return True  # its ping switched off (until 2026-12-07 a question waited for good)
        own_thread = m.parent_id is not None and m.thread_owner == self._me.id
        return own_thread and self._listening.reads_content

    async def _on_message(self, m: Incoming, place: list[str]) -> bool:
        if not self.addressed(m):
            return False
        say = self._sender.say_in
        if not self._access.is_allowed(m.user_id):
            if m.is_dm:
                await self._offer_pairing(m)
            return False
        if m.is_dm:
            await self.seen_direct(m.channel_id)
        text = m.text(self._me.id)
        command = _COMMAND.match(text)
        if command is not None:
            name, argument = command.group(1), command.group(2) or ""
            if self._listening.starts_threads(m.parent_id, m.channel_id) and (
                name in ABOUT_A_CONVERSATION
            ):
                await say(m.channel_id, IN_ITS_THREAD.format(name=name))
                return False
            context = self._access.command_context(
                self._hub,
                m.source,
                argument.strip(),
                m.user_id,
                also=marking(DISCORD, m.message_id),
            )
            reply = await self._commands.run(name, context)
            if reply:
                await say(m.channel_id, reply)
            return False
        question = await self._cards.question_now(m.source, reply_to=m.reply_to or None)
        if question is None and self._listening.starts_threads(m.parent_id, m.channel_id):
            m = await self._in_a_thread(m, text)
            place.append(m.channel_id)
        attachments, problems = await self._download(m)
        if self._voice is not None and attachments:
            heard = await self._voice.hear(attachments)
            attachments, problems = heard.attachments, problems + heard.problems
            if heard.quotes:  # the person sees what was heard before the answer
                await say(m.channel_id, heard.quotes)
            text = "\n".join([text, *heard.texts]).strip()
        if problems:
            await say(m.channel_id, "⚠️ " + " ".join(problems))
        if not text and not attachments:
            if not problems:
                withheld = m.my_role is not None and not self._listening.reads_content
                unread = ROLE_ONLY_MESSAGE if withheld else UNREADABLE_MESSAGE
                await say(m.channel_id, unread)
            return False
        # An open question is answered by the whole message: its voice heard, its files
        # named (they were dropped, a voice answer was lost behind the waiting turn).
        if question is not None and await self._answer_question(m, question, text, attachments):
            return False
        metadata: dict[str, Any] = {
            MESSAGE_ID_KEY: m.message_id,
            SENDER_KEY: {"id": m.user_id, "name": m.user_name},
        }
        if attachments:
            metadata["attachments"] = attachments
        if m.guild_id is not None and m.parent_id is None:
            metadata[REPLY_TO_KEY] = m.message_id  # its answer replies to it
        handed = await hand_over(self._hub, DISCORD, m.message_id, m.source, text, metadata)
        if handed.refusal is not None:
            await say(m.channel_id, handed.refusal)
            return False
        if handed.before:
            return True
        await typing_for_its_turn(self._activity, self._cards, m.source)
        return True

    async def seen_direct(self, channel_id: str) -> None:
        """A DM channel met: its answers reply to no message, and memory takes it as one
        person's conversation (until 2026-12-07 a group's: only the owner could switch
        memory off in their own DM, and it showed only what was learned there)."""
        self._sender.seen_direct(channel_id)
        if self._memory is not None:
            await self._memory.note_personal(source_of(channel_id))

    async def _in_a_thread(self, m: Incoming, text: str) -> Incoming:
        """The message as the start of a thread on it (its own source from now on); when
        Discord refuses one (permissions), the channel's conversation it stays."""
        channel = self._sender.bot.get_channel(int(m.channel_id))
        if not isinstance(channel, discord.TextChannel):
            return m
        message = channel.get_partial_message(int(m.message_id))
        name = " ".join(text.split())[:80] or f"Conversation with {m.user_name}"[:80]
        try:
            thread_id = str((await discord_call(lambda: message.create_thread(name=name))).id)
        except DiscordError as exc:
            if exc.code != THREAD_EXISTS:
                log.warning("could not start a thread in %s: %s", m.channel_id, exc.description)
                return m
            # Started before a crash (the message handed over again): its thread, whose
            # id is the message's; the answer went to the channel instead.
            thread_id = m.message_id
        in_thread = replace(
            m, parent_id=m.channel_id, channel_id=thread_id, thread_owner=self._me.id
        )
        # Recorded as handled, for the catch-up after a restart: it reads a conversation
        # after its newest stored message, and the thread had none (the message that
        # began it is stored in the channel), so a reply there while away was lost.
        await self._events.record(
            [(f"thread:{thread_id}", None, in_thread.to_json())], handled=True
        )
        return in_thread

    async def _offer_pairing(self, m: Incoming) -> None:
        await self.offer_pairing(m.user_id, m.channel_id, m.user_name, self._sender.say_in)

    async def offer_pairing(
        self, user_id: str, channel_id: str, name: str, tell: Callable[[str, str], Awaitable[None]]
    ) -> bool:
        """A stranger wrote in their DM: ``tell`` them their pairing code (not again within
        the reminder window), and the owner; whether they were told."""
        offer = await self._access.offer_pairing(user_id, channel_id, name)
        if offer.to_user is not None:
            await tell(channel_id, offer.to_user)
        owner = self._access.owner
        if offer.to_owner is not None and owner is not None:
            await self.say_to_user(owner, offer.to_owner)
        return offer.to_user is not None

    async def say_to_user(self, user_id: str, text: str) -> None:
        """A DM to ``user_id`` (its channel opened first); a failure is logged."""
        bot = self._sender.bot
        try:
            channel = await discord_call(lambda: bot.create_dm(discord.Object(int(user_id))))
        except PlatformError as exc:
            log.warning("could not open a DM with %s: %s", user_id, exc.description)
            return
        await self._sender.say_in(str(channel.id), text)

    async def _answer_question(
        self, m: Incoming, card: CardRow, text: str, attachments: list[dict[str, Any]]
    ) -> bool:
        """A reply to an open question, or any plain message while one is open, answers it
        (the card shows who did, its button gone: until 2026-12-06 it kept its "✍️ Answer"
        button, which then said it had expired; found by review)."""
        return await self._cards.answer(
            card,
            text,
            by=m.user_name,
            also=marking(DISCORD, m.message_id),
            goes_on=partial(self._activity.start_typing, m.source),
            attachments=attachments,
            decider=self._access.decider(m.user_id),
        )

    async def _download(self, m: Incoming) -> tuple[list[dict[str, Any]], list[str]]:
        """The message's files saved under ``uploads/discord/<channel>/``, and a sentence
        for each one that could not be (too large, or the download failed)."""
        attachments: list[dict[str, Any]] = []
        problems: list[str] = []
        if not m.attachments:
            return attachments, problems
        limit = self._listening.max_download_bytes
        folder = Path("uploads") / "discord" / m.channel_id
        for file in m.attachments:
            too_long = self._voice_refusal(file)
            if too_long is not None:
                problems.append(too_long)
                continue
            if file.size > limit:
                problems.append(
                    f"{file.filename} is too large to download (the limit is {limit / 2**20:g} MB)."
                )
                continue
            relative = folder / _SAFE_NAME.sub("_", f"{file.id}_{file.filename}")[:150]
            try:
                data = await self._fetch(file)
                target = self._workspace / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            except (PlatformError, OSError) as exc:
                log.warning("download of attachment %s failed: %s", file.id, exc)
                problems.append(f"I could not download {file.filename}.")
                continue
            attachments.append(
                {
                    "path": relative.as_posix(),
                    "name": file.filename,
                    "kind": _kind(file),
                    "mime_type": file.content_type,
                    "size": len(data),
                }
            )
        return attachments, problems

    def _voice_refusal(self, file: Attachment) -> str | None:
        """A voice file too long or too large to transcribe (never downloaded)."""
        if self._voice is None:
            return None
        seconds = int(file.seconds) if file.seconds is not None else None
        return self._voice.refusal(_kind(file), file.filename, file.size, seconds)

    async def _fetch(self, file: Attachment) -> bytes:
        http = self._sender.bot.http
        data = await discord_call(lambda: http.get_from_cdn(file.url))
        if len(data) > self._listening.max_download_bytes:
            raise OSError("larger than the message said")
        return data


def _kind(file: Attachment) -> str:
    mime = file.content_type or ""
    if file.voice:
        return "voice"
    if mime.startswith("image/"):
        return "photo"
    if mime.startswith("audio/"):
        return "audio"
    if mime.startswith("video/"):
        return "video"
    return "document"
