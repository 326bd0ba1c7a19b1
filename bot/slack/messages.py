"""A Slack message, from its stored form to the hub (or to its one answer here).

In order: bots (this one included), edits and deletions never reach here
(``Incoming.of``); in a channel only what mentions the bot, or continues a thread the bot
is in; strangers get a pairing code in their DM (in a channel, a line only they see);
``/commands`` written as text (`` /stop``, or after the mention) run from the registry; a
message may answer a question; files are not read (said so); the rest becomes a hub
message, stored and marked handled in one commit.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from bot.platform.access import Access
from bot.platform.commands import CommandRegistry
from bot.platform.failures import SORRY_MESSAGE, report_failure
from bot.platform.handover import hand_over, hand_over_edit, marking
from bot.platform.outgoing import typing_for_its_turn
from bot.platform.threads import JoinedThreads
from bot.platform.voice_notes import Heard, VoiceNotes
from bot.slack.activity import ThreadActivity
from bot.slack.cards import SlackCards
from bot.slack.incoming import SLACK, Incoming, Place, source_of
from bot.slack.sending import (
    SlackError,
    SlackRetryLater,
    SlackSender,
    SlackUnavailable,
    slack_call,
)
from engine.hub import ChatHub
from engine.store import SENDER_KEY

__all__ = ["FILES_NOT_READ", "NOT_PAIRED", "MessageHandler", "SlackMe"]

log = logging.getLogger(__name__)

FILES_NOT_READ = "I cannot read files sent on Slack yet; please write what you need as text."
NOT_PAIRED = "You are not allowed to use this bot; send me a direct message to ask for access."
_COMMAND = re.compile(r"^/([a-z0-9_]{1,32})(?:\s+(.*))?$", re.DOTALL)
_MAX_NAME = 100
#: A person whose name Slack refused (``user_not_found``, missing scope) is asked again
#: only after this long, and nobody's while ``users.info`` is rate limited (Tier 4, about
#: 100 a minute) or Slack is down: a lookup per message would put a failing round trip
#: before every answer, and retried lookups would keep the rate limit going.
NAME_RETRY_S = 600.0
NAMES_DOWN_S = 30.0


@dataclass(slots=True)
class SlackMe:
    """Who the bot is (``auth.test``, asked at start), and the names of people it met."""

    user_id: str | None = None
    bot_id: str | None = None
    team_id: str | None = None
    names: dict[str, str] = field(default_factory=dict)


#: ``/name`` as a reply writes a command: at a line's or a word's start (not a path's
#: part, ``~/memory``, ``a/new``, nor a URL's), not followed by more path.
_NAMED_COMMAND = re.compile(r"(?<![^\s(\"'*_])/([A-Za-z0-9_]{1,32})\b(?![/\w]|\.\w)")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


def slack_commands(reply: str, is_command: Callable[[str], bool]) -> str:
    """``/new`` written as Slack takes it, ``/chathub new``: a message that starts with
    ``/`` is a slash command to Slack, and ``/new`` is none of this app's (until
    2026-12-07 the help, the usage lines and "Send /forget_me yes" named commands Slack
    refused as "not a valid command"; found by review)."""

    def written(found: re.Match[str]) -> str:
        named = found.group(1)
        return f"/chathub {named}" if is_command(named.lower()) else found.group(0)

    parts, end = [], 0
    for code in _CODE.finditer(reply):  # code is shown as it is
        parts += [_NAMED_COMMAND.sub(written, reply[end : code.start()]), code.group(0)]
        end = code.end()
    return "".join([*parts, _NAMED_COMMAND.sub(written, reply[end:])])


class MessageHandler:
    def __init__(
        self,
        hub: ChatHub,
        me: SlackMe,
        access: Access,
        commands: CommandRegistry,
        cards: SlackCards,
        sender: SlackSender,
        activity: ThreadActivity,
        voice: VoiceNotes | None = None,
        download: Callable[[str, int], Awaitable[bytes]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``voice``: audio files transcribed; ``download``: a file's bytes (the bot's token,
        at most so many bytes)."""
        self._hub = hub
        self._threads = JoinedThreads(hub)
        self._me = me
        self._access = access
        self._commands = commands
        self._cards = cards
        self._sender = sender
        self._activity = activity
        self._voice = voice if download is not None else None
        self._download = download or _no_download
        self._clock = clock
        self._refused_until: dict[str, float] = {}  # per person (``NAME_RETRY_S``)
        self._direct: dict[str, str] = {}  # each person's DM with the bot
        self._paused_until = 0.0  # every lookup: rate limited, or Slack down

    async def addressed(self, m: Incoming) -> bool:
        """Whether the bot answers ``m`` at all (checked before anything is stored): a DM,
        a mention, or a message in a thread the bot is in (it has a session) by someone
        allowed (a stranger talking to colleagues there is not told off at every line)."""
        if m.team_id is not None and self._me.team_id is not None and m.team_id != self._me.team_id:
            return False  # another workspace's (a shared channel): not ours to answer
        if m.is_dm:
            return True
        if m.mentions_me:
            if self._access.is_allowed(m.user):  # a stranger's mention brings no one in
                self._threads.join(m.source)
            return True
        if m.thread_ts is None or not self._access.is_allowed(m.user):
            return False
        return await self._threads.joined(m.source)

    async def edited(self, m: Incoming) -> None:
        """A person's correction of a message that still waits for its turn: the turn
        reads it as corrected (until 2026-12-07 every edit was ignored, and the agent
        acted on the words taken back). One read already keeps its answer; a message
        with a sound clip keeps its words (they hold what was heard); one with other
        files is corrected too (until 2026-12-07 its edit was ignored; found by review)."""
        if m.audio or not self._access.is_allowed(m.user) or not await self.addressed(m):
            return
        text = m.text_without(self._me.user_id, self._me.names)
        if not text or _COMMAND.match(text):
            return
        await hand_over_edit(self._hub, m.source, "slack_ts", m.ts, text)

    async def handle(self, m: Incoming) -> bool:
        """True when the event was marked handled along the way. A failure of ours is
        logged with a short error id, and the sender told that id: never the exception."""
        try:
            return await self._on_message(m)
        except Exception:
            error = report_failure(log, f"message {m.key}")
            if self._access.is_allowed(m.user):  # a stranger learns nothing more
                await self._sender.say_at(m.place, SORRY_MESSAGE.format(error=error))
            return False

    async def _on_message(self, m: Incoming) -> bool:
        place = m.place
        if not self._access.is_allowed(m.user):
            if m.is_dm:
                await self._offer_pairing(m)
            else:  # in the thread only when there is one: Slack shows no ephemeral in a
                # thread without replies (a top-level mention's line was seen by nobody)
                await self._sender.ephemeral(m.channel, m.user, NOT_PAIRED, m.thread_ts)
            return False
        text = m.text_without(self._me.user_id, self._me.names)
        command = _COMMAND.match(text)
        if command is not None:
            name, argument = command.group(1), command.group(2) or ""
            reply = await self.run_command(
                m.source, name, argument, m.user, also=marking(SLACK, m.key)
            )
            if reply:
                await self._sender.say_at(place, reply)
            return False
        attachments: list[dict[str, Any]] = []
        hearing = bool(m.audio) and self._voice is not None
        if m.files > (len(m.audio) if hearing else 0):  # a PDF beside a clip was dropped
            await self._sender.say_at(place, "⚠️ " + FILES_NOT_READ)  # unsaid until 2026-12-07
            if not text and not hearing:
                return False
        if hearing:
            heard = await self._hear(m)
            text = "\n".join([text, *heard.texts]).strip()
            attachments = heard.attachments
        if not text and not attachments:  # an audio file kept, unheard: the agent gets it
            return False
        # An open question is answered by the whole message, its audio heard (a voice
        # answer was lost behind the waiting turn).
        if await self._answer_question(m, text, attachments):
            return False
        metadata = {
            "slack_ts": m.ts,
            "slack_channel": m.channel,
            SENDER_KEY: {"id": m.user, "name": await self.name_of(m.user)},
        }
        if attachments:
            metadata["attachments"] = attachments
        handed = await hand_over(
            self._hub, SLACK, m.key, m.source, text, metadata, reads_files=False
        )
        if handed.refusal is not None:
            await self._sender.say_at(place, handed.refusal)
            return False
        if handed.before:
            return True
        await typing_for_its_turn(self._activity, self._cards, m.source)
        return True

    async def _hear(self, m: Incoming) -> Heard:
        """The message's audio files, refused first when too long or large, downloaded
        with the bot token, transcribed; what was heard (or went wrong) said back."""
        voice = self._voice
        assert voice is not None
        folder = Path("uploads") / "slack" / m.channel

        async def download(url: str) -> bytes:
            return await self._download(url, voice.max_bytes)

        heard = await voice.fetch(m.audio, folder, m.ts, download)
        for line in heard.said():
            await self._sender.say_at(m.place, line)
        return heard

    async def run_command(
        self,
        source: str,
        name: str,
        argument: str,
        user: str,
        also: Callable[[Connection], None] | None = None,
    ) -> str | None:
        """``also``: the event that gave it, marked in the commit of what it changes. The
        commands it names are written as Slack takes them (``slack_commands``)."""
        context = self._access.command_context(self._hub, source, argument.strip(), user, also)
        reply = await self._commands.run(name, context)
        if reply is None:
            return None
        return slack_commands(reply, lambda named: named == name or self._commands.knows(named))

    async def name_of(self, user: str) -> str:
        """The person's display name (``users.info``, once per process); the id when
        Slack does not say."""
        known = self._me.names.get(user)
        if known is not None:
            return known
        now = self._clock()
        if now < self._paused_until or now < self._refused_until.get(user, 0.0):
            return user
        web = self._sender.web
        try:
            answer = await slack_call(lambda: web.users_info(user=user))
        except SlackError as exc:
            log.info("users.info for %s failed: %s", user, exc.description)
            if isinstance(exc, SlackRetryLater):
                self._paused_until = now + exc.seconds
            elif isinstance(exc, SlackUnavailable):
                self._paused_until = now + NAMES_DOWN_S
            else:
                self._refused_until[user] = now + NAME_RETRY_S
            return user
        self._refused_until.pop(user, None)
        person = answer.get("user") or {}
        profile = person.get("profile") or {}
        name = profile.get("display_name") or person.get("real_name") or person.get("name")
        name = str(name or user)[:_MAX_NAME]
        self._me.names[user] = name
        return name

    async def _offer_pairing(self, m: Incoming) -> None:
        async def say(text: str) -> None:
            await self._sender.say_at(Place(m.channel), text)

        await self.offer_pairing(m.user, m.channel, say)

    async def offer_pairing(
        self, user: str, channel: str, tell: Callable[[str], Awaitable[None]]
    ) -> bool:
        """A stranger wrote in their DM: ``tell`` them their pairing code (not again within
        the reminder window), and the owner; whether they were told."""
        offer = await self._access.offer_pairing(user, channel, await self.name_of(user))
        if offer.to_user is not None:
            await tell(offer.to_user)
        owner = self._access.owner
        if offer.to_owner is not None and owner is not None:
            await self.say_to_user(owner, offer.to_owner)
        return offer.to_user is not None

    async def say_to_user(self, user: str, text: str) -> None:
        """A DM to ``user`` (its channel opened first); a failure is logged."""
        channel = await self.direct_with(user)
        if channel is not None:
            await self._sender.say_at(Place(channel), text)

    async def direct_with(self, user: str) -> str | None:
        """The DM channel between ``user`` and the bot (opened once per person and
        process); ``None`` when Slack refused."""
        channel = self._direct.get(user)
        if channel is None:
            channel = await self._sender.open_dm(user)
            if channel is not None:
                self._direct[user] = channel
        return channel

    async def _answer_question(
        self, m: Incoming, text: str, attachments: list[dict[str, Any]]
    ) -> bool:
        """Any plain message in the conversation while a question is open answers it; in a
        DM, so does a reply in the question's own thread (Slack's "Reply in thread" on it:
        a thread of a DM is a conversation of its own, and until 2026-12-07 the answer
        began one, out of context, while the question waited; found by review)."""
        source = m.source
        card = await self._cards.question_now(source)
        if card is None and m.is_dm and m.thread_ts is not None:
            source = source_of(m.channel)
            card = await self._cards.question_now(source, reply_to=m.thread_ts)
            if card is not None and card.message_id != m.thread_ts:
                return False  # a thread of another message of the DM: its own talk
        if card is None:
            return False
        return await self._cards.answer(
            card,
            text,
            by=await self.name_of(m.user),
            also=marking(SLACK, m.key),
            goes_on=partial(self._activity.start_typing, source),
            attachments=attachments,
            decider=self._access.decider(m.user),
        )


async def _no_download(url: str, limit: int) -> bytes:
    raise OSError("no download")
