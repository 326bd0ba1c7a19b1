"""Hub events back into a platform's conversations: one source's events in order.

Each turn event becomes what the conversation shows: the progress line and the final
reply (through the platform outbox), cards and questions (the platform's ``CardShelf``),
streaming and the typing indicator (its ``Activity``). Every platform renders the same
events the same way; what differs is behind those two seams and the outbox's sender.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from bot.platform.outbox import DONE, FAILED, SKIPPED, Outbox
from engine.bus import Lagged
from engine.hub import DecisionMade, FailureNotice, HubEvent, NewSession
from engine.session import (
    ApprovalRequired,
    Done,
    Error,
    Question,
    TextDelta,
    Thinking,
    ToolCancelled,
    ToolDone,
    ToolError,
    ToolRejected,
    ToolStart,
)

if TYPE_CHECKING:
    from bot.platform.open_cards import OpenCards

__all__ = ["Activity", "CardShelf", "EventRenderer", "typing_for_its_turn"]

log = logging.getLogger(__name__)


class CardShelf(Protocol):
    """A platform's approval cards and questions: shown, and closed with their outcome."""

    async def send_card(self, source: str, event: ApprovalRequired) -> None: ...

    async def send_question(self, source: str, event: Question) -> None: ...

    async def close_by_id(
        self,
        source: str,
        tool_call_id: int,
        outcome: str,
        state: str,
        *,
        by: str | None = None,
        note: str | None = None,
    ) -> None: ...


class Activity(Protocol):
    """What a conversation shows while a turn runs besides the progress line."""

    async def stream(self, source: str, delta: str) -> None: ...

    def thinking(self, source: str) -> None: ...

    def start_typing(self, source: str) -> None: ...

    def stop_typing(self, source: str) -> None: ...

    async def end_stream(self, source: str) -> None: ...


async def typing_for_its_turn(activity: Activity, cards: OpenCards, source: str) -> None:
    """ "typing…" for a message just handed over, unless the conversation's own turn waits
    for a person (a card, a question): none shows under one (``waits_on_a_person``)."""
    if not await cards.waits_on_a_person(source) and cards.turn_goes_on(source):
        activity.start_typing(source)


class EventRenderer:
    def __init__(
        self,
        prefix: str,
        outbox: Outbox[Any, Any],
        cards: CardShelf,
        activity: Activity,
        *,
        streaming: bool,
        busy: Callable[[str], bool],
    ) -> None:
        """``prefix``: the platform's sources (``telegram:``, ``discord:``); ``busy``:
        whether a turn works on a source (the hub's ``has_work``)."""
        self._prefix = prefix
        self._outbox = outbox
        self._cards = cards
        self._activity = activity
        self._streaming = streaming
        self._busy = busy
        #: Sources whose "typing…" a card or a question stopped: it shows again once the
        #: turn goes on (a decision, a tool's end), only there, once.
        self._waiting: set[str] = set()

    async def pump(
        self, events: AsyncIterable[Any], submit: Callable[[str, HubEvent], None]
    ) -> None:
        """Hand the platform's events from the hub's stream to ``submit(source, event)``."""
        async for item in events:
            if isinstance(item, Lagged):
                log.warning(
                    "the %s adapter lagged behind the hub by %d event(s)", self._prefix, item.missed
                )
                continue
            if item.source.startswith(self._prefix):
                submit(item.source, item)

    def _wait(self, source: str) -> None:
        """No "typing…" while the turn waits for the person (it showed for hours)."""
        self._activity.stop_typing(source)
        self._waiting.add(source)

    @staticmethod
    async def _last_progress(outbox: Outbox[Any, Any], source: str) -> None:
        """The turn's progress line with its last marks, then forgotten: whatever the
        platform says to it (a topic closed meanwhile made the edit raise, and the next
        turn's line listed this turn's calls; until 2026-12-07, found by review)."""
        try:
            await outbox.show_progress(source, force=True)
        except Exception:
            log.warning("the last progress line of %s was not shown", source, exc_info=True)
        finally:
            outbox.reset_progress(source)

    def _next_turn(self, source: str) -> None:
        """A message queued behind the turn that ended has its turn now: "typing…" for it
        (its own start was taken for the earlier turn's, whose end stopped it: until
        2026-12-07 the queued turn ran without; found by review)."""
        if self._busy(source):
            self._activity.start_typing(source)

    def _going_on(self, source: str) -> None:
        """The turn goes on after its wait (a tap on the card, an answer, the inbox): its
        "typing…" again, if a turn still works there (a job's card closing in a quiet
        room is no turn of its own)."""
        if source in self._waiting:
            self._waiting.discard(source)
            if self._busy(source):
                self._activity.start_typing(source)

    async def render(self, source: str, item: HubEvent) -> None:
        outbox, cards, activity = self._outbox, self._cards, self._activity
        event = item.event
        match event:
            case TextDelta(text=delta, depth=0) if self._streaming:
                await activity.stream(source, delta)
            case Thinking(depth=0):
                activity.thinking(source)
            case ToolStart(name=name, arguments=arguments, depth=depth):
                outbox.tool_started(source, depth, name, arguments)
                await outbox.show_progress(source)
            case ToolDone(name=name, depth=depth) | ToolError(name=name, depth=depth):
                self._going_on(source)
                mark = DONE if isinstance(event, ToolDone) else FAILED
                outbox.tool_ended(source, depth, name, mark)
                await cards.close_by_id(source, event.tool_call_id, "approve", "ran")
                await outbox.show_progress(source)
            case ToolRejected(name=name, depth=depth):
                self._going_on(source)
                outbox.tool_ended(source, depth, name, SKIPPED)
                await cards.close_by_id(source, event.tool_call_id, "reject", "rejected")
            case ToolCancelled(name=name, depth=depth):
                outbox.tool_ended(source, depth, name, SKIPPED)
                await cards.close_by_id(source, event.tool_call_id, "cancelled", "cancelled")
            case ApprovalRequired():
                if not event.asked_by:  # a job's card visiting here holds no turn of this chat
                    self._wait(source)
                await cards.send_card(source, event)
            case Question():
                self._wait(source)
                await cards.send_question(source, event)
            case Done(content=content, message_id=message_id):
                activity.stop_typing(source)
                await activity.end_stream(source)
                await outbox.final(source, message_id, content)
                # The last marks on the progress line after the answer: the person waits
                # for the answer, not for a cosmetic edit above it.
                await self._last_progress(outbox, source)
                self._next_turn(source)
            case Error():
                activity.stop_typing(source)
                await activity.end_stream(source)
                await self._last_progress(outbox, source)
                key = event.key if isinstance(event, FailureNotice) else None
                await outbox.notice(source, event.message, key)
                self._next_turn(source)
            case DecisionMade(tool_call_id=call_id, outcome=outcome, by=by, note=note):
                await cards.close_by_id(source, call_id, outcome, "resolved", by=by, note=note)
                self._going_on(source)
            case NewSession():
                outbox.reset_progress(source)
                await outbox.say(source, "🆕 New conversation started.")
