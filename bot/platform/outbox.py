"""What a chat is sent while and after a turn runs, through the platform's sender.

Final replies are durable: their rows are recorded in the transaction that stores the
answer (``ChatHub.on_answer``), sent when the turn's ``Done`` arrives, and sent from the
store after a crash; a failed turn's notice likewise (``ChatHub.on_failure``). The
progress line lists the turn's tool calls in one message, edited in place at most every
``progress_interval_s``. How anything is rendered and sent is the sender's
(``OutboxSender``, e.g. Telegram's ``TelegramSender`` over ``Outbound``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy.engine import Connection

from bot.delivery import Outbound, OutboxRow
from bot.platform.protocols import MessageRef, OutboxSender
from bot.platform.voice_mode import VoiceMode
from engine.hub import ChatHub
from engine.store import AlsoWithKey, AlsoWithRow
from voice import links

__all__ = [
    "DONE",
    "FAILED",
    "SKIPPED",
    "Outbox",
    "RowSender",
    "final_key",
    "last_lines",
    "preview",
]

Prepared = TypeVar("Prepared")
Row = TypeVar("Row")

# The marks a tool call's progress line ends with.
DONE, FAILED, SKIPPED = "✓", "✗", "⊘"
_MARKS = (DONE, FAILED, SKIPPED)


def final_key(message_id: int) -> str:
    """An answer's key in the outbox; its parts are ``final:<message id>:<part>``."""
    return f"final:{message_id}"


