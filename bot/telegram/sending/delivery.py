"""Telegram's side of the delivery layer: its client (``TelegramClient``: one try of a
recorded message) and its sender (``TelegramSender``).

The sender is the outbox's (``bot.platform.protocols.OutboxSender``) over ``Outbound``
(``bot.delivery``: pacing, retries, the durable outbox): replies rendered to text +
entities and split at Telegram's limit, recorded as outbox rows of the ``telegram``
platform, sent from them; plus every other call the adapter makes to Telegram — plain
messages, edits, tap answers, the typing indicator, files — each through ``Outbound``,
so none escapes the pacing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from bot.delivery import (
    ANSWER,
    OTHER,
    CallKind,
    Cap,
    Outbound,
    Pacing,
    PacingPolicy,
    Rate,
    Refused,
)
from bot.platform.outbox import RowSender
from bot.platform.protocols import MessageRef
from bot.platform.voice_mode import VoiceMode
from bot.platform.voice_out import VOICE, Speak, audio_of, text_instead
from bot.telegram.inbound.updates import parse_source
from bot.telegram.rendering.render import cut_utf16, progress_text, render_markdown
from bot.telegram.sending.api import BotApi, Json, TelegramError, is_not_modified
from bot.telegram.settings import TelegramSettings
from bot.telegram.store import TELEGRAM
from voice import sentences, spoken, spoken_parts

__all__ = ["TelegramClient", "TelegramSender", "telegram_pacing"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def telegram_pacing(settings: TelegramSettings) -> Pacing:
    """Telegram's limits from the ``TELEGRAM_*_BURST`` / ``_PER_SECOND`` / ``_PER_MINUTE``
    settings (docs/telegram.md, "Pacing")."""
    return Pacing(
        policy=PacingPolicy(
            private=Rate(settings.telegram_private_burst, settings.telegram_private_per_second),
            group=Rate(settings.telegram_group_burst, settings.telegram_group_per_minute / 60),
            group_cap=Cap(max(1, int(settings.telegram_group_per_minute)), 60.0),
            overall=Cap.per_second(settings.telegram_global_per_second),
        )
    )


class SpeechFailed(Refused):
    """A voice reply that could not be spoken: its text goes instead (``fallback``)."""


class TelegramClient:
    """A recorded message, sent with ``sendMessage``, or ``sendVoice`` when it is a voice
    reply (``bot.delivery.PlatformClient``)."""

    name = TELEGRAM

    def __init__(self, api: BotApi, speak: Speak | None = None) -> None:
        """``speak``: text to OGG/Opus bytes (raising ``SpeechError``) for voice replies."""
        self.api = api
        self.speak = speak

    def is_group(self, conversation: str) -> bool:
        """Group and channel ids are negative in the Bot API."""
        return conversation.startswith("-")

    async def send(self, conversation: str, payload: Json) -> Json:
        if payload.get(VOICE):
            return await self._send_voice(conversation, payload)
        return await self.api.send_message(
            int(conversation),
            payload["text"],
            entities=payload.get("entities") or None,
            reply_markup=payload.get("reply_markup"),
            message_thread_id=payload.get("thread_id"),
            reply_to_message_id=payload.get("reply_to"),
        )

    async def _send_voice(self, conversation: str, payload: Json) -> Json:
        audio = await audio_of(self.speak, str(payload[VOICE]), SpeechFailed)
        return await self.api.send_voice(
            int(conversation), audio, message_thread_id=payload.get("thread_id")
        )

    def message_id(self, answer: Any) -> str | None:
        value = answer.get("message_id") if isinstance(answer, dict) else None
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else None

    def fallback(self, payload: Json, error: Refused) -> Json | None:
        """A voice reply not spoken (or refused): its text. Entities Telegram rejects: the
        same text, plain."""
        text = text_instead(payload)
        if text is not None:
            return text
        if payload.get("entities") and "entit" in error.description.lower():
            return {**payload, "entities": None}
        return None


class TelegramSender(RowSender):
    def __init__(
        self, api: BotApi, outbound: Outbound, voice_mode: VoiceMode | None = None
    ) -> None:
        """``voice_mode``: the chats whose replies are spoken (``/voice on``)."""
        super().__init__(outbound, _chat_of, voice_mode)
        self.api = api

    # -- the outbox's sender ----------------------------------------------------------------

    def written(self, source: str, text: str) -> list[Json]:
        return self._parts(text, parse_source(source)[1])

    def spoken(self, source: str, text: str) -> list[Json]:
        """A voice row per part of at most 2,000 characters, its text one Telegram message
        (4,096 at most), the text sent when speech fails."""
        thread_id = parse_source(source)[1]
        return [
            row
            for said, written in spoken_parts(text)
            for row in self._voice(said, written, thread_id)
        ]

    def _voice(self, said: str, written: str, thread_id: int | None) -> list[Json]:
        """A part whose text takes more than one message (a padded table) is cut smaller
        until each piece takes one: until 2026-12-06 only its first message was its text,
        and the rest of the reply was lost when speech failed (found by review)."""
        parts = self._parts(written, thread_id)  # none: nothing to read or show
        if len(parts) <= 1:
            return [{**part, VOICE: said} for part in parts]
        smaller = sentences(written, max(len(written) // 2, 1))
        return [row for piece in smaller for row in self._voice(spoken(piece), piece, thread_id)]

    @staticmethod
    def _parts(text: str, thread_id: int | None) -> list[Json]:
        return [
            {"text": chunk.text, "entities": chunk.entities, "thread_id": thread_id}
            for chunk in render_markdown(text)
        ]

    async def say(self, source: str, text: str) -> None:
        await self.say_in(*parse_source(source), text)

    def progress_text(self, lines: Sequence[str]) -> str:
        return progress_text(lines)

    async def send_progress(self, source: str, text: str) -> MessageRef | None:
        chat_id, thread_id = parse_source(source)
        sent = await self.send_text(chat_id, text, thread_id=thread_id)
        return sent.get("message_id")

    async def edit_progress(self, source: str, ref: MessageRef, text: str) -> None:
        await self.edit(parse_source(source)[0], int(ref), text, [], None)

    # -- what else is sent ------------------------------------------------------------------

    async def send_text(
        self,
        chat_id: int,
        text: str,
        *,
        entities: list[Json] | None = None,
        reply_markup: Json | None = None,
        thread_id: int | None = None,
        reply_to: int | None = None,
    ) -> Json:
        """Send a message now (not recorded); entities Telegram rejects: plain text."""
        payload: Json = {
            "text": text,
            "entities": entities or None,
            "reply_markup": reply_markup,
            "thread_id": thread_id,
            "reply_to": reply_to,
        }
        return await self.outbound.send(str(chat_id), payload)

    async def call(
        self, chat_id: int | None, op: Callable[[], Awaitable[T]], *, kind: CallKind = OTHER
    ) -> T:
        """Any other Bot API call: paused with its chat and the bot, and retried; a message
        of another kind (a document, a draft) takes a message's tokens (``kind=SEND``), the
        rest (the typing indicator, a deletion, a file, a tap's answer) none."""
        return await self.outbound.call(None if chat_id is None else str(chat_id), op, kind=kind)

    async def say_in(self, chat_id: int, thread_id: int | None, text: str) -> None:
        """Markdown ``text`` as one or more messages; a failure is logged, not raised."""
        for chunk in render_markdown(text) or ():
            try:
                await self.send_text(
                    chat_id, chunk.text, entities=chunk.entities, thread_id=thread_id
                )
            except TelegramError as exc:
                log.warning("sending to chat %s failed: %s", chat_id, exc)
                return

    async def edit(
        self,
        chat_id: int,
        message_id: int | None,
        text: str,
        entities: list[Json],
        reply_markup: Json | None,
    ) -> None:
        """Edit a sent message; "not modified" is success, any other failure is logged."""
        if message_id is None:
            return
        try:
            await self.outbound.edit(
                str(chat_id),
                str(message_id),
                lambda: self.api.edit_message_text(
                    chat_id,
                    message_id,
                    text,
                    entities=entities or None,
                    reply_markup=reply_markup,  # none: Telegram drops the buttons
                ),
            )
        except TelegramError as exc:
            if not is_not_modified(exc):
                log.warning("editing message %s in chat %s failed: %s", message_id, chat_id, exc)

    async def answer_callback(
        self, callback_id: str, text: str | None, chat_id: int | None = None
    ) -> None:
        """``chat_id``: where the tapped button is; a 429 pauses that chat (with none, a
        429 on one person's taps paused every chat; found by review). The text is cut to
        Telegram's 200 UTF-16 units: "Only 𝐀𝐧𝐧𝐚 … (who asked)" with a long name in a
        fancy font was refused, and the tapper saw nothing (until 2026-12-07; review)."""
        text = None if text is None else cut_utf16(text, CALLBACK_TEXT_UNITS)
        try:
            await self.call(
                chat_id,
                lambda: self.api.answer_callback_query(callback_id, text=text),
                kind=ANSWER,  # waits for no pause of its chat's replies (an approval waited)
            )
        except TelegramError as exc:
            log.info("answering callback %s failed: %s", callback_id, exc)


#: The most ``answerCallbackQuery`` shows.
CALLBACK_TEXT_UNITS = 200


def _chat_of(source: str) -> str:
    return str(parse_source(source)[0])
