"""``TelegramSender``: how the platform outbox, cards and commands send to Telegram.

The outbox's sender (``bot.platform.protocols.OutboxSender``) over ``Outbound`` (pacing,
retries, the durable outbox table): replies rendered to text + entities and split at
Telegram's limit, recorded as ``telegram_outbox`` rows, sent from them; plus the plain
messages, edits and tap answers everything else here needs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from bot.platform.protocols import MessageRef
from bot.telegram.api import BotApi, Json, TelegramError, is_not_modified
from bot.telegram.outbound import Outbound
from bot.telegram.render import progress_text, render_markdown
from bot.telegram.store import OutboxRow, enqueue_in
from bot.telegram.updates import parse_source

__all__ = ["TelegramSender"]

log = logging.getLogger(__name__)


class TelegramSender:
    def __init__(self, api: BotApi, outbound: Outbound) -> None:
        self.api = api
        self.outbound = outbound

    # -- the outbox's sender ----------------------------------------------------------------

    def prepare(self, source: str, text: str) -> list[Json]:
        """The reply's parts, as the outbox stores them."""
        thread_id = parse_source(source)[1]
        return [
            {"text": chunk.text, "entities": chunk.entities, "thread_id": thread_id}
            for chunk in render_markdown(text)
        ]

    def record(
        self, conn: Connection, source: str, key: str, prepared: list[Json]
    ) -> list[OutboxRow]:
        chat_id = parse_source(source)[0]
        mark = self.outbound.mark()  # in the transaction: its commit comes after
        rows = [
            enqueue_in(conn, chat_id, f"{key}:{index}", payload, self.outbound.store.process_id)
            for index, payload in enumerate(prepared)
        ]
        return self.outbound.taken([row for row in rows if row is not None], mark)

    async def send_recorded(self, rows: Sequence[OutboxRow]) -> None:
        await self.outbound.deliver_rows(rows)

    async def send_durable(self, source: str, key: str, prepared: list[Json]) -> None:
        chat_id = parse_source(source)[0]
        for index, payload in enumerate(prepared):
            await self.outbound.deliver(chat_id, f"{key}:{index}", payload)

    async def say(self, source: str, text: str) -> None:
        await self.say_in(*parse_source(source), text)

    def progress_text(self, lines: Sequence[str]) -> str:
        return progress_text(lines)

    async def send_progress(self, source: str, text: str) -> MessageRef | None:
        chat_id, thread_id = parse_source(source)
        sent = await self.outbound.send_text(chat_id, text, thread_id=thread_id)
        return sent.get("message_id")

    async def edit_progress(self, source: str, ref: MessageRef, text: str) -> None:
        await self.edit(parse_source(source)[0], int(ref), text, [], None)

    # -- what else is sent ------------------------------------------------------------------

    async def say_in(self, chat_id: int, thread_id: int | None, text: str) -> None:
        """Markdown ``text`` as one or more messages; a failure is logged, not raised."""
        for chunk in render_markdown(text) or ():
            try:
                await self.outbound.send_text(
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
                chat_id,
                message_id,
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

    async def answer_callback(self, callback_id: str, text: str | None) -> None:
        try:
            await self.api.answer_callback_query(callback_id, text=text)
        except TelegramError as exc:
            log.info("answering callback %s failed: %s", callback_id, exc)
