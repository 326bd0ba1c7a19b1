"""Reactions and replies on a card, after they were stored: what an allowed person decided.

A reaction's key names its choice (``cards.REACTIONS``, the emoji variation selector or
not); a reply to an approval card rejects it with the reply as the reason; a reply to a
question answers it. A reaction is judged by what the store says of its card (open, in
this room, shown by the event reacted to), never by the reaction itself, so a card shown
before a restart works after it, once; a reaction redacted before it is handled decides
nothing (the homeserver is asked). Refusals are said in the room, once per card and
person, so a stranger's reactions cannot make the bot talk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from nio import AsyncClient, RoomGetEventResponse
from sqlalchemy.engine import Connection

from bot.delivery import OTHER, CardRow, EventAlreadyHandled, RetryLater, Unavailable
from bot.matrix.cards import MatrixCards, choice_of
from bot.matrix.incoming import MATRIX, Incoming, parse_source
from bot.matrix.people import People
from bot.matrix.sending import MatrixError, MatrixSender, call
from bot.platform.access import Access
from bot.platform.cards import NOT_ALLOWED, Choice, decide
from bot.platform.handover import marking
from bot.platform.open_cards import card_is_live
from engine.hub import ChatHub

__all__ = ["Decisions"]

log = logging.getLogger(__name__)


class Decisions:
    def __init__(
        self,
        hub: ChatHub,
        nio: AsyncClient,
        access: Access,
        cards: MatrixCards,
        sender: MatrixSender,
        people: People,
    ) -> None:
        self._hub = hub
        self._nio = nio
        self._access = access
        self._cards = cards
        self._sender = sender
        self._people = people
        self._refused: set[tuple[int, str]] = set()

    async def reaction(self, m: Incoming) -> None:
        choice = choice_of(m.text)
        if choice is None or m.relates_to is None:
            return  # another emoji: a person's reaction, not a decision
        card = await self._cards.at(m.room_id, m.relates_to)
        if not card_is_live(card, "approval", m.room_id, m.relates_to):
            return  # decided, expired, or not a card: nothing to do
        assert card is not None
        if not await self._still_there(m):
            return
        await self._decide(card, choice, m.sender)

    async def reply(
        self,
        m: Incoming,
        text: str,
        attachments: Sequence[dict[str, Any]] = (),
        goes_on: Callable[[], object] | None = None,
    ) -> bool | None:
        """A reply to a card: True when it was one (a reason, an answer, or refused);
        False for an answer the hub does not take (the question gone, the text too long):
        a message then, answering no other question; ``None`` when it replies to no open
        card here. An answer carries the files its message brought (``attachments``) and
        marks the event handled in its own commit; ``goes_on``: the waiting turn goes on."""
        assert m.relates_to is not None
        card = await self._cards.at(m.room_id, m.relates_to)
        if card is None or card.state != "open" or card.conversation != m.room_id:
            return None
        if card.kind == "question":  # not taken (expired, too long): a message then
            return await self._answer(card, text, m, attachments, goes_on)
        try:
            # Marked in the rejection's commit: a crash before a mark of its own gave the
            # agent the reason again, as a message (until 2026-12-06).
            await self._decide(card, "reject", m.sender, text, also=marking(MATRIX, m.key))
        except EventAlreadyHandled:  # given before (another process of a fleet took it)
            log.info("Matrix event %s was handled already; no second decision", m.key)
        return True

    async def _decide(
        self,
        card: CardRow,
        choice: Choice,
        user: str,
        note: str = "",
        also: Callable[[Connection], None] | None = None,
    ) -> None:
        if not self._access.is_allowed(user):
            await self._refuse(card, user, NOT_ALLOWED)
            return
        decider = self._access.decider(user)
        refused = await self._hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:  # the card stays as it is, for those who may decide
            await self._refuse(card, user, refused)
            return
        result = await decide(
            self._hub, card.source, card.tool_call_id, choice, decider, note, also=also
        )
        name = partial(self._people.name_of, user)
        if not await self._cards.after_tap(card, result, choice, name, note):
            await self._refuse(card, user, NOT_ALLOWED)

    async def _answer(
        self,
        card: CardRow,
        text: str,
        m: Incoming,
        attachments: Sequence[dict[str, Any]],
        goes_on: Callable[[], object] | None,
    ) -> bool:
        if not self._access.is_allowed(m.sender):
            await self._refuse(card, m.sender, NOT_ALLOWED)
            return True
        if not text.strip():
            return True
        # Marked in the answer's commit: a crash before a mark of its own handed the
        # same reply over again as a new message (found by review on 2026-12-06).
        return await self._cards.answer(
            card,
            text,
            by=await self._people.name_of(m.sender),
            also=marking(MATRIX, m.key),
            goes_on=goes_on,
            attachments=attachments,
            decider=self._access.decider(m.sender),
        )

    async def _refuse(self, card: CardRow, user: str, line: str) -> None:
        if (card.tool_call_id, user) in self._refused:
            return
        self._refused.add((card.tool_call_id, user))
        name = await self._people.name_of(user)
        await self._sender.say_at(parse_source(card.source), f"{name}: {line}")

    async def _still_there(self, m: Incoming) -> bool:
        """Whether the reaction still stands (a redacted one has lost its content)."""
        try:  # paced and retried: a 429 read as "redacted" until 2026-12-06 (found by review)
            answer = await self._sender.outbound.call(
                m.room_id, lambda: call(self._nio.room_get_event(m.room_id, m.event_id)), kind=OTHER
            )
        except (RetryLater, Unavailable) as exc:
            log.warning("reaction %s in %s: %s; taken", m.event_id, m.room_id, exc.description)
            return True  # it came, and nothing said it went: not knowing is not "gone"
        except MatrixError as exc:
            log.info("reaction %s in %s: %s", m.event_id, m.room_id, exc.description)
            return False
        if not isinstance(answer, RoomGetEventResponse):
            return False
        content = answer.event.source.get("content")
        return isinstance(content, dict) and bool(content)
