"""Approval cards and questions in Matrix: one message each, listing its choices, decided
by a reaction on it (or a reply), and edited once (``m.replace``) to its outcome.

Matrix has no buttons: an allowed person reacts ✅ (approve), ❌ (reject), ⏱ (15 min) or
🔄 (session), with or without the emoji variation selector, or replies to the card (the
reply is the reason of a rejection, or a question's answer). The card is kept open in
the delivery layer's cards (``platform_cards``) under its event id, so a reaction on a
card shown before a restart still works after it, once.
"""

from __future__ import annotations

import re
from typing import Any

from nio import RoomGetEventResponse

from bot.delivery import OTHER, CardRow, CardStore, RetryLater, Unavailable
from bot.matrix.incoming import parse_source
from bot.matrix.sending import (
    MatrixError,
    MatrixSender,
    call,
    content_of,
    fitted,
    in_thread,
)
from bot.platform.cards import CardContent, Choice, outcome_line
from bot.platform.open_cards import OpenCards, Words
from engine.hub import ChatHub

__all__ = ["CHOICE_LINE", "MatrixCards", "card_text", "choice_of", "question_text"]

#: The reactions that decide a card (their keys without the variation selector).
REACTIONS: dict[str, Choice] = {
    "✅": "approve",
    "❌": "reject",
    "⏱": "bypass_15m",
    "🔄": "bypass_session",
}
CHOICE_LINE = (
    "React ✅ to approve · ❌ to reject · ⏱ approve for 15 min · 🔄 for the session — "
    "or reply with a reason to reject."
)
QUESTION_LINE = "Reply to this message to answer."
#: How much of a call a card shows (the inbox page shows it all).
CARD_LIMIT = 6000
_VARIATION_SELECTOR = "\ufe0f"


def choice_of(key: str) -> Choice | None:
    """The choice a reaction's key means (``✅`` and ``✅\\ufe0f`` alike), else ``None``."""
    return REACTIONS.get(key.replace(_VARIATION_SELECTOR, "").strip())


def _fence(content: str) -> str:
    """A code block no content can close (a fence longer than any run of backticks)."""
    fence = "`" * max(3, _longest_backticks(content) + 1)
    return f"{fence}\n{content}\n{fence}"


def _longest_backticks(text: str) -> int:
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest


def _code(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def card_text(shown: CardContent, limit: int = CARD_LIMIT) -> str:
    """The card in Markdown: the title, the tool, who may decide, the call in a code
    block (its beginning, said so, when it is longer than ``limit``)."""
    lines = [
        f"**{shown.title}**",
        f"Tool: {_code(shown.tool[:100])} · Agent: {_code(shown.agent[:100])}",
    ]
    if shown.depth > 0:
        lines[-1] += f" (sub-agent, depth {shown.depth})"
    if shown.deciders:
        lines.append(f"👤 {shown.deciders[:200]}")
    if shown.label == "Diff" and shown.path:
        new = " (new file)" if shown.new_file else ""
        lines.append(f"File: {_code(shown.path[:200])}{new}")
    content = shown.content
    cut = len(content) > limit
    if cut:
        content = content[:limit].rstrip() + "\n…"
    lines.append(f"{shown.label}:\n\n{_fence(content)}")
    if shown.workdir:
        lines.append(f"Working directory: {_code(shown.workdir[:200])}")
    if cut:
        lines.append("⚠️ Cut: showing only the beginning (the inbox page shows it all).")
    return "\n\n".join(lines)


def question_text(question: str) -> str:
    return f"**❓ Question**\n\n{question[:CARD_LIMIT]}"


def _shown(card: CardRow) -> str:
    """A card with the line that says how to decide it."""
    return f"{card.text}\n\n{CHOICE_LINE if card.kind == 'approval' else QUESTION_LINE}"


def _closed(card: CardRow, outcome: str, by: str | None, note: str | None) -> str:
    verb, suffix = outcome_line(outcome)
    line = f"**{verb}**" + (f" by {by}" if by else "") + suffix
    if note:
        line += f": {note[:1000]}"
    return f"{card.text}\n\n{line}"


class MatrixFace:
    """Matrix's look of a card: a message in the card's room (and thread), replaced once."""

    def __init__(self, sender: MatrixSender) -> None:
        self._sender = sender

    def conversation(self, source: str) -> str:
        return parse_source(source).room_id

    def card_words(self, shown: CardContent, tool_call_id: int) -> Words:
        return Words(card_text(shown))

    def question_words(self, question: str) -> Words:
        return Words(question_text(question))

    def attachment(self, shown: CardContent, tool_call_id: int, text: str) -> None:
        return None  # the inbox page shows a cut call in full

    async def post(self, card: CardRow, attachment: Any) -> str | None:
        place = parse_source(card.source)
        content = in_thread(fitted(content_of(_shown(card))), place)
        return await self._sender.post_now(place, content, f"card.{card.tool_call_id}")

    async def closed(self, card: CardRow, outcome: str, by: str | None, note: str | None) -> None:
        assert card.message_id is not None
        content = fitted(content_of(_closed(card, outcome, by, note)))
        key = f"card-closed.{card.tool_call_id}"
        await self._sender.replace_for_good(card.conversation, card.message_id, content, key)


class MatrixCards(OpenCards):
    """The open cards (``OpenCards``), as Matrix messages."""

    def __init__(self, hub: ChatHub, store: CardStore, sender: MatrixSender) -> None:
        super().__init__(hub, store, MatrixFace(sender))
        self._sender = sender
        #: The transaction id a card is posted with (``MatrixFace.post``): the homeserver
        #: gives it back to the account that sent the event.
        self._card_txn = re.compile(rf"{re.escape(sender.txn_prefix)}\.card\.(\d+)")

    async def at(self, room_id: str, event_id: str) -> CardRow | None:
        """The card shown by ``event_id`` in ``room_id`` (open or not), from the store; or
        a card of the room posted and not recorded yet (the answer of its post slow or
        lost): the homeserver says which, by the transaction id the card was sent with.
        Until 2026-12-07 a ✅ in that window decided nothing, and the card waited until
        it expired (found by review)."""
        card = await self.store.at(room_id, event_id)
        if card is None and await self.store.unshown_in(room_id):
            card = await self._posted_as(room_id, event_id)
        return card

    async def _posted_as(self, room_id: str, event_id: str) -> CardRow | None:
        """The open card whose post made ``event_id``, now recorded as shown by it."""
        sender = self._sender
        try:  # a 429 or an outage raises: the event is read again, not dropped
            answer = await sender.outbound.call(
                room_id, lambda: call(sender.nio.room_get_event(room_id, event_id)), kind=OTHER
            )
        except (RetryLater, Unavailable):
            raise
        except MatrixError:
            return None
        if (
            not isinstance(answer, RoomGetEventResponse)
            or answer.event.sender != sender.nio.user_id
        ):
            return None
        unsigned = answer.event.source.get("unsigned")
        txn = unsigned.get("transaction_id") if isinstance(unsigned, dict) else None
        posted = self._card_txn.fullmatch(txn) if isinstance(txn, str) else None
        if posted is None:
            return None
        return await self.store.shown_as(int(posted.group(1)), room_id, event_id)
