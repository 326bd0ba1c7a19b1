"""One request's turn: the user's message given to the hub, and what the client is told
while the turn runs, as ``Piece``s of the answer's text.

The agent's text streams as it comes. Its tool activity is told in short lines of the
same text (a client that only speaks chat completions shows them; none of it is ever a
``tool_calls`` for the client to run), with the event in a field of chathub's own beside
them. A call that needs a human waits as everywhere (a card in the owner's chats, the
inbox): the client is told so plainly, kept open by keep-alives while it waits, and told
again when it waited longer than ``decision_wait_s``; then its answer ends and the turn
goes on without it: the answer stays in the conversation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection

from bot.completions.conversations import AnswerTo
from bot.platform.cards import outcome_line
from engine.bus import BusClosed, Lagged
from engine.hub import ChatHub, DecisionMade, SendOptions, SourceEvents, carried, is_cut
from engine.session import (
    ApprovalRequired,
    Done,
    Error,
    ModelFallback,
    Question,
    TextDelta,
    ToolCancelled,
    ToolDone,
    ToolError,
    ToolRejected,
    ToolStart,
    UserMessage,
)
from engine.store import InboxItem, utcnow
from engine.text import clean_text

__all__ = ["INTERRUPTED", "KEEPALIVE", "Exchange", "ExchangeLimits", "Piece", "Turn"]

log = logging.getLogger(__name__)

DECIDE_WHERE = "in the owner's chat or in chathub's inbox (its web page)"


@dataclass(frozen=True, slots=True)
class Piece:
    """Text of the answer; ``event``: what the agent did, for chathub's own field;
    ``usage``: the answer's tokens (prompt, completion), on the last piece."""

    text: str
    event: dict[str, Any] | None = None
    usage: tuple[int, int] | None = None
    #: The last ``void`` characters said are not the answer's (a model that failed
    #: mid-answer): a whole answer drops them and this line, a stream has sent them.
    void: int = 0
    #: The answer was cut at the model's token limit (the last piece): ``length``.
    truncated: bool = False


#: Nothing to say yet: a keep-alive for the connection.
KEEPALIVE = Piece("")

#: The service stopped before the answer was complete: no answer ends here (the turn
#: goes on after the restart; the same request sent again then reads its answer back).
INTERRUPTED = Piece(
    "chathub stopped before this answer was complete; send the same request again once it is back.",
    {"type": "interrupted"},
)


#: A request's message whose turn never began, and nothing works on its chat any more.
NOT_ANSWERED = (
    "⚠️ This message was not answered: it was stopped, or its turn failed before it began. "
    "Send it again."
)


@dataclass(frozen=True, slots=True)
class ExchangeLimits:
    #: How long a request waits for a human's decision before its answer ends.
    decision_wait_s: float = 300.0
    #: How often a waiting stream is sent a keep-alive.
    keepalive_s: float = 15.0


@dataclass(slots=True)
class _Turn:
    """What this request has been told of the turn so far."""

    round_text: str = ""
    said: bool = False
    waiting: dict[int, float] = field(default_factory=dict)
    #: The stream fell behind in this round: its text is sent no further than the gap,
    #: and completed from the answer at ``Done``.
    gap: bool = False


class Turn:
    """The turn a request follows; iterate for its pieces, ``close`` when done."""

    def __init__(
        self,
        exchange: Exchange,
        events: SourceEvents,
        mine: str | None,
        *,
        running: bool = True,
        source: str | None = None,
        answer: Piece | None = None,
        holds: bool = True,
    ) -> None:
        self._exchange = exchange
        self._events = events
        self._mine = mine
        self._source = source
        #: Whether there is a turn to follow (``False``: a retried request whose answer
        #: is already in the conversation: ``answer``, read back with its tokens).
        self.running = running
        self.answer = answer
        #: Whether the conversation is to hold the answer as the client gets it (not when
        #: it holds it already: a retry of a request whose answer arrived).
        self.holds = holds

    async def pieces(self) -> AsyncIterator[Piece]:
        if not self.running:
            return
        async for piece in self._exchange.follow(self._events, self._mine, self._source):
            yield piece

    def close(self) -> None:
        self._events.close()


