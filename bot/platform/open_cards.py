"""The open cards of one platform: recorded before they show, closed once.

Every platform keeps its approval cards and questions the same way: a card is recorded
(``platform_cards``) before it is sent, so a tap on it works as soon as it shows, and its
message id is added once sent; it is closed once, and whoever closes it first shows the
outcome on it. ``OpenCards`` holds that rule and an in-memory mirror of the open cards by
source (no read per hub event); how a card looks and is edited is the platform's
``CardFace``. A card the platform could not take (down, rate limited, the network) stays
open and is posted again, with backoff, until it shows or is decided elsewhere; only a
card the platform refuses is closed unseen.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from sqlalchemy.engine import Connection

from bot.delivery import (
    CardRow,
    CardStore,
    EventAlreadyHandled,
    PlatformError,
    Refused,
    RetryLater,
    describe,
)
from bot.platform.cards import CardContent, RejectWindows, card_content, reply_target
from bot.platform.tasks import Runtime
from engine.approval import OPERATOR, Decider
from engine.hub import REJECT, ChatHub, HubError, TextRefused
from engine.session import ApprovalRequired, Question, attachments_block
from engine.store import InboxError

__all__ = ["CardFace", "OpenCards", "Words", "card_is_live", "tapped", "with_files"]

log = logging.getLogger(__name__)

#: A card the platform could not take is posted again after this long, then twice as long
#: each time, up to ``REPOST_MAX_S``.
REPOST_FIRST_S = 5.0
REPOST_MAX_S = 300.0
#: A tap on a card whose call another decision took: that decision's own tap closes the
#: card with its outcome; if nothing has after this long (a crash between a decision, or
#: a /stop, and its card's edit), the card closes as expired.
TAKEN_GRACE_S = 60.0
#: What the model reads of a call, or a question, whose card the platform refused.
NOT_SHOWN = (
    "The approval card could not be shown in the chat, so nobody could approve this call "
    "and it did not run. Tell the user it needs their approval."
)
QUESTION_NOT_SHOWN = "(The question could not be shown in the chat; nobody answered it.)"


@dataclass(frozen=True, slots=True)
class Words:
    """What a card says, as stored: its text, and what the platform keeps beside it to
    show that text again (``CardRow.extra``: Telegram's entities; ``None`` elsewhere)."""

    text: str
    extra: Any = None


class CardFace(Protocol):
    """How a platform words a card, shows it, and shows its outcome."""

    def conversation(self, source: str) -> str:
        """Where ``source``'s cards are posted (the platform's channel or room)."""

    def card_words(self, shown: CardContent, tool_call_id: int) -> Words:
        """An approval card's words within the platform's limits."""

    def question_words(self, question: str) -> Words: ...

    def attachment(self, shown: CardContent, tool_call_id: int, text: str) -> Any:
        """What rides along with a card once (the call in full when ``text`` had to be
        cut), or ``None``."""

    async def post(self, card: CardRow, attachment: Any) -> str | None:
        """Send ``card`` (``attachment``: what rides along once, never stored); its
        message id, or ``None`` when the platform refused it. A failure worth retrying
        (the platform's ``PlatformError`` other than ``Refused``) is raised."""

    async def closed(self, card: CardRow, outcome: str, by: str | None, note: str | None) -> None:
        """Edit the shown ``card`` to its outcome, without its buttons."""


class OpenCards:
    def __init__(self, hub: ChatHub, store: CardStore, face: CardFace) -> None:
        self.store = store
        self._hub = hub
        self._face = face
        self._open: dict[str, dict[int, CardRow]] = {}
        self._runtime: Runtime | None = None  # given by ``load``
        #: Cards the platform could not take, waiting to be posted again (unseen).
        self._unseen: set[int] = set()
        #: Cards whose ❌ was tapped once, where a reply gives the reason (Telegram's);
        #: closing a card ends its window.
        self.rejecting = RejectWindows()

    async def send_card(self, source: str, event: ApprovalRequired) -> None:
        if await self.shown(event.tool_call_id):
            return  # asked again after a restart (or decided meanwhile): that card stands
        deciders = await self._hub.who_may_decide(event.tool_call_id)
        shown = card_content(event, deciders)
        words = self._face.card_words(shown, event.tool_call_id)
        card = self._row(source, event.tool_call_id, "approval", words)
        await self.show(card, self._face.attachment(shown, event.tool_call_id, words.text))

    async def send_question(self, source: str, event: Question) -> None:
        if await self.shown(event.request_id):
            return
        words = self._face.question_words(event.question)
        await self.show(self._row(source, event.request_id, "question", words))

    async def answer(
        self,
        card: CardRow,
        text: str,
        *,
        by: str | None,
        quietly: bool = False,
        also: Callable[[Connection], None] | None = None,
        goes_on: Callable[[], object] | None = None,
        attachments: Sequence[dict[str, Any]] = (),
        decider: Decider | None = None,
    ) -> bool:
        """Answer the question ``card`` with ``text`` and close it (``quietly``: the
        platform shows the outcome on its own); ``also`` commits with the answer (the
        message's event marked handled: a crash cannot hand it over again); ``goes_on``
        is called as the waiting turn goes on (the platform's "typing…"); the files the
        message brought (``attachments``, kept in the workspace) are named in the answer
        as a message's are.
        True: the message was the answer (or was already: the same words, or its event
        handled before; never a new message then). False when the hub no longer waits for
        it (closed as expired: the message is a message), or takes no such text (too long:
        the card stays open, and the message, refused as one, tells why), or not from
        ``decider`` (``ChatHub.answer_refusal``: the card stays open, the message is a
        message)."""
        if decider is not None and await self._hub.answer_refusal(card.tool_call_id, decider):
            return False
        text = with_files(text, attachments)
        repeated = False
        try:
            await self._hub.answer(card.tool_call_id, text, source=card.source, also=also)
        except EventAlreadyHandled:
            repeated = True
        except TextRefused as exc:  # the question still waits (until 2026-12-07 closed)
            log.info("answer to question %s refused: %s", card.tool_call_id, exc)
            return False
        except (InboxError, HubError) as exc:
            if not (isinstance(exc, InboxError) and exc.code == "repeated"):
                log.info("question %s not answerable: %s", card.tool_call_id, exc)
                await self._closed(card, "expired", None, quietly)
                return False
            repeated = True
        await self._closed(card, "answered", by, quietly)
        if not repeated and goes_on is not None and self.turn_goes_on(card.source):
            goes_on()
        return True

    def turn_goes_on(self, source: str) -> bool:
        """Whether a turn of ``source`` may still run: "typing…" is started only then. A
        turn that ended while the card's edit was sent, or while a hand-over was read,
        had it started after its end, renewed until the next turn ended (found by review
        on 2026-12-07). In a fleet the turn may run elsewhere: yes."""
        hub = self._hub
        return hub is None or hub.fleet is not None or hub.has_work(source)

    async def _closed(self, card: CardRow, state: str, by: str | None, quietly: bool) -> None:
        if quietly:
            await self.close_quietly(card, state)
        else:
            await self.close(card, state, state, by=by)

    def conversation(self, source: str) -> str:
        """Where ``source``'s cards and replies go (the platform's chat, channel or room)."""
        return self._face.conversation(source)

    def _row(self, source: str, key: int, kind: str, words: Words) -> CardRow:
        conversation = self._face.conversation(source)
        return CardRow(key, kind, source, conversation, None, words.text, words.extra, "open")

    async def load(self, runtime: Runtime) -> None:
        """The cards open when the process stopped; ``runtime``'s tasks post again what
        the platform could not take."""
        self._runtime = runtime
        for card in await self.store.open():
            self._open.setdefault(card.source, {})[card.tool_call_id] = card

    def open_in(self, source: str) -> list[CardRow]:
        return list(self._open.get(source, {}).values())

    def all_open(self) -> list[CardRow]:
        """Every card held open here."""
        return [card for cards in self._open.values() for card in cards.values()]

    async def waits_on_a_person(self, source: str) -> bool:
        """Whether the turn of ``source`` itself waits for a card or a question here (no
        "typing…" then); a scheduled job's card visiting the chat holds no turn of its
        (until 2026-12-07 one made every turn there run without "typing…"; found by
        review). Read only when a card is open there."""
        cards = self.open_in(source)
        if not cards:
            return False
        session = await self._hub.current_session(source)
        if session is None:
            return False
        waiting = {item.tool_call_id for item in await self._hub.pending_approvals(session)}
        waiting |= {item.tool_call_id for item in await self._hub.pending_questions(session)}
        return any(card.tool_call_id in waiting for card in cards)

    def answered_by(
        self, source: str, *, reply_to: str | None = None, is_command: bool = False
    ) -> tuple[Literal["answer", "reason"], CardRow] | None:
        """Which card open in ``source`` a message answers (``reply_target``'s rule, every
        platform's): a question replied to, else the newest one; a card in its reject
        window replied to. ``None``, at once when nothing is open there: a message. A
        question not shown yet (the platform away: posted again later) answers nothing:
        the person has not seen it."""
        cards = self._open.get(source)
        if not cards:
            return None
        seen = [c for c in cards.values() if c.tool_call_id not in self._unseen]
        return reply_target(
            seen, reply_to=reply_to, is_command=is_command, rejecting=self.rejecting
        )

    async def answered_now(
        self, source: str, *, reply_to: str | None = None, is_command: bool = False
    ) -> tuple[Literal["answer", "reason"], CardRow] | None:
        """``answered_by``, in a fleet with the cards of ``source`` as the table has them
        (the process running its turn showed them; this one took the message)."""
        await self._read_shared(source)
        return self.answered_by(source, reply_to=reply_to, is_command=is_command)

    async def question_now(self, source: str, *, reply_to: str | None = None) -> CardRow | None:
        """``question_for``, in a fleet as the table has it (see ``answered_now``)."""
        await self._read_shared(source)
        return self.question_for(source, reply_to=reply_to)

    async def _read_shared(self, source: str) -> None:
        if self._hub is None or self._hub.fleet is None:
            return  # one process: what it holds is all there is (no read per message)
        cards = {card.tool_call_id: card for card in await self.store.open(source)}
        if cards:
            self._open[source] = cards
        else:
            self._open.pop(source, None)

    def question_for(self, source: str, *, reply_to: str | None = None) -> CardRow | None:
        """The open question a plain message in ``source`` answers (``answered_by``)."""
        target = self.answered_by(source, reply_to=reply_to)
        return target[1] if target is not None and target[0] == "answer" else None

    async def stored(self, tool_call_id: int) -> CardRow | None:
        return await self.store.get(tool_call_id)

    async def held(self, tool_call_id: int) -> CardRow | None:
        """The card a tap names: as this process holds it open (no read), else as stored
        (closed, or shown by another process of a fleet). A card closed elsewhere but
        still held here is refused by the hub's decision, which reads the call's row."""
        for cards in self._open.values():
            if (card := cards.get(tool_call_id)) is not None:
                return card
        return await self.stored(tool_call_id)

    async def shown(self, tool_call_id: int) -> bool:
        """Shown already and not expired: asked again after a restart, that card stands."""
        existing = await self.stored(tool_call_id)
        return (
            existing is not None and existing.message_id is not None and existing.state != "expired"
        )

    async def show(self, card: CardRow, attachment: Any = None) -> None:
        await self._save(card)  # recorded before it is sent: a tap on it finds it
        later = await self._post(card, attachment)
        if later is not None and self._runtime is not None:
            self._unseen.add(card.tool_call_id)
            self._runtime.background.spawn(self._post_again(card, attachment, later))

    async def _post(self, card: CardRow, attachment: Any) -> float | None:
        """Posted, or closed (refused: never shown); else the least wait before the card
        is posted again (a 429's retry-after; 0 for an outage: the backoff's)."""
        try:
            message_id = await self._face.post(card, attachment)
        except Refused as exc:
            log.warning("card %s refused in %s: %s", card.tool_call_id, card.source, describe(exc))
            message_id = None
        except PlatformError as exc:  # away: the card waits, open, to be posted again
            log.warning(
                "card %s not shown in %s yet: %s", card.tool_call_id, card.source, describe(exc)
            )
            return exc.seconds if isinstance(exc, RetryLater) else 0.0
        if message_id is None:
            await self.close_quietly(card, "expired")  # never shown: nothing may answer it
            await self._unseen_ends(card)
        elif self._is_open(card):  # not decided meanwhile
            await self._save(replace(card, message_id=message_id))
        return None

    async def _unseen_ends(self, card: CardRow) -> None:
        """A card the platform refused (a closed topic, a blocked bot) ends its wait: its
        call is rejected, its question answered as unseen, and the turn goes on to say so
        (until 2026-12-07 it waited for a decision nobody could see, for good; found by
        review)."""
        try:
            if card.kind == "approval":
                await self._hub.decide(
                    card.tool_call_id, REJECT, decider=OPERATOR, note=NOT_SHOWN, source=None
                )
            else:
                await self._hub.answer(card.tool_call_id, QUESTION_NOT_SHOWN)
        except (InboxError, HubError) as exc:  # decided meanwhile (the inbox), or gone
            log.info("card %s refused, and its wait had ended: %s", card.tool_call_id, exc)

    async def _post_again(self, card: CardRow, attachment: Any, least: float) -> None:
        """Until it shows, is refused, or is decided elsewhere (the inbox, ``/stop``)."""
        try:
            await self._post_until_shown(card, attachment, least)
        finally:
            self._unseen.discard(card.tool_call_id)

    async def _post_until_shown(self, card: CardRow, attachment: Any, least: float) -> None:
        assert self._runtime is not None
        backoff = REPOST_FIRST_S
        while True:
            await self._runtime.sleep(max(backoff, least))
            stored = await self.stored(card.tool_call_id)
            if not self._is_open(card) or stored is None or stored.state != "open":
                return  # decided or closed meanwhile, here or by another process
            if stored.message_id is not None:
                return  # shown meanwhile (by another process of a fleet)
            try:
                later = await self._post(card, attachment)
            except Exception:  # the database: the card stays open, shown at the next start
                log.exception("posting card %s again failed", card.tool_call_id)
                return
            if later is None:
                return
            least, backoff = later, min(backoff * 2, REPOST_MAX_S)

    async def after_tap(
        self,
        card: CardRow,
        result: str,
        outcome: str,
        by: str | Callable[[], Awaitable[str]] | None,
        note: str = "",
    ) -> bool:
        """What a tap's ``decide`` result does to its card, every platform's: closed as
        expired, or with the outcome and who decided (``by``: a name, or how to look it
        up, asked only for a decision), or left to the decision that came first
        (``taken``). False for ``kept``: the tapper may not decide (the platform says so)."""
        if result == "expired":
            await self.close(card, "expired", "expired")
        elif result == "decided":
            name = by if by is None or isinstance(by, str) else await by()
            await self.close(card, outcome, "resolved", by=name, note=note or None)
        elif result == "taken":
            self.taken(card)
        else:
            return False
        return True

    def taken(self, card: CardRow) -> None:
        """``decide`` said ``taken``: the card closes with the first decision's outcome,
        else as expired after ``TAKEN_GRACE_S`` (its buttons stayed live forever)."""
        if self._runtime is not None:
            self._runtime.background.spawn(self._expire_if_left(card, self._runtime))

    async def _expire_if_left(self, card: CardRow, runtime: Runtime) -> None:
        await runtime.sleep(TAKEN_GRACE_S)
        stored = await self.stored(card.tool_call_id)
        if stored is not None and stored.state == "open":
            await self.close(stored, "expired", "expired")

    def _is_open(self, card: CardRow) -> bool:
        return card.tool_call_id in self._open.get(card.source, {})

    async def _save(self, card: CardRow) -> None:
        await self.store.save(card)
        self._open.setdefault(card.source, {})[card.tool_call_id] = card

    async def close_quietly(self, card: CardRow, state: str) -> bool:
        self.rejecting.close(card.tool_call_id)
        cards = self._open.get(card.source, {})
        cards.pop(card.tool_call_id, None)
        if not cards:
            self._open.pop(card.source, None)
        return await self.store.close(card.tool_call_id, state)

    async def close(
        self,
        card: CardRow,
        outcome: str,
        state: str,
        *,
        by: str | None = None,
        note: str | None = None,
    ) -> None:
        """Show the outcome on the card once, without its buttons."""
        if not await self.close_quietly(card, state):
            return
        if card.message_id is not None:
            await self._face.closed(card, outcome, by, note)

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
        card = self._open.get(source, {}).get(tool_call_id)
        if card is not None:
            await self.close(card, outcome, state, by=by, note=note or None)


def card_is_live(card: CardRow | None, kind: str, conversation: str, shown_at: str | None) -> bool:
    """What a control on a card may act on (``bot.platform.cards.is_live``'s rule for the
    stored card): open, of this kind, in this conversation, on the message that shows it
    (a form's submit may not name one)."""
    return (
        card is not None
        and card.kind == kind
        and card.state == "open"
        and card.conversation == conversation
        and (card.message_id is None or shown_at is None or card.message_id == shown_at)
    )


def tapped(
    card: CardRow | None, kind: str, conversation: str, shown_at: str | None
) -> CardRow | None:
    """The card a control on ``shown_at`` acts on, ``None`` when it may not
    (``card_is_live``). A card tapped before its message id was recorded (the tap can
    come as soon as it shows) gets the id from the tap, so its outcome is shown on it."""
    if card is None or not card_is_live(card, kind, conversation, shown_at):
        return None
    if card.message_id is None and shown_at:
        return replace(card, message_id=shown_at)
    return card


def with_files(text: str, attachments: Sequence[dict[str, Any]]) -> str:
    """A person's words to the agent with the files their message brought named as a
    message's are (kept in the workspace): a question's answer, a rejection's reason."""
    if not attachments:
        return text
    return f"{text}\n\n{attachments_block(list(attachments))}".strip()
