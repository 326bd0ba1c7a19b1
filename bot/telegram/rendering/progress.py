"""What a Telegram chat shows while a turn runs, besides the progress line: the typing
indicator, and with ``TELEGRAM_STREAMING`` the answer while it is written (a draft in
private chats, a throttled edited message in groups, deleted when the answer arrives)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bot.delivery import SEND, Gone
from bot.platform.tasks import Runtime
from bot.telegram.config import TelegramConfig
from bot.telegram.inbound.updates import parse_source
from bot.telegram.rendering.render import cut_utf16
from bot.telegram.sending.api import BadRequest, TelegramError
from bot.telegram.sending.delivery import TelegramSender
from engine.hub import ChatHub

__all__ = ["ChatActivity"]

log = logging.getLogger(__name__)

#: The most of an answer a draft or a streamed message shows, in UTF-16 units (under
#: Telegram's 4,096).
STREAM_LIMIT = 4000


@dataclass(eq=False)
class _Live:
    """One source's chat while a turn runs."""

    chat_id: int
    thread_id: int | None
    typing: asyncio.Task[None] | None = None
    stream_text: str = ""
    stream_at: float = 0.0
    stream_message_id: int | None = None
    drafts: int = 0


class ChatActivity:
    def __init__(
        self,
        hub: ChatHub,
        sender: TelegramSender,
        config: TelegramConfig,
        runtime: Runtime,
    ) -> None:
        self._hub = hub
        self._sender = sender
        self._api = sender.api
        self._config = config
        self._clock = runtime.clock
        self._sleep = runtime.sleep
        self._background = runtime.background
        self._chats: dict[str, _Live] = {}
        #: Telegram refused a draft (older Bot API servers allow them only to bots in
        #: forum topic mode): private chats stream as groups do, by an edited message.
        self._drafts_refused = False

    # -- typing ---------------------------------------------------------------------------

    def start_typing(self, source: str) -> None:
        live = self._of(source)
        if live.typing is None or live.typing.done():
            live.typing = self._background.spawn(self._keep_typing(source, live))

    def stop_typing(self, source: str) -> None:
        live = self._of(source)
        if live.typing is not None:
            live.typing.cancel()
            live.typing = None

    async def _keep_typing(self, source: str, live: _Live) -> None:
        await self._sleep(self._config.typing_delay_s)
        # Not only a turn running: a loaded process may not have started the message's
        # turn yet when the delay is over, and the chat should still see it coming.
        while self._hub.has_work(source):
            try:
                await self._sender.call(
                    live.chat_id,
                    lambda: self._api.send_chat_action(
                        live.chat_id, "typing", message_thread_id=live.thread_id
                    ),
                )
            except TelegramError as exc:
                log.debug("typing indicator failed: %s", exc)
            await self._sleep(self._config.typing_interval_s)

    # -- streaming ------------------------------------------------------------------------

    async def stream(self, source: str, delta: str) -> None:
        live = self._of(source)
        live.stream_text += delta
        await self._show_stream(live)

    def thinking(self, source: str) -> None:
        """That text led to tool calls: the answer comes later."""
        self._of(source).stream_text = ""

    async def _show_stream(self, live: _Live) -> None:
        """The answer so far: a draft in private chats, an edited message elsewhere."""
        now = self._clock()
        text = live.stream_text.strip()
        if not text or now - live.stream_at < self._config.stream_interval_s:
            return
        live.stream_at = now
        # Telegram counts UTF-16 units: 4,000 characters of emoji were 8,000, and the
        # stream was refused as too long (until 2026-12-07; found by review).
        text = cut_utf16(text, STREAM_LIMIT)
        try:
            if live.chat_id > 0 and not self._drafts_refused:
                await self._show_draft(live, text, now)
            elif live.stream_message_id is None:
                sent = await self._sender.send_text(live.chat_id, text, thread_id=live.thread_id)
                live.stream_message_id = sent.get("message_id")
            else:
                await self._sender.edit(live.chat_id, live.stream_message_id, text, [], None)
        except TelegramError as exc:
            log.info("streaming to chat %s failed: %s", live.chat_id, exc)

    async def _show_draft(self, live: _Live, text: str, now: float) -> None:
        """The answer so far as a draft; refused (a bot outside forum topic mode, on a
        server that allows drafts only there), the stream goes on as an edited message,
        in this chat and from then on in every private chat (until 2026-12-07 each draft
        was refused and the private chat saw nothing until the answer; found by review)."""
        if live.drafts == 0:
            live.drafts = int(now * 1000) % 2_000_000_000 + 1
        try:
            await self._sender.call(
                live.chat_id,
                lambda: self._api.send_message_draft(
                    live.chat_id, live.drafts, text, message_thread_id=live.thread_id
                ),
                kind=SEND,
            )
        except BadRequest as exc:
            if isinstance(exc, Gone):
                raise  # the chat's refusal, not the drafts': every private chat keeps them
            log.info("Telegram refused a draft (%s): streaming by messages instead", exc)
            self._drafts_refused = True
            live.drafts = 0
            sent = await self._sender.send_text(live.chat_id, text, thread_id=live.thread_id)
            live.stream_message_id = sent.get("message_id")

    async def end_stream(self, source: str) -> None:
        """The final answer replaces the streamed one (a draft simply ends)."""
        live = self._of(source)
        if live.stream_message_id is not None:
            chat_id, message_id = live.chat_id, live.stream_message_id
            try:
                await self._sender.call(
                    chat_id, lambda: self._api.delete_message(chat_id, message_id)
                )
            except TelegramError as exc:
                log.info("could not delete the streamed message: %s", exc)
        live.stream_text, live.stream_message_id, live.drafts = "", None, 0

    def _of(self, source: str) -> _Live:
        live = self._chats.get(source)
        if live is None:
            live = self._chats[source] = _Live(*parse_source(source))
        return live