class Exchange:
    """Runs one request's message through the hub and tells what happens."""

    def __init__(
        self,
        hub: ChatHub,
        stored_answer: Callable[[str], Awaitable[str]],
        limits: ExchangeLimits | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``stored_answer``: a conversation's last answer as the database holds it (in a
        fleet, an answer too long for a notice arrives cut)."""
        self._hub = hub
        self._stored_answer = stored_answer
        self.limits = limits or ExchangeLimits()
        self._clock = clock

    async def again(
        self,
        source: str,
        text: str,
        answered: Callable[[], Awaitable[AnswerTo]],
        *,
        holds: bool,
    ) -> Turn | None:
        """The turn of a message sent again (``answered`` tells what became of it): its
        answer read back, or the turn that will give it followed; ``None`` when its turn
        failed, or it got no answer and nothing works on it (it is to run again).
        ``holds``: the conversation does not hold its answer yet."""
        events = self._hub.events(source, remote=True)  # before looking: nothing missed
        try:
            state = await answered()
            working = self._hub.has_work(source) or await self._hub.is_busy(source)
            if state.answer is None and not working:
                # Its turn may have ended between the two looks: an answer is stored
                # before its chat is idle (until 2026-12-07 the message ran again, its
                # tools too; found by review).
                state = await answered()
            if state.answer is not None:
                read_back = Piece(state.answer, usage=state.usage, truncated=state.truncated)
                return Turn(self, events, None, running=False, answer=read_back, holds=holds)
            if not state.failed and working:
                # Its turn runs (follow it from now), or it waits for one (its echo first).
                mine = None if state.stored else text
                return Turn(self, events, mine, source=source, holds=holds)
        except BaseException:
            events.close()
            raise
        events.close()
        return None

    async def start(
        self,
        source: str,
        text: str,
        options: SendOptions | None = None,
        *,
        also: Callable[[Connection], None] | None = None,
    ) -> Turn:
        """``text`` sent in ``source``, and its turn followed; ``also`` commits with the
        message. The hub's refusals (``HubError``) are raised here, before anything is
        told (a message sent again is ``again``'s)."""
        events = self._hub.events(source, remote=True)  # before sending: nothing missed
        try:
            await self._hub.send_message(source, text, options, also=also)
            return Turn(self, events, text, source=source)
        except BaseException:
            events.close()
            raise

    async def follow(
        self, events: SourceEvents, mine: str | None, source: str | None = None
    ) -> AsyncIterator[Piece]:
        """``source``: where ``mine`` was sent; when nothing works on it any more and the
        message's turn never began (a /stop dropped it, its turn failed before storing it),
        the request ends with a sentence instead of waiting forever."""
        turn = _Turn()
        started = mine is None  # a running turn is followed from now
        # Joined in the middle of a round (a retry, a Regenerate): its text is the
        # answer's tail; the answer comes whole at Done (until 2026-12-07 the tail, then
        # the whole answer; found by review).
        turn.gap = started
        quiet_looks = 0
        if source is not None:
            for piece in await self._already_waiting(turn, source):
                yield piece
        while True:
            try:
                async with asyncio.timeout(self._timeout(turn)):  # no task per event
                    item = await events.recv()
            except TimeoutError:
                if not started and source is not None:
                    # Twice in a row: a fleet's chat may be between owners for a moment.
                    quiet = not self._hub.has_work(source) and not await self._hub.is_busy(source)
                    quiet_looks = quiet_looks + 1 if quiet else 0
                    if quiet_looks >= 2:
                        yield Piece(_line(NOT_ANSWERED), {"type": "error"})
                        return
                if self._waited_out(turn):
                    yield Piece(
                        _line(
                            "⏳ Still waiting for a decision; the answer will be in this "
                            "conversation once it is given."
                        ),
                        {"type": "waiting_ended"},
                    )
                    return
                yield KEEPALIVE
                continue
            except Lagged as lagged:  # the answer's text is made whole at Done
                log.info("an API stream fell behind by %d events", lagged.missed)
                turn.gap = True
                continue
            except BusClosed:  # the service is stopping: this is not an answer's end
                yield INTERRUPTED
                return
            event = item.event
            if not started:
                # In a fleet a long message comes back cut to fit the notice that carried it.
                started = isinstance(event, UserMessage) and carried(event.content, mine or "")
                if not started:  # a decision taken meanwhile is waited for no more
                    self._told(turn, event, quiet=True)
                continue
            if isinstance(event, Done):
                usage = (event.input_tokens or 0, event.output_tokens or 0)
                answer = event.content
                if is_cut(answer) and source is not None:
                    answer = await self._stored_answer(source)
                yield Piece(_rest_of(turn, answer), usage=usage, truncated=event.truncated)
                return
            if isinstance(event, Error):
                yield Piece(_line(f"⚠️ {event.message}", turn), {"type": "error"})
                return
            piece = self._told(turn, event)
            if piece is not None:
                turn.said = turn.said or bool(piece.text)
                yield piece

    async def _already_waiting(self, turn: _Turn, source: str) -> list[Piece]:
        """What the chat's turn waits for as this request begins to follow it (a message
        sent while a card waits, a retry): said, and waited for no longer than a
        decision's wait (until 2026-12-06 only a request that saw the card asked knew,
        and the next one kept its client waiting until someone decided; found by review)."""
        session = await self._hub.current_session(source)
        if session is None:
            return []
        pieces = [
            self._waits(turn, item.tool_call_id, _approval_line(item.name), "approval_required",
                        item.name, item.depth, asked=self._asked(item))
            for item in await self._hub.pending_approvals(session)
        ] + [
            self._waits(turn, item.tool_call_id, _question_line(_question_of(item)), "question",
                        None, item.depth, asked=self._asked(item))
            for item in await self._hub.pending_questions(session)
        ]  # fmt: skip
        return [piece for piece in pieces if piece is not None]

    def _asked(self, item: InboxItem) -> float:
        """When ``item`` began to wait, on this exchange's clock: a request that finds it
        waiting waits only what is left of a decision's wait (it waited a whole one more,
        after the request before it had waited its own; found by review on 2026-12-06)."""
        waited = (utcnow() - item.requested_at).total_seconds()
        return self._clock() - min(max(waited, 0.0), self.limits.decision_wait_s)

    def _told(self, turn: _Turn, event: Any, *, quiet: bool = False) -> Piece | None:
        """``quiet``: only what is waited for is kept up to date (nothing is said)."""
        if quiet and not isinstance(
            event, DecisionMade | ToolRejected | ToolDone | ToolError | ToolCancelled
        ):
            return None
        match event:
            case TextDelta(text=text, depth=0):
                if turn.gap:  # after a hole: the rest comes from the answer, once
                    return None
                turn.round_text += text
                return Piece(text)
            case ModelFallback(failed_model=failed, next_model=following):
                if not turn.round_text:  # nothing of the failed model's was said
                    return None
                # Its words stay with the stream that sent them, and the next model's
                # answer follows in full (until 2026-12-06 the two ran together, and the
                # answer came twice; found by review).
                void = len(turn.round_text)
                line = _line(f"↪ {failed} stopped mid-answer; {following} answers instead.", turn)
                turn.round_text, turn.gap = "", False
                return Piece(line, {"type": "model_fallback", "depth": 0}, void=void)
            case ToolStart(tool_call_id=call_id, name=name, depth=depth):
                return self._progress(turn, f"🔧 {name}", "tool_start", call_id, name, depth)
            case ApprovalRequired(tool_call_id=call_id, name=name, depth=depth):
                line = _approval_line(name)
                return self._waits(turn, call_id, line, "approval_required", name, depth)
            case Question(request_id=request_id, question=question, depth=depth):
                line = _question_line(question)
                return self._waits(turn, request_id, line, "question", None, depth)
            case DecisionMade(tool_call_id=call_id, outcome=outcome, by=by):
                turn.waiting.pop(call_id, None)
                verb, suffix = outcome_line(outcome)
                line = f"{verb} by {by}{suffix}" if by else f"{verb}{suffix}"
                return self._progress(turn, line, "decided", call_id, None, 0)
            case ToolRejected(tool_call_id=call_id, name=name, depth=depth):
                turn.waiting.pop(call_id, None)
                return self._progress(
                    turn, f"🚫 {name} not run", "tool_rejected", call_id, name, depth
                )
            case (
                ToolDone(tool_call_id=call_id)
                | ToolError(tool_call_id=call_id)
                | ToolCancelled(tool_call_id=call_id)
            ):
                turn.waiting.pop(call_id, None)
        return None

    def _waits(
        self,
        turn: _Turn,
        call_id: int,
        line: str,
        kind: str,
        name: str | None,
        depth: int,
        *,
        asked: float | None = None,
    ) -> Piece | None:
        """A card or a question waited for since ``asked`` (default: now; told once:
        ``None`` when it was)."""
        if call_id in turn.waiting:
            return None
        turn.waiting[call_id] = self._clock() if asked is None else asked
        return self._progress(turn, line, kind, call_id, name, depth)

    def _progress(
        self, turn: _Turn, line: str, kind: str, call_id: int, name: str | None, depth: int
    ) -> Piece:
        """A line of its own; the model's next text is a new round."""
        text = _line(line, turn)
        turn.round_text = ""
        turn.gap = False
        event: dict[str, Any] = {"type": kind, "id": call_id, "depth": depth}
        if name is not None:
            event["name"] = clean_text(name)
        return Piece(text, event)

    def _timeout(self, turn: _Turn) -> float:
        wait = self.limits.keepalive_s
        if turn.waiting:
            left = min(turn.waiting.values()) + self.limits.decision_wait_s - self._clock()
            wait = min(wait, max(left, 0.0))
        return wait

    def _waited_out(self, turn: _Turn) -> bool:
        if not turn.waiting:
            return False
        return self._clock() - min(turn.waiting.values()) >= self.limits.decision_wait_s


def _approval_line(name: str) -> str:
    return (
        f"⏸ {name} waits for approval: approve or reject it {DECIDE_WHERE}. "
        "This answer goes on once it is decided."
    )


def _question_line(question: str) -> str:
    return f"❓ {question} (answer it {DECIDE_WHERE})"


def _question_of(item: InboxItem) -> str:
    try:
        question = json.loads(item.arguments or "{}").get("question")
    except (ValueError, RecursionError, AttributeError):
        question = None
    return question if isinstance(question, str) else "a question"


def _line(text: str, turn: _Turn | None = None) -> str:
    """``text`` as a paragraph of its own in the answer, in characters every encoder
    takes: a question or a name the model wrote may hold a lone surrogate (half an emoji),
    which failed the stream's UTF-8 and, escaped in a whole answer, came back in the
    client's history, which ``/v1`` refuses (until 2026-12-07; found by review)."""
    lead = "\n\n" if turn is not None and turn.said and turn.round_text else ""
    return f"{lead}{clean_text(text)}\n\n"


def _rest_of(turn: _Turn, answer: str) -> str:
    """What the client must still be sent for the answer to be whole: the tail the stream
    has not carried (nothing when the deltas were the answer)."""
    if turn.round_text == answer:
        return ""
    if answer.startswith(turn.round_text):
        return answer[len(turn.round_text) :]
    if not answer:
        return ""
    return ("\n\n" if turn.said else "") + answer
