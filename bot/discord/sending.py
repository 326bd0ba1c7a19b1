"""Discord's side of the delivery layer: its client (``DiscordClient``: one try of a
recorded message through discord.py) and its sender (``DiscordSender``).

Every call goes through ``Outbound`` (``bot.delivery``): replies are cut at Discord's
2,000 characters on safe boundaries (``bot.platform.chunks``), recorded as outbox rows of
the ``discord`` platform and sent once from them; cards, edits, the typing indicator go
through it too, so none escapes the pacing. discord.py's own HTTP client honours the
per-route buckets and the global limit from Discord's rate-limit headers within the
process; ``Outbound``'s pacing keeps the bot's overall rate, shared by a fleet.

In a chat with voice on (``/voice on``) a reply is recorded as voice rows
(``bot.platform.voice_out``), each spoken when it is sent and posted as a Discord voice
message (``voice_message.py``); any speech failure sends the row's text instead.

Nothing the model writes pings anyone: every message is sent with no allowed mentions.
"""

from __future__ import annotations

import io
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiohttp
import discord
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.delivery import (
    OTHER,
    Cap,
    Gone,
    Outbound,
    Pacing,
    PacingPolicy,
    PlatformError,
    Rate,
    Refused,
    RetryLater,
    Unavailable,
    clamp_retry_after,
)
from bot.discord.incoming import DISCORD, REPLY_TO_KEY, parse_source, target_of
from bot.discord.settings import DiscordSettings
from bot.discord.voice_message import voice_message
from bot.platform.chunks import split_markdown
from bot.platform.outbox import RowSender, last_lines
from bot.platform.protocols import MessageRef
from bot.platform.voice_mode import VoiceMode
from bot.platform.voice_out import VOICE, Speak, audio_of, text_instead, voice_payloads
from engine.store import chat_history, chat_llm_tools

