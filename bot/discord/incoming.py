"""A Discord message as the adapter handles it, and the sources it belongs to.

``Incoming`` is parsed once from discord.py's ``Message`` and stored as JSON in the
delivery layer's events (``platform_events``, by message id): a message is handed to the
hub at most once, also across a RESUME's replay and a restart. Sources: a DM or a guild
channel is ``discord:<channel>``, a thread ``discord:<parent channel>:<thread>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import discord

__all__ = [
    "DISCORD",
    "PREFIX",
    "REPLY_TO_KEY",
    "Attachment",
    "Incoming",
    "mentions_of",
    "parse_source",
    "source_of",
]

#: Discord's name in the delivery layer's tables.
DISCORD = "discord"
PREFIX = "discord:"

Json = dict[str, Any]

#: Heads what a forwarded message said, in the text the model reads.
FORWARDED = "[Forwarded message]"
_MAX_NAME = 100


#: A message's metadata key naming it as the one the answer replies to (a server
#: channel's message: DMs and threads need no reply).
REPLY_TO_KEY = "discord_reply_to"


def source_of(channel_id: str, thread_id: str | None = None) -> str:
    return f"{PREFIX}{channel_id}" if thread_id is None else f"{PREFIX}{channel_id}:{thread_id}"


def parse_source(source: str) -> tuple[str, str | None]:
    """``(channel, thread)`` of a Discord source; a ValueError for anything else."""
    parts = source.removeprefix(PREFIX).split(":") if source.startswith(PREFIX) else []
    if len(parts) not in (1, 2) or not all(p.isascii() and p.isdigit() for p in parts):
        raise ValueError(f"not a Discord source: {source!r}")
    return parts[0], (parts[1] if len(parts) == 2 else None)


def target_of(source: str) -> str:
    """The channel a source's messages are posted in (a thread is a channel)."""
    channel, thread = parse_source(source)
    return thread or channel


def mentions_of(bot_id: str) -> re.Pattern[str]:
    """The bot's mention in a message's text (``<@id>`` or the older ``<@!id>``)."""
    return re.compile(rf"<@!?{re.escape(bot_id)}>")


