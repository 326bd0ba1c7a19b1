"""The approval cards and questions shown in Telegram chats: sent, kept open, closed.

Open cards are stored (``telegram_cards``) and mirrored in memory by source, so a message
or a tool event checks them without a read. A card is recorded before it is sent (a tap
on a card we never recorded still works) and closed once: whoever closes it first edits
it to show the outcome.
"""

from __future__ import annotations

from dataclasses import replace

from bot.delivery import SEND
from bot.platform.cards import RejectWindows
from bot.telegram.inbound.updates import parse_source
from bot.telegram.rendering.cards import approval_card, question_text, resolved_card
from bot.telegram.sending.api import TelegramError
from bot.telegram.sending.delivery import TelegramSender
from bot.telegram.store import CardRow, TelegramStore
from engine.hub import ChatHub
from engine.session import ApprovalRequired, Question

__all__ = ["ChatCards"]

_FORCE_REPLY = {"force_reply": True, "input_field_placeholder": "Your answer"}


class ChatCards:
    def __init__(
        self,
        hub: ChatHub,
        store: TelegramStore,
        sender: TelegramSender,
    ) -> None:
        self._hub = hub
        self.store = store
        self._sender = sender
        #: Cards whose ❌ was tapped once; closing a card ends its window.
        self.rejecting = RejectWindows()
        self._open: dict[str, dict[int, CardRow]] = {}

    async def load(self) -> None:
        for card in await self.store.open_cards():
            self._open.setdefault(card.source, {})[card.tool_call_id] = card

    def open_in(self, source: str) -> list[CardRow]:
        return list(self._open.get(source, {}).values())

    async def stored(self, tool_call_id: int) -> CardRow | None:
        """The card as stored, open or not (a tap checks the store, not the mirror)."""
        return await self.store.card(tool_call_id)

    # -- showing --------------------------------------------------------------------------

    async def send_card(self, source: str, event: ApprovalRequired) -> None:
        if await self._shown(event.tool_call_id):
            return  # asked again after a restart (or decided meanwhile): that card stands
        deciders = await self._hub.who_may_decide(event.tool_call_id)
        card = approval_card(event, deciders=deciders)
        chat_id, thread_id = parse_source(source)
        # Recorded before sending: a tap on a card we never recorded still works.
        row = CardRow(
            event.tool_call_id, "approval", source, chat_id, None, card.text, card.entities, "open"
        )
        await self._save(row)
        sent = await self._sender.send_text(
            chat_id,
            card.text,
            entities=card.entities,
            reply_markup=card.reply_markup,
            thread_id=thread_id,
        )
        await self._save(replace(row, message_id=sent.get("message_id")))
        if card.document is not None:
            filename, data = card.document
            await self._sender.call(
                chat_id,
                lambda: self._sender.api.send_document(
                    chat_id,
                    filename,
                    data,
                    caption="The full arguments of the call above.",
                    message_thread_id=thread_id,
                ),
                kind=SEND,
            )

    async def send_question(self, source: str, event: Question) -> None:
        if await self._shown(event.request_id):
            return  # asked again after a restart: the question already shown still works
        text, entities = question_text(event.question)
        chat_id, thread_id = parse_source(source)
        card = CardRow(event.request_id, "question", source, chat_id, None, text, entities, "open")
        # Open before it is sent: an answer typed the moment the question shows must find it.
        await self._save(card)
        try:
            sent = await self._sender.send_text(
                chat_id, text, entities=entities, reply_markup=_FORCE_REPLY, thread_id=thread_id
            )
        except TelegramError:
            await self.close_quietly(card, "expired")  # never shown: nothing may answer it
            raise
        if card.tool_call_id in self._open.get(source, {}):  # not answered meanwhile
            await self._save(replace(card, message_id=sent.get("message_id")))

    async def _shown(self, key: int) -> bool:
        """The card or question was shown and still works, or was decided: a second one
        would ask again what is asked (or answered) already. An expired one was never
        answered: a new one is shown."""
        existing = await self.stored(key)
        return (
            existing is not None and existing.message_id is not None and existing.state != "expired"
        )

    async def _save(self, card: CardRow) -> None:
        await self.store.save_card(card)
        self._open.setdefault(card.source, {})[card.tool_call_id] = card

    # -- closing --------------------------------------------------------------------------

    async def close_quietly(self, card: CardRow, state: str) -> bool:
        """Close in the store and in memory; False when it was closed already."""
        cards = self._open.get(card.source, {})
        cards.pop(card.tool_call_id, None)
        if not cards:
            self._open.pop(card.source, None)
        return await self.store.close_card(card.tool_call_id, state)

    async def close(
        self,
        card: CardRow,
        outcome: str,
        state: str,
        *,
        by: str | None = None,
        note: str | None = None,
    ) -> None:
        """Show the outcome on the card once (whoever closes it first edits it)."""
        if not await self.close_quietly(card, state):
            return
        self.rejecting.close(card.tool_call_id)
        if card.message_id is None:
            return
        text, entities = resolved_card(card.text, card.entities or [], outcome, by, note=note)
        await self._sender.edit(card.chat_id, card.message_id, text, entities, None)

    async def close_by_id(
        self,
        source: str,
        tool_call_id: int,
        outcome: str,
        state: str,
        *,
        by: str | None = None,
        note: str | None = None,
    ) -> None:
        card = self._open.get(source, {}).get(tool_call_id)  # no read per tool event
        if card is not None:
            await self.close(card, outcome, state, by=by, note=note or None)
