"""The approval cards and questions shown in Telegram chats, on every platform's rule.

``OpenCards`` (``bot/platform/open_cards.py``) records a card before it is sent, keeps the
open ones in memory by source and closes each once; here is how Telegram shows them: the
card's text with its entities (kept with the card, so its outcome can be shown on it
after a restart), the ✅ / ❌ / ⏱ / 🔄 keyboard or a force-reply for a question, the call in
full as a document when the card had to cut it, and the edit to the outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bot.delivery import SEND, CardRow, CardStore
from bot.platform.cards import CardContent
from bot.platform.open_cards import OpenCards, Words
from bot.telegram.inbound.updates import MESSAGE_ID_KEY, parse_source
from bot.telegram.rendering.cards import approval_keyboard, card_of, question_text, resolved_card
from bot.telegram.sending.api import Json, TelegramError
from bot.telegram.sending.delivery import TelegramSender
from engine.hub import ChatHub

__all__ = ["ChatCards", "TelegramFace"]

log = logging.getLogger(__name__)

_FORCE_REPLY = {"force_reply": True, "input_field_placeholder": "Your answer"}
#: In a group only the asker is made to reply: ``selective`` forces the reply on the
#: sender of the message the question replies to (until 2026-12-07 every member's client
#: opened a reply to the bot; found by review).
_FORCE_REPLY_SELECTIVE = {**_FORCE_REPLY, "selective": True}


class TelegramFace:
    """Telegram's look of a card: text and entities with a keyboard, edited to its outcome."""

    def __init__(self, sender: TelegramSender) -> None:
        self._sender = sender
        #: The message each chat's running turn answers, by source: a question in a
        #: group replies to it (kept as each turn starts; lost at a restart, when the
        #: question is sent targeting no one rather than everyone).
        self._askers: dict[str, int] = {}

    async def turn_started(self, source: str, metadata: Mapping[str, Any] | None) -> None:
        """A ``TurnContext`` adding nothing: notes the message the turn answers."""
        if not source.startswith("telegram:") or metadata is None:
            return None  # a resumed turn answers the message it answered
        message_id = metadata.get(MESSAGE_ID_KEY)
        if isinstance(message_id, int):
            self._askers[source] = message_id
        else:  # a job's run, a message from elsewhere: asked by no one in the chat
            self._askers.pop(source, None)
        return None

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
        markup: Json = approval_keyboard(card.tool_call_id)
        reply_to = None
        if question and chat_id < 0:  # a group's (a private chat's id is its person's)
            markup, reply_to = _FORCE_REPLY_SELECTIVE, self._askers.get(card.source)
        elif question:
            markup = _FORCE_REPLY
        sent = await self._sender.send_text(
            chat_id,
            card.text,
            entities=card.extra,
            reply_markup=markup,
            thread_id=thread_id,
            reply_to=reply_to,
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
        face = TelegramFace(sender)
        super().__init__(hub, store, face)
        hub.add_turn_context(face.turn_started)
