"""What a tap on an approval card, or a reply giving a reason, does in Telegram.

The meaning is ``bot/platform/cards.py`` (who may decide, the choices, the reject window,
what expired is); here it meets Telegram: the button's data read back (written by
``rendering/cards.py``), the tap's answer, the card's edits, the window's "reject without
a reason" button.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from bot.delivery import CardRow
from bot.platform.access import Access
from bot.platform.cards import EXPIRED, NOT_ALLOWED, Choice, RejectWindow, decide
from bot.platform.open_cards import tapped
from bot.platform.protocols import Answer
from bot.platform.tasks import Runtime
from bot.telegram.inbound.updates import Callback, parse_source
from bot.telegram.rendering.cards import (
    ACTION_CODES,
    CALLBACK_PREFIX,
    MAX_CALLBACK_BYTES,
    MAX_TOOL_CALL_ID,
    reject_window_keyboard,
)
from bot.telegram.rendering.chat_cards import ChatCards
from bot.telegram.sending.delivery import TelegramSender
from engine.approval import Decider
from engine.hub import ChatHub
from engine.store import utcnow

__all__ = ["REASON_PROMPT", "ApprovalTaps", "CardAction", "parse_callback"]

log = logging.getLogger(__name__)

REASON_PROMPT = "Reply to this message with a reason within {seconds} s, or tap ❌ again."
_CODE_ACTIONS = {code: action for action, code in ACTION_CODES.items()}
_DIGITS = frozenset("0123456789")


@dataclass(frozen=True, slots=True)
class CardAction:
    """A pressed approval button."""

    tool_call_id: int
    action: Choice


def parse_callback(data: object) -> CardAction | None:
    """The button behind ``data``, or ``None`` for anything that is not ours or is bad."""
    if not isinstance(data, str) or not data:
        return None
    try:
        if len(data.encode("utf-8")) > MAX_CALLBACK_BYTES:
            return None
    except UnicodeEncodeError:
        return None
    parts = data.split(":")
    if len(parts) != 3 or parts[0] != CALLBACK_PREFIX:
        return None
    raw_id, code = parts[1], parts[2]
    # ASCII digits only, canonical (no sign, no leading zero): one id, one spelling.
    if not raw_id or not set(raw_id) <= _DIGITS or raw_id[0] == "0":
        return None
    action = _CODE_ACTIONS.get(code)
    if action is None:
        return None
    tool_call_id = int(raw_id)
    if tool_call_id > MAX_TOOL_CALL_ID:  # no row has it, and looking it up overflows SQLite
        return None
    return CardAction(tool_call_id, action)  # type: ignore[arg-type]


#: The least a restored reject window waits: the hub recovers its sessions first.
RESTORED_WAIT_LEAST_S = 5.0


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
        if not self._access.is_allowed(c.user_id):
            await answer(NOT_ALLOWED)
            return
        decider = self._access.decider(c.user_id)
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
        await self._cards.after_tap(card, result, action.action, c.user_name)

    async def reject(
        self,
        card: CardRow,
        user_name: str,
        note: str,
        decider: Decider,
        *,
        shown: str = "",
        also: Callable[[Connection], None] | None = None,
    ) -> bool:
        """Reject with ``note`` (a reason, or none): the window closes, the card shows it
        (or ``shown``: the reason as people read it, its files named by name only).
        ``also`` commits with the decision (the reason's update marked handled): whether
        it did."""
        refused = await self._hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:  # a reason from someone else: the window stays open
            chat_id, thread_id = parse_source(card.source)
            await self._sender.say_in(chat_id, thread_id, f"⚠️ {refused}")
            return False
        self._rejecting.close(card.tool_call_id)
        result = await decide(
            self._hub, card.source, card.tool_call_id, "reject", decider, note, also=also
        )
        await self._cards.after_tap(card, result, "reject", user_name, shown or note)
        return result == "decided"

    async def _open_window(self, card: CardRow, user_name: str, decider: Decider) -> None:
        seconds = int(self._window_s)
        window = RejectWindow(self._runtime.clock() + seconds, user_name, decider)
        self._rejecting.open(card.tool_call_id, window)
        # Kept with the card: a restart inside the window lost it (a reply with the reason
        # became a message queued behind the turn the card held; until 2026-12-07).
        kept = {
            "until": (utcnow() + timedelta(seconds=seconds)).isoformat(),
            "by": user_name,
            "user": decider.user_id,  # what they may decide is read again at a restart
        }
        await self._cards.store.open_window(card.tool_call_id, kept)
        text = f"{card.text}\n\n{REASON_PROMPT.format(seconds=seconds)}"
        keyboard = reject_window_keyboard(card.tool_call_id)
        if card.message_id is not None:  # None only for a tap on no message
            chat_id, message_id = int(card.conversation), int(card.message_id)
            await self._sender.edit(chat_id, message_id, text, card.extra or [], keyboard)
        self._runtime.background.spawn(self._reject_after_window(card, user_name, decider))

    async def restore_windows(self) -> None:
        """The reject windows open when the process stopped, with what is left of each;
        one that ran out meanwhile rejects a moment after start (once the hub runs), for
        the person who tapped it as they may decide now."""
        for card in self._cards.all_open():
            kept = card.reject_window
            try:
                left = (datetime.fromisoformat(kept["until"]) - utcnow()).total_seconds()
                user_id = kept["user"]
                user_name = str(kept["by"])
            except (TypeError, KeyError, ValueError):
                continue  # none, or not one this version wrote
            decider = self._access.decider(str(user_id)) if user_id else Decider(None)
            left = max(left, RESTORED_WAIT_LEAST_S)
            window = RejectWindow(self._runtime.clock() + left, user_name, decider)
            self._rejecting.open(card.tool_call_id, window)
            self._runtime.background.spawn(
                self._reject_after_window(card, user_name, decider, left)
            )

    async def _reject_after_window(
        self, card: CardRow, user_name: str, decider: Decider, wait_s: float | None = None
    ) -> None:
        await self._runtime.sleep(self._window_s if wait_s is None else wait_s)
        if card.tool_call_id in self._rejecting:
            await self.reject(card, user_name, "", decider)