@dataclass(frozen=True, slots=True)
class Attachment:
    id: str
    filename: str
    size: int
    url: str
    content_type: str | None = None
    #: Recorded as a voice message in Discord's client, and its length.
    voice: bool = False
    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Incoming:
    message_id: str
    #: The channel it was written in (a thread's own id in a thread).
    channel_id: str
    #: A thread's channel; ``None`` outside threads.
    parent_id: str | None
    #: ``None``: a DM.
    guild_id: str | None
    user_id: str
    user_name: str
    is_bot: bool
    content: str
    mentions_me: bool
    attachments: tuple[Attachment, ...] = ()
    embeds: int = 0
    reply_to: str | None = None
    #: Who started the thread it was written in (``None`` outside threads).
    thread_owner: str | None = None
    #: The bot's own role in the guild (made for it when it was added) when the message
    #: mentions it: people pick it from the mention list as often as the bot's name.
    my_role: str | None = None
    #: A reply to one of the bot's own messages (its ping may be switched off).
    replies_to_me: bool = False

    @property
    def key(self) -> str:
        """Its id in the events store: Discord's message id."""
        return self.message_id

    @property
    def lane(self) -> str:
        """Messages keep their order within their channel (a thread is one)."""
        return self.channel_id

    @property
    def is_dm(self) -> bool:
        return self.guild_id is None

    @property
    def source(self) -> str:
        if self.parent_id is not None:
            return source_of(self.parent_id, self.channel_id)
        return source_of(self.channel_id)

    @classmethod
    def of(cls, message: discord.Message, bot_id: str | None) -> Incoming:
        channel = message.channel
        thread = channel if isinstance(channel, discord.Thread) else None
        parent = thread.parent_id if thread is not None else None
        owner = thread.owner_id if thread is not None else None
        author = message.author
        # The mentions Discord lists, not only those written in the text: a reply pings its
        # author, and was not for the bot until 2026-12-06 (found by review).
        mentions_me = bot_id is not None and (
            any(str(u) == bot_id for u in message.raw_mentions)
            or any(str(u.id) == bot_id for u in message.mentions)
        )
        my_role = _my_role(message)
        if my_role is not None:
            mentions_me = True
        reference = message.reference
        # A forward carries the message it forwards as a snapshot (its own text is empty,
        # or a comment): that is what was said (until 2026-12-06 it was "a kind of message
        # I cannot read", and the forwarded message's id became the reply's; found by review).
        forwarded = reference is not None and reference.type is discord.MessageReferenceType.forward
        snapshots = message.message_snapshots if forwarded else []
        content = message.content or ""
        for snapshot in snapshots:
            # One with nothing to read (embeds, a sticker, a poll) is no forward to the
            # model: until 2026-12-07 it got an empty "[Forwarded message]" (found by review).
            if snapshot.content or snapshot.attachments:
                content = f"{content}\n\n{FORWARDED}\n{snapshot.content}".lstrip("\n")
        files = [*message.attachments, *(a for s in snapshots for a in s.attachments)]
        return cls(
            message_id=str(message.id),
            channel_id=str(message.channel.id),
            parent_id=None if parent is None else str(parent),
            guild_id=_guild_id(message),
            user_id=str(author.id),
            user_name=(author.display_name or author.name or str(author.id))[:_MAX_NAME],
            is_bot=bool(author.bot),
            content=content,
            mentions_me=mentions_me,
            attachments=tuple(
                Attachment(
                    str(a.id),
                    a.filename,
                    a.size,
                    a.url,
                    a.content_type,
                    a.is_voice_message(),
                    a.duration,
                )
                for a in files
            ),
            embeds=len(message.embeds) + sum(len(s.embeds) for s in snapshots),
            reply_to=(
                str(reference.message_id)
                if reference is not None and reference.message_id is not None and not forwarded
                else None
            ),
            thread_owner=None if owner is None else str(owner),
            my_role=my_role,
            replies_to_me=bot_id is not None and _replied_to(reference) == bot_id,
        )

    def text(self, bot_id: str | None) -> str:
        """The content without the bot's own mention (by name or by its role)."""
        content = self.content
        if self.my_role is not None:
            content = content.replace(f"<@&{self.my_role}>", "")
        if bot_id is None:
            return content.strip()
        return mentions_of(bot_id).sub("", content).strip()

    def to_json(self) -> Json:
        data: Json = {k: getattr(self, k) for k in self.__slots__ if k != "attachments"}
        data["attachments"] = [{k: getattr(a, k) for k in a.__slots__} for a in self.attachments]
        return data

    @classmethod
    def from_json(cls, data: Json) -> Incoming:
        attachments = tuple(Attachment(**a) for a in data.get("attachments") or [])
        return cls(**{**data, "attachments": attachments})


def _replied_to(reference: discord.MessageReference | None) -> str | None:
    """The author of the message a reply answers, when Discord sent it along."""
    resolved = reference.resolved if reference is not None else None
    return str(resolved.author.id) if isinstance(resolved, discord.Message) else None


def _my_role(message: discord.Message) -> str | None:
    """The bot's managed role, when ``message`` mentions it (discord.py knows the role
    from the guild's GUILD_CREATE; read from the message's mentions, not its content,
    which Discord may withhold)."""
    guild = message.guild
    role = guild.self_role if guild is not None else None
    if role is None or role not in message.role_mentions:
        return None
    return str(role.id)


#: What a person writes; the rest are Discord's own lines ("pinned a message", "started a
#: thread: <its name>", "joined the server"), which are no one talking to the bot.
_SAID = (discord.MessageType.default, discord.MessageType.reply)


def is_said(message: discord.Message) -> bool:
    """Whether ``message`` is a person's (or a bot's) words, not one of Discord's lines."""
    return message.type in _SAID


def _guild_id(message: discord.Message) -> str | None:
    """The guild a message was written in; ``None`` for a DM (an uncached guild's channel
    still names it)."""
    if message.guild is not None:
        return str(message.guild.id)
    if isinstance(message.channel, discord.DMChannel | discord.GroupChannel):
        return None
    guild_id = getattr(message.channel, "guild_id", None)
    return None if guild_id is None else str(guild_id)