def preview(arguments: str, limit: int = 60) -> str:
    """A call's arguments on one line, cut to ``limit`` characters."""
    flat = " ".join(arguments.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(eq=False)
class _Progress:
    """One chat's progress message while a turn runs."""

    ref: MessageRef | None = None
    lines: list[str] = field(default_factory=list)
    shown: str = ""
    at: float = 0.0


class Outbox(Generic[Prepared, Row]):
    """Progress and final-reply delivery for every chat of one platform."""

    def __init__(
        self,
        sender: OutboxSender[Prepared, Row],
        *,
        clock: Callable[[], float],
        progress_interval_s: float = 2.0,
    ) -> None:
        self._sender = sender
        self._clock = clock
        self._interval = progress_interval_s
        self._progress: dict[str, _Progress] = {}
        # Rows stored with an answer (by message id) or a failed turn's notice (by key),
        # sent when the turn's Done or FailureNotice arrives.
        self._finals: dict[int, list[Row]] = {}
        self._notices: dict[str, list[Row]] = {}

    def attach(self, hub: ChatHub, prefix: str) -> None:
        """Record the answers and failure notices of the hub's ``prefix`` sources."""
        hub.on_answer(prefix, self.answer_unit)
        hub.on_failure(prefix, self.failure_unit)

    # -- final replies --------------------------------------------------------------------

    def answer_unit(self, source: str, content: str) -> AlsoWithRow:
        """The answer's outbox rows, written in the transaction that stores the answer."""
        prepared = self._sender.prepare(source, content)  # rendered outside the transaction

        def record(conn: Connection, message_id: int) -> None:
            key = final_key(message_id)
            parts = self._sender.answering(conn, source, message_id, prepared)
            self._finals[message_id] = self._sender.record(conn, source, key, parts)

        return record

    def failure_unit(self, source: str, notice: str) -> AlsoWithKey:
        """A failed turn's notice in the outbox, written in the transaction ending the turn:
        as text in a chat with voice on too (until 2026-12-07 it was read aloud only, and
        its error id, there to be quoted to the owner, was nowhere to read; found by
        review)."""
        prepared = self._sender.written(source, f"⚠️ {notice}")

        def record(conn: Connection, key: str) -> None:
            self._notices[key] = self._sender.record(conn, source, key, prepared)

        return record

    async def final(self, source: str, message_id: int, content: str) -> None:
        recorded = self._finals.pop(message_id, None)
        if recorded is not None:  # stored with the answer: only the sending is left
            await self._sender.send_recorded(recorded)
            return
        prepared = self._sender.prepare(source, content)
        await self._sender.send_durable(source, final_key(message_id), prepared)

    async def notice(self, source: str, message: str, key: str | None) -> None:
        """A notice stored with its failed turn is sent from the outbox (once, a restart
        included); any other error is said directly."""
        recorded = self._notices.pop(key, None) if key is not None else None
        if recorded is None:
            await self._sender.say(source, f"⚠️ {message}")
            return
        await self._sender.send_recorded(recorded)

    async def say(self, source: str, text: str) -> None:
        await self._sender.say(source, text)

    # -- the progress line ----------------------------------------------------------------

    def tool_started(self, source: str, depth: int, name: str, arguments: str) -> None:
        self._of(source).lines.append(f"{'  ' * depth}⚙ {name} {preview(arguments)}")

    def tool_ended(self, source: str, depth: int, name: str, mark: str) -> None:
        """Mark the newest unmarked line of that call."""
        lines = self._of(source).lines
        prefix = f"{'  ' * depth}⚙ {name}"
        for i in range(len(lines) - 1, -1, -1):
            line = lines[i]
            if line.startswith(prefix) and not line.endswith(_MARKS):
                lines[i] = f"{line} {mark}"
                return

    async def show_progress(self, source: str, *, force: bool = False) -> None:
        """One message edited in place, at most every ``progress_interval_s``; ``force``:
        the last marks, on a line already shown only."""
        progress = self._of(source)
        if not progress.lines:
            return
        text = self._sender.progress_text(progress.lines)
        if text == progress.shown:
            return
        now = self._clock()
        if progress.ref is None and force:
            return  # never shown (the platform refused it): not sent below the answer
        if progress.ref is None:
            progress.ref = await self._sender.send_progress(source, text)
        elif force or now - progress.at >= self._interval:
            await self._sender.edit_progress(source, progress.ref, text)
        else:
            return
        progress.shown, progress.at = text, now

    def reset_progress(self, source: str) -> None:
        """The next tool call starts a new progress message (the source's entry goes: one
        per source ever seen was kept for the process's life; found by review)."""
        self._progress.pop(source, None)

    def _of(self, source: str) -> _Progress:
        progress = self._progress.get(source)
        if progress is None:
            progress = self._progress[source] = _Progress()
        return progress


class RowSender:
    """The row half of a platform's ``OutboxSender`` over ``Outbound``: a reply's parts
    (``prepare``: written, or spoken in a chat with voice on) recorded under its source's
    conversation (``conversation_of``), sent from those rows, or delivered by key when it
    was stored without rows. A platform writes ``written`` and ``spoken``."""

    def __init__(
        self,
        outbound: Outbound,
        conversation_of: Callable[[str], str],
        voice_mode: VoiceMode | None = None,
    ) -> None:
        """``voice_mode``: the chats whose replies are spoken (``/voice on``)."""
        self.outbound = outbound
        self.voice_mode = voice_mode
        self._conversation_of = conversation_of

    def written(self, source: str, text: str) -> list[Any]:
        """``text`` as the platform's messages, within its limits."""
        raise NotImplementedError

    def spoken(self, source: str, text: str) -> list[Any]:
        """``text`` read aloud: one voice message per few sentences, each carrying its text
        as the fallback (``bot.platform.voice_out``)."""
        raise NotImplementedError

    def prepare(self, source: str, text: str) -> list[Any]:
        """The reply's parts, as the outbox stores them: spoken in a chat with voice on
        (written when there is nothing to read aloud: never nothing), else written."""
        if self.voice_mode is not None and self.voice_mode.is_on(source):
            said = self._aloud(source, text)
            if said:
                return said
        return self.written(source, text)

    async def send_voice(self, source: str, text: str, key: str) -> int:
        """``text`` as voice messages, each recorded under ``key`` before it is sent (its
        text the fallback); ``VoiceOut`` for ``send_voice_message``."""
        said = self.spoken(source, text)
        await self.send_durable(source, key, said + self._links(source, text, said))
        return len(said)

    def _aloud(self, source: str, text: str) -> list[Any]:
        said = self.spoken(source, text)
        return said + self._links(source, text, said)

    def _links(self, source: str, text: str, said: list[Any]) -> list[Any]:
        """The links ``text`` had, written after its voice messages: the spoken form
        drops their addresses (they were lost)."""
        shown = links(text)
        return self.written(source, shown) if said and shown else []

    def answering(
        self, conn: Connection, source: str, answer_id: int, prepared: list[Any]
    ) -> list[Any]:
        """An answer's parts as they are recorded, in its transaction (whose rows it may
        read: what it answers); as prepared unless the platform points them somewhere."""
        return prepared

    def record(
        self, conn: Connection, source: str, key: str, prepared: list[Any]
    ) -> list[OutboxRow]:
        return self.outbound.record_in(conn, self._conversation_of(source), key, prepared)

    async def send_recorded(self, rows: Sequence[OutboxRow]) -> None:
        await self.outbound.deliver_rows(rows)

    async def send_durable(self, source: str, key: str, prepared: list[Any]) -> None:
        conversation = self._conversation_of(source)
        for index, payload in enumerate(prepared):
            await self.outbound.deliver(conversation, f"{key}:{index}", payload)


def last_lines(lines: Sequence[str], limit: int, line_limit: int | None = None) -> str:
    """The progress message's body: the last ``lines`` that fit ``limit`` characters
    (``…`` first when some are left out), each cut to ``line_limit``."""
    line_limit = line_limit or limit - 2
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        line = line if len(line) <= line_limit else line[: line_limit - 1] + "…"
        if used + len(line) + 1 > limit - 2:
            kept.append("…")
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(reversed(kept))
