"""The approval cards and questions shown in Telegram chats, on every platform's rule.

``OpenCards`` (``bot/platform/open_cards.py``) records a card before it is sent, keeps the
open ones in memory by source and closes each once; here is how Telegram shows them: the
card's text with its entities (kept with the card, so its outcome can be shown on it
after a restart), the ✅ / ❌ / ⏱ / 🔄 keyboard or a force-reply for a question, the call in
full as a document when the card had to cut it, and the edit to the outcome.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.delivery import SEND, CardRow, CardStore
from bot.platform.cards import CardContent
from bot.platform.open_cards import OpenCards, Words
from bot.telegram.inbound.updates import parse_source
from bot.telegram.rendering.cards import approval_keyboard, card_of, question_text, resolved_card
from bot.telegram.sending.api import TelegramError
from bot.telegram.sending.delivery import TelegramSender
from engine.hub import ChatHub

__all__ = ["ChatCards", "TelegramFace"]

log = logging.getLogger(__name__)

_FORCE_REPLY = {"force_reply": True, "input_field_placeholder": "Your answer"}


class TelegramFace:
    """Telegram's look of a card: text and entities with a keyboard, edited to its outcome."""

    def __init__(self, sender: TelegramSender) -> None:
        self._sender = sender

    def conversation(self, source: str) -> str:
        return str(parse_source(source)[0])

    def card_words(self, shown: CardContent, tool_call_id: int) -> Words:
        card = card_of(shown, tool_call_id)
        return Words(card.text, card.entities)

    def question_words(self, question: str) -> Words:
        return Words(*question_text(question))

    def attachment(self, shown: CardContent, tool_call_id: int, text: str) -> Any:
        """The call in full as a document, when the card shows only its beginning."""
        return card_of(shown, tool_call_id).document

    async def post(self, card: CardRow, attachment: tuple[str, bytes] | None) -> str | None:
        chat_id, thread_id = parse_source(card.source)
        # A failure is raised: refused, the card is closed unseen; else posted again.
        question = card.kind == "question"
        markup = _FORCE_REPLY if question else approval_keyboard(card.tool_call_id)
        sent = await self._sender.send_text(
            chat_id, card.text, entities=card.extra, reply_markup=markup, thread_id=thread_id
        )
        if attachment is not None:
            # The card shows (its buttons work) whatever becomes of the call in full: a
            # failure here posted the card again, or closed the one showing.
            try:
                await self._send_document(chat_id, thread_id, attachment)
            except TelegramError as exc:
                log.warning("the call in full of card %s not sent: %s", card.tool_call_id, exc)
        message_id = sent.get("message_id")
        return None if message_id is None else str(message_id)

    async def _send_document(
        self, chat_id: int, thread_id: int | None, document: tuple[str, bytes]
    ) -> None:
        filename, data = document
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

    async def closed(self, card: CardRow, outcome: str, by: str | None, note: str | None) -> None:
        assert card.message_id is not None
        text, entities = resolved_card(card.text, card.extra or [], outcome, by, note=note)
        await self._sender.edit(int(card.conversation), int(card.message_id), text, entities, None)


class ChatCards(OpenCards):
    """The open cards (``OpenCards``) in Telegram chats."""

    def __init__(self, hub: ChatHub, store: CardStore, sender: TelegramSender) -> None:
        super().__init__(hub, store, TelegramFace(sender))
