"""What a tap on an approval card, or a reply giving a reason, does in Telegram.

The meaning is ``bot/platform/cards.py`` (who may decide, the choices, the reject window,
what expired is); here it meets Telegram: the tap's answer, the card's edits, the window's
"reject without a reason" button.
"""

from __future__ import annotations

import logging

from bot.delivery import CardRow
from bot.platform.access import Access
from bot.platform.cards import EXPIRED, NOT_ALLOWED, RejectWindow, decide
from bot.platform.open_cards import tapped
from bot.platform.protocols import Answer
from bot.platform.tasks import Runtime
from bot.telegram.dispatch.access import user_key
from bot.telegram.inbound.updates import Callback, parse_source
from bot.telegram.rendering.cards import parse_callback, reject_window_keyboard
from bot.telegram.rendering.chat_cards import ChatCards
from bot.telegram.sending.delivery import TelegramSender
from engine.approval import Decider
from engine.hub import ChatHub

__all__ = ["REASON_PROMPT", "ApprovalTaps"]

log = logging.getLogger(__name__)

REASON_PROMPT = "Reply to this message with a reason within {seconds} s, or tap ❌ again."


class ApprovalTaps:
    def __init__(
        self,
        hub: ChatHub,
        access: Access,
        cards: ChatCards,
        sender: TelegramSender,
        window_s: float,
        runtime: Runtime,
    ) -> None:
        self._hub = hub
        self._access = access
        self._cards = cards
        self._sender = sender
        self._rejecting = cards.rejecting
        self._window_s = window_s
        self._runtime = runtime

    async def on_tap(self, c: Callback, answer: Answer) -> None:
        action = parse_callback(c.data)  # None for ids no card can have (past 64 bits)
        held = await self._cards.held(action.tool_call_id) if action else None
        shown_at = "" if c.message_id is None else str(c.message_id)  # none: not a card's
        card = tapped(held, "approval", str(c.chat_id), shown_at)
        if action is None or card is None:
            await answer(EXPIRED)
            return
        user = user_key(c.user_id)
        if not self._access.is_allowed(user):
            await answer(NOT_ALLOWED)
            return
        decider = self._access.decider(user)
        refused = await self._hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:  # the card stays as it is, for those who may decide
            await answer(refused)
            return
        await answer(None)  # at once: the spinner stops
        if action.action == "reject":
            if card.tool_call_id in self._rejecting:
                await self.reject(card, c.user_name, "", decider)
            else:
                await self._open_window(card, c.user_name, decider)
            return
        result = await decide(self._hub, card.source, card.tool_call_id, action.action, decider)
        if result == "expired":
            await self._cards.close(card, "expired", "expired")
        elif result == "decided":
            await self._cards.close(card, action.action, "resolved", by=c.user_name)

    async def reject(self, card: CardRow, user_name: str, note: str, decider: Decider) -> None:
        """Reject with ``note`` (a reason, or none): the window closes, the card shows it."""
        refused = await self._hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:  # a reason from someone else: the window stays open
            chat_id, thread_id = parse_source(card.source)
            await self._sender.say_in(chat_id, thread_id, f"⚠️ {refused}")
            return
        self._rejecting.close(card.tool_call_id)
        result = await decide(self._hub, card.source, card.tool_call_id, "reject", decider, note)
        if result == "expired":
            await self._cards.close(card, "expired", "expired")
        elif result == "decided":
            await self._cards.close(card, "reject", "resolved", by=user_name, note=note or None)

    async def _open_window(self, card: CardRow, user_name: str, decider: Decider) -> None:
        seconds = int(self._window_s)
        window = RejectWindow(self._runtime.clock() + seconds, user_name, decider)
        self._rejecting.open(card.tool_call_id, window)
        text = f"{card.text}\n\n{REASON_PROMPT.format(seconds=seconds)}"
        keyboard = reject_window_keyboard(card.tool_call_id)
        if card.message_id is not None:  # None only for a tap on no message
            chat_id, message_id = int(card.conversation), int(card.message_id)
            await self._sender.edit(chat_id, message_id, text, card.extra or [], keyboard)
        self._runtime.background.spawn(self._reject_after_window(card, user_name, decider))

    async def _reject_after_window(self, card: CardRow, user_name: str, decider: Decider) -> None:
        await self._runtime.sleep(self._window_s)
        if card.tool_call_id in self._rejecting:
            await self.reject(card, user_name, "", decider)