__all__ = [
    "MESSAGE_LIMIT",
    "Buttons",
    "DiscordClient",
    "DiscordError",
    "DiscordSender",
    "discord_call",
    "discord_pacing",
    "in_messages",
    "view_of",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
Json = dict[str, Any]

#: Discord's limit on a message's content, in characters.
MESSAGE_LIMIT = 2000
#: Rows of buttons as stored in a payload: ``[[{custom_id, label, style}, ...], ...]``.
Buttons = list[list[Json]]

_NO_PINGS = discord.AllowedMentions.none()


def in_messages(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """``text`` in Discord messages: only backtick fences are code there."""
    return split_markdown(text, limit, tildes=False, tables=False)


_asker = chat_history.alias("asker")
_said = chat_history.alias("said")
_frame = (
    sa.select(_asker.c.session_stack_id)
    .where(_asker.c.id == sa.bindparam("answer"))
    .scalar_subquery()
)
#: An answer of the agent's between a message and this answer: the message was answered
#: before (this answer is a notification's, a task result's: it replies to no one).
_ANSWERED_BEFORE = sa.exists().where(
    _said.c.session_stack_id == _frame,
    _said.c.role == "assistant",
    _said.c.id > chat_history.c.id,
    _said.c.id < sa.bindparam("answer"),
    _said.c.content != "",
    ~sa.exists().where(chat_llm_tools.c.message_id == _said.c.id),
)
#: The metadata of the person's message an answer answers: its frame's newest before it,
#: not answered before.
_ASKED = (
    sa.select(chat_history.c.metadata)
    .where(
        chat_history.c.session_stack_id == _frame,
        chat_history.c.id < sa.bindparam("answer"),
        chat_history.c.role == "user",
        chat_history.c.is_synthetic.is_(False),
        ~_ANSWERED_BEFORE,
    )
    .order_by(chat_history.c.id.desc())
    .limit(1)
)


class DiscordError(PlatformError):
    """A Discord call failed; ``description`` is Discord's text when it sent one."""

    #: Discord's JSON error code, when it sent one (160004: the message has a thread).
    code: int | None = None


class DiscordRetryLater(DiscordError, RetryLater):
    pass


class DiscordUnavailable(DiscordError, Unavailable):
    pass


class DiscordRefused(DiscordError, Refused):
    pass


class DiscordGone(DiscordRefused, Gone):
    """The channel is deleted (10003), the bot no longer sees it (50001), or the person
    takes no DMs from it (50007): nothing sent there gets through."""


#: Discord's JSON error codes of a conversation that takes nothing from the bot. Not
#: 50013 (missing permissions): a file where only text is allowed says it too.
GONE_CODES = frozenset({10003, 50001, 50007})


class SpeechFailed(DiscordRefused):
    """A voice reply that could not be spoken: its text goes instead (``fallback``)."""


async def discord_call(op: Callable[[], Awaitable[T]]) -> T:
    """One discord.py call with its failures as the delivery layer's errors."""
    try:
        return await op()
    except discord.RateLimited as exc:  # a wait longer than the client's cap
        raise DiscordRetryLater(clamp_retry_after(exc.retry_after)) from None
    except discord.HTTPException as exc:
        text = exc.text or str(exc)
        if exc.status == 429:
            raise DiscordRetryLater(clamp_retry_after(None), text) from None
        if exc.status >= 500:
            raise DiscordUnavailable(f"{exc.status}: {text}") from None
        kind = DiscordGone if exc.code in GONE_CODES else DiscordRefused
        refused = kind(f"{exc.status}: {text}")
        refused.code = exc.code or None
        raise refused from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise DiscordUnavailable(f"{type(exc).__name__}: {exc}") from None


#: Discord's limit on new messages per channel: 5 in any 5 s.
CHANNEL_WINDOW = Cap(5, 5.0)


def discord_pacing(settings: DiscordSettings) -> Pacing:
    """Discord's limits (docs/discord.md, "Pacing"): per channel a burst then a rate, and
    never more than 5 in any 5 s (a bucket alone lets a burst and its refill exceed it);
    the bot at most ``DISCORD_GLOBAL_PER_SECOND`` (Discord: 50)."""
    channel = Rate(settings.discord_channel_burst, settings.discord_channel_per_second)
    return Pacing(
        policy=PacingPolicy(
            private=channel,
            group=channel,
            group_cap=CHANNEL_WINDOW,
            overall=Cap.per_second(settings.discord_global_per_second),
        )
    )


def view_of(buttons: Buttons | None) -> discord.ui.View | None:
    """A payload's buttons as discord.py's view (``None``: no components)."""
    if not buttons:
        return None
    view = discord.ui.View(timeout=None)
    for row, items in enumerate(buttons):
        for item in items:
            view.add_item(
                discord.ui.Button(
                    style=discord.ButtonStyle(item.get("style", 2)),
                    label=item["label"],
                    custom_id=item["custom_id"],
                    row=row,
                )
            )
    return view


class DiscordClient:
    """A recorded message, posted to its channel, or spoken and posted as a voice message
    when it is a voice reply (``bot.delivery.PlatformClient``)."""

    name = DISCORD

    def __init__(self, bot: discord.Client, speak: Speak | None = None) -> None:
        """``speak``: text to OGG/Opus bytes (raising ``SpeechError``) for voice replies."""
        self.bot = bot
        self.speak = speak

    def is_group(self, conversation: str) -> bool:
        return True  # every channel, a DM too, has the window of 5 in any 5 s

    async def send(self, conversation: str, payload: Json) -> discord.Message | Json:
        if payload.get(VOICE):
            return await self._send_voice(conversation, payload)
        channel = self.bot.get_partial_messageable(int(conversation))
        view = view_of(payload.get("buttons"))

        async def post() -> discord.Message:
            kwargs: dict[str, Any] = {"allowed_mentions": _NO_PINGS}
            if view is not None:
                kwargs["view"] = view
            if payload.get("reply_to"):  # a reply to the message that asked (it may be gone)
                kwargs["reference"] = discord.MessageReference(
                    message_id=int(payload["reply_to"]),
                    channel_id=int(conversation),
                    fail_if_not_exists=False,
                )
            if payload.get("document"):
                name, data = payload["document"]
                kwargs["file"] = discord.File(io.BytesIO(data), filename=name)
            if payload.get("nonce") is not None:  # the same message however often it is tried
                kwargs["nonce"] = payload["nonce"]
            return await channel.send(payload.get("content") or None, **kwargs)

        try:
            return await discord_call(post)
        finally:
            if view is not None:
                view.stop()  # taps are read from the gateway by custom_id, not by views

    async def _send_voice(self, conversation: str, payload: Json) -> Json:
        """The row's words spoken and posted as a voice message (no text beside it)."""
        audio = await audio_of(self.speak, str(payload[VOICE]), SpeechFailed)
        reply_to = int(payload["reply_to"]) if payload.get("reply_to") else None
        nonce = payload.get("nonce")
        route, form, file = voice_message(int(conversation), audio, reply_to, nonce)
        try:
            answer = await discord_call(
                lambda: self.bot.http.request(route, files=[file], form=form)
            )
        finally:
            file.close()
        return answer if isinstance(answer, dict) else {}

    def message_id(self, answer: Any) -> str | None:
        if isinstance(answer, discord.Message):
            return str(answer.id)
        sent = answer.get("id") if isinstance(answer, dict) else None
        return str(sent) if sent else None

    def fallback(self, payload: Json, error: Refused) -> Json | None:
        """A voice reply not spoken (or refused): its text. A reply refused: the same
        message replying to nothing (a channel that denies the bot Read Message History
        refuses every reply, 160002, and takes a plain message: until 2026-12-07 each
        answer there was lost; found by review). Markdown is plain text to Discord:
        nothing simpler to send for any other message."""
        text = text_instead(payload)
        if text is not None:  # and a voice reply refused as a reply replies to nothing
            return _no_reply(text) if "reply" in error.description.lower() else text
        return _no_reply(payload) if payload.get("reply_to") else None


def _no_reply(payload: Json) -> Json:
    return {key: value for key, value in payload.items() if key != "reply_to"}


class DiscordSender(RowSender):
    """The outbox's sender (``OutboxSender``) and every other call the adapter makes."""

    def __init__(
        self, bot: discord.Client, outbound: Outbound, voice_mode: VoiceMode | None = None
    ) -> None:
        """``voice_mode``: the chats whose replies are spoken (``/voice on``)."""
        super().__init__(outbound, target_of, voice_mode)
        self.bot = bot
        #: DM channels seen here: their answers reply to no message, so the history is
        #: not read for one (a third of a DM's path from the gateway to its reply). The
        #: set is only ever added to, and read under the GIL from the database's thread.
        self._direct: set[str] = set()

    def seen_direct(self, channel_id: str) -> None:
        """``channel_id`` is a DM channel (a channel's id never changes its kind)."""
        self._direct.add(channel_id)

    # -- the outbox's sender ----------------------------------------------------------------

    def written(self, source: str, text: str) -> list[Json]:
        return [_content(chunk) for chunk in in_messages(text)]

    def spoken(self, source: str, text: str) -> list[Json]:
        return voice_payloads(text, _content)

    def answering(
        self, conn: Connection, source: str, answer_id: int, prepared: list[Json]
    ) -> list[Json]:
        """In a server channel the answer's first message replies to the message it
        answers (the turn's newest), so a busy channel shows whom it answers; stored with
        the row, a redelivery replies too. It replied to the newest message taken in,
        another person's while the turn ran (found by review)."""
        channel, thread = parse_source(source)
        if not prepared or thread is not None or channel in self._direct:
            return prepared  # a thread's conversation needs none, nor a DM's
        asked = conn.execute(_ASKED, {"answer": answer_id}).scalar()
        reply_to = asked.get(REPLY_TO_KEY) if isinstance(asked, dict) else None
        if not isinstance(reply_to, str):
            return prepared  # a DM's, or a message of before
        return [{**prepared[0], "reply_to": reply_to}, *prepared[1:]]

    async def say(self, source: str, text: str) -> None:
        await self.say_in(target_of(source), text)

    def progress_text(self, lines: Sequence[str]) -> str:
        return last_lines(lines, MESSAGE_LIMIT)

    async def send_progress(self, source: str, text: str) -> MessageRef | None:
        sent = await self.send(target_of(source), text)
        return None if sent is None else str(sent.id)

    async def edit_progress(self, source: str, ref: MessageRef, text: str) -> None:
        await self.edit(target_of(source), str(ref), text, None)

    # -- what else is sent ------------------------------------------------------------------

    async def send(
        self,
        channel: str,
        content: str,
        buttons: Buttons | None = None,
        document: tuple[str, bytes] | None = None,
    ) -> discord.Message | None:
        """Post a message now (not recorded), with ``document`` (name, data) attached;
        ``None`` when it failed (logged)."""
        try:
            return await self.send_now(channel, content, buttons, document)
        except DiscordError as exc:
            log.warning("sending to channel %s failed: %s", channel, exc.description)
            return None

    async def send_now(
        self,
        channel: str,
        content: str,
        buttons: Buttons | None = None,
        document: tuple[str, bytes] | None = None,
        nonce: str | None = None,
    ) -> discord.Message | None:
        """``send``, its failure raised (``DiscordError``: a card is posted again after an
        outage, not lost); ``nonce`` names the message for Discord (a card's, by its call),
        else one is made for this send's tries."""
        payload: Json = _content(content, nonce)
        if buttons:
            payload["buttons"] = buttons
        if document is not None:
            payload["document"] = document  # never recorded: a card's send only
        sent = await self.outbound.send(channel, payload)
        return sent if isinstance(sent, discord.Message) else None

    async def say_in(self, channel: str, text: str) -> None:
        """Markdown ``text`` as one or more messages; a failure is logged, not raised."""
        for chunk in in_messages(text):
            if await self.send(channel, chunk) is None:
                return

    async def edit(
        self, channel: str, message_id: str, content: str, buttons: Buttons | None
    ) -> None:
        """Edit a message of the bot's (``buttons=None`` removes them); failures are logged."""
        message = self.bot.get_partial_messageable(int(channel)).get_partial_message(
            int(message_id)
        )
        view = view_of(buttons)

        async def edit() -> None:
            await message.edit(content=content, view=view, allowed_mentions=_NO_PINGS)

        try:
            await self.outbound.edit(channel, message_id, lambda: discord_call(edit))
        except DiscordError as exc:
            log.warning("editing message %s in %s failed: %s", message_id, channel, exc)
        finally:
            if view is not None:
                view.stop()

    async def typing(self, channel: str) -> None:
        """The typing indicator, once (Discord shows it for 10 s or until a message)."""
        messageable = self.bot.get_partial_messageable(int(channel))

        async def trigger() -> None:
            await messageable.typing()

        try:
            await self.outbound.call(channel, lambda: discord_call(trigger), kind=OTHER)
        except DiscordError as exc:
            log.debug("typing indicator in %s failed: %s", channel, exc)


def _content(text: str, nonce: str | None = None) -> Json:
    """A message's payload with its nonce, made when it is prepared (for a reply, stored
    with its outbox row): Discord takes a repeated nonce (``enforce_nonce``) as the
    message it already has, so a try whose answer was lost, or a redelivery, posts
    nothing twice. discord.py made a new nonce at each try (a reply posted twice after a
    dropped answer until 2026-12-07; found by review)."""
    return {"content": text, "nonce": nonce or str(secrets.randbits(63))}
