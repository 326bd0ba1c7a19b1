"""``chathub chat``: talk to the agent in a terminal, through the hub like every front end.

Line input, streamed output, tool activity shown as it happens. The conversation is the
``console`` source's session, so it survives restarts; ``/new`` starts a fresh one.
A turn a crash interrupted is resumed at start. While a turn runs, a line answers the
approval prompt or question it shows (``y`` approves, ``t`` approves and stops asking for
15 minutes, ``a`` for this session, anything else rejects with that text as the reason);
other lines wait and become the next messages, in order (so piped input works line by
line). Commands are the platform layer's (``bot/platform/commands.py``), the same as in
Telegram; an unknown one gets the list. Ctrl-C stops a running turn; at the prompt it (or
Ctrl-D, or ``/quit``) exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from bot.platform.cards import CardContent, Choice, card_content, decide, outcome_line
from bot.platform.commands import COMMAND, CommandContext, CommandRegistry, shared_commands
from bot.platform.memory import MemoryFront, memory_commands
from engine.approval import OPERATOR, plainly
from engine.bus import Lagged
from engine.core import Engine
from engine.hub import ChatHub, DecisionMade, HubError, SourceEvents, TextRefused
from engine.session import (
    ApprovalRequired,
    Done,
    Error,
    ModelFallback,
    Question,
    TextDelta,
    Thinking,
    ToolCancelled,
    ToolDone,
    ToolError,
    ToolRejected,
    ToolStart,
    TurnEvent,
)
from engine.store import InboxError
from engine.text import clean_text

if TYPE_CHECKING:  # the scheduler comes only with a service that has one
    from bot.platform.jobs import Jobs
    from memory.service import MemoryService

SOURCE = "console"


def log_to_file(home: Path | None = None) -> Path:
    """While a person chats in this terminal, the log goes to a file, not between their
    prompt and the answer: ``$XDG_STATE_HOME/chathub/chathub.log`` (default
    ``~/.local/state/chathub/chathub.log``). Returns the file's path."""
    state = os.environ.get("XDG_STATE_HOME") or str((home or Path.home()) / ".local" / "state")
    path = Path(state) / "chathub" / "chathub.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    handler = logging.FileHandler(path, encoding="utf-8")
    for old in list(root.handlers):
        if isinstance(old, logging.StreamHandler) and not isinstance(old, logging.FileHandler):
            handler.setFormatter(old.formatter)
            root.removeHandler(old)
    root.addHandler(handler)
    return path


HELP = "Commands: /help lists them, /new starts afresh, /quit leaves. Ctrl-C stops a running turn."
log = logging.getLogger(__name__)

APPROVE_HELP = (
    "Approve? [y]es / [t] 15 min / [a]lways this session / anything else rejects (as the reason)"
)
#: What a line answering an approval prompt chooses (anything else: reject, the line the reason).
ANSWERS: dict[str, Choice] = {
    "y": "approve",
    "yes": "approve",
    "t": "bypass_15m",
    "a": "bypass_session",
    "always": "bypass_session",
}
_QUIT = ("/quit", "/exit")
#: Typed during a turn, these run at once (they are about that turn); other lines wait.
_STOP = ("/stop",)
_PREVIEW = 160


def terminal_commands(
    jobs: Jobs | None = None, memory: MemoryService | None = None
) -> CommandRegistry:
    """The shared commands, ``/jobs`` when there is a scheduler, and ``/search``,
    ``/memory``, ``/forget_me`` (``memory`` None: they say it is switched off; ``/quit``
    is the terminal's own, handled before them)."""
    registry = CommandRegistry()
    for command in shared_commands(lambda: f"{registry.help_text()}\n/quit — leave"):
        registry.register(command)
    if jobs is not None:
        from bot.platform.jobs import jobs_command

        registry.register(jobs_command(jobs))
    for command in memory_commands(MemoryFront(memory)):
        registry.register(command)
    return registry


def _preview(text: str) -> str:
    text = plainly(" ".join(text.split()))  # a model's escapes never drive the terminal
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


class TerminalRenderer:
    """Writes turn events to a text stream."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._streaming = False

    def __call__(self, event: TurnEvent) -> None:
        match event:
            case TextDelta(text=text, depth=0):
                self._streaming = True
                self._write(plainly(text))
            case Thinking(content=content) if content and not self._streaming:
                self._line(f"· {_preview(content)}")
            case ToolStart(name=name, arguments=arguments):
                self._line(f"⚙ {name} {_preview(arguments)}")
            case ToolDone(name=name, result=result):
                self._line(f"  ✓ {name}: {_preview(result)}")
            case ToolError(name=name, error=error):
                self._line(f"  ✗ {name}: {_preview(error)}")
            case ToolRejected(name=name, reason=reason):
                self._line(f"  ⊘ {name}: {_preview(reason)}")
            case ToolCancelled(name=name):
                self._line(f"  ⊘ {name}: cancelled")
            case ModelFallback(failed_model=failed, next_model=nxt, reason=reason):
                self._line(f"! {failed} failed ({_preview(reason)}); trying {nxt}")
            case Done(content=content):
                if self._streaming:
                    self._write("\n")
                else:
                    self._write(plainly(content) + "\n")
                self._streaming = False
            case Error(message=message):
                self._line(f"! {plainly(message)}")
            case ApprovalRequired():
                self._line(describe_approval(event))
                self._line(APPROVE_HELP)
            case Question(question=question):
                self._line(f"? {plainly(question)}")

    def _line(self, text: str) -> None:
        if self._streaming:  # tool activity after streamed text starts on its own line
            self._write("\n")
            self._streaming = False
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


def describe_approval(event: ApprovalRequired) -> str:
    """The approval prompt: what every platform's card shows (``card_content``), as lines:
    the command and directory, the diff of a file write, or the arguments."""
    return describe_card(card_content(event))


def describe_card(card: CardContent) -> str:
    who = f" (agent {card.agent}, sub-agent depth {card.depth})" if card.depth > 0 else ""
    if card.label == "Command":
        where = f" in {card.workdir}" if card.workdir else ""
        return f"⚠ {card.tool}{who} wants to run{where}:\n  $ {card.content}"
    if card.label == "Diff":
        new = " (new file)" if card.new_file else ""
        return f"⚠ {card.tool}{who} wants to write {card.path}{new}\n{card.content}"
    return f"⚠ {card.tool}{who} wants to run with:\n{card.content}"


class _LineReader:
    """Reads stdin on a daemon thread so a pending read never blocks shutdown."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stream: TextIO) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._loop = loop
        self._stream = stream
        self._next: asyncio.Future[str | None] | None = None
        if isinstance(stream, io.TextIOWrapper):  # a byte no UTF-8 (a Latin-1 paste): U+FFFD
            stream.reconfigure(errors="replace")
        threading.Thread(target=self._pump, name="chathub-stdin", daemon=True).start()

    def _pump(self) -> None:
        """Each line, cleaned as a platform's text is (a lone surrogate, NUL), then the end:
        a line Python could not decode killed this thread and the chat waited for ever, and
        one it decoded to a surrogate ended the chat on the database (until 2026-12-06)."""
        try:
            while line := self._stream.readline():
                self._loop.call_soon_threadsafe(self._queue.put_nowait, clean_text(line))
        except Exception:  # the terminal is gone or unreadable: the chat ends
            log.warning("reading the terminal failed; the chat ends", exc_info=True)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._queue.put_nowait, None)

    def line_future(self) -> asyncio.Future[str | None]:
        """The next line, as one future shared until ``take`` consumes it."""
        if self._next is None:
            self._next = asyncio.ensure_future(self._queue.get())
        return self._next

    def take(self) -> str | None:
        future, self._next = self.line_future(), None
        return future.result()

    async def readline(self) -> str | None:
        await asyncio.shield(self.line_future())
        return self.take()


async def console_interrupted(engine: Engine) -> bool:
    """Whether the ``console`` session has a turn a restart interrupted (the hub resumes it)."""
    session_id = await engine.store.sessions.active_for_source(SOURCE)
    return session_id is not None and session_id in await engine.interrupted_sessions()


class TerminalChat:
    """The terminal as a hub client, like every other front end: one way into a session.

    Lines go to the hub as messages of the ``console`` source, one turn at a time (lines
    typed during a turn wait for it to end, so piped input runs line by line); the turn's
    events come back from the hub's event stream and are rendered; a line answers the
    approval prompt or question a turn shows; Ctrl-C stops the turn (``hub.cancel``).
    """

    def __init__(
        self,
        hub: ChatHub,
        events: SourceEvents,
        *,
        resuming: bool = False,
        stdin: TextIO = sys.stdin,
        stdout: TextIO = sys.stdout,
        jobs: Jobs | None = None,
        memory: MemoryService | None = None,
    ) -> None:
        """``events``: the ``console`` source's events, subscribed before the hub started;
        ``resuming``: the hub resumes a turn of it a restart interrupted (its events are
        in ``events`` from its start); ``jobs``: the console's scheduled jobs (``/jobs``);
        ``memory``: long-term memory (``/search``, ``/memory``, ``/forget_me``)."""
        self._hub = hub
        self._resuming = resuming
        self._events = events
        self._stdin = stdin
        self._out = stdout
        self._render = TerminalRenderer(stdout)
        self.commands = terminal_commands(jobs, memory)
        self._asking: ApprovalRequired | Question | None = None
        self._running = False
        self._stdin_closed = False
        self._backlog: list[str] = []
        self._changed = asyncio.Event()
        self._stopping: asyncio.Future[int] | None = None
        self._leaving = asyncio.Event()  # Ctrl-C at the prompt

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = _LineReader(loop, self._stdin)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
        pump = asyncio.create_task(self._pump(), name="terminal-events")
        try:
            session_id = await self._hub.session_id(SOURCE)
            self._say(f"chathub — session {session_id}. {HELP}")
            self._running = self._resuming
            if self._running:
                self._say("Resuming the turn a restart interrupted…")
                await self._wait_turn(reader)
            await self._converse(reader)
        finally:
            pump.cancel()
            self._events.close()

    async def _converse(self, reader: _LineReader) -> None:
        while True:
            if self._backlog:
                line: str | None = self._backlog.pop(0)
            elif self._stdin_closed:
                return
            else:
                self._prompt()
                line = await self._next_line(reader)
            if line is None:
                self._say("")
                return
            text = line.strip()
            if not text:
                continue
            if text in _QUIT:
                return
            # A command's shape, as Telegram marks one (an unknown one is told so); a path
            # ("/etc/hosts is broken") is a message.
            if COMMAND.match(text):
                await self._command(text)
                continue
            if self._asking is not None:  # a job's card, shown while no turn of ours ran
                await self._answer(text)  # (it went to the model as a message; review)
                continue
            self._running = True
            try:
                await self._hub.send_message(SOURCE, text)
            except HubError as exc:
                self._running = False
                self._say(f"! {exc}")
                continue
            await self._wait_turn(reader)

    async def _next_line(self, reader: _LineReader) -> str | None:
        """The next line typed; ``None`` at the end of input or at Ctrl-C."""
        leaving = asyncio.ensure_future(self._leaving.wait())
        try:
            await asyncio.wait({leaving, reader.line_future()}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
        return None if self._leaving.is_set() else reader.take()

    async def _wait_turn(self, reader: _LineReader) -> None:
        """Until the turn ends; lines answer its prompts, ``/stop`` stops it, the others
        wait for their turn."""
        while self._running:
            if self._asking is not None and self._backlog:
                line = self._backlog[0]
                if line in _QUIT:  # left for _converse, the call kept pending (as at EOF)
                    self._close_prompts()
                elif self._is_command(line):  # never a reason ("/quit" was one), but a
                    await self._command(self._backlog.pop(0))  # path is an answer
                else:
                    await self._answer(self._backlog.pop(0))
                continue
            if self._asking is not None and self._stdin_closed:
                self._close_prompts()  # nobody can answer: the call stays pending
                continue
            self._changed.clear()
            woke = asyncio.ensure_future(self._changed.wait())
            waits: set[asyncio.Future[Any]] = {woke}
            if not self._stdin_closed:
                waits.add(reader.line_future())
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            woke.cancel()
            if self._stdin_closed or not reader.line_future().done():
                continue
            line = reader.take()
            if line is None:
                self._stdin_closed = True
            elif line.strip().lower() in _STOP:  # for this turn: now, as Ctrl-C (and Telegram)
                self._drop_backlog()
                await self._command(line.strip())
            elif line.strip():
                self._backlog.append(line.strip())

    async def _pump(self) -> None:
        async for item in self._events:
            if isinstance(item, Lagged):
                continue
            event = item.event
            if isinstance(event, ApprovalRequired | Question):
                self._asking = event
            if isinstance(event, DecisionMade) and self._asks(event.tool_call_id):
                self._asking = None  # decided elsewhere: the next line is no answer
                verb, suffix = outcome_line(event.outcome)
                self._say(f"{verb} by {event.by}{suffix}")
            try:
                self._render(event)  # events it does not show (NewSession, ...) pass by
            except Exception:  # one event's fault: the turn's end must still be seen
                log.exception("showing %s failed", type(event).__name__)
            if isinstance(event, Done | Error):
                if self._asking is not None and self._asking.session_id == item.session_id:
                    self._asking = None  # ours ended; a job's card asks on (review)
                self._running = False
            self._changed.set()

    async def _command(self, text: str) -> None:
        head, _, argument = text.partition(" ")
        name = head[1:].lower()
        context = CommandContext(self._hub, SOURCE, argument.strip(), None, is_owner=True)
        try:
            reply = await self.commands.run(name, context)
        except HubError as exc:
            reply = f"! {exc}"
        if reply is None and name in ("new", "clear"):  # the terminal does not show events
            reply = f"New conversation (session {await self._hub.session_id(SOURCE)})."
        if reply:
            self._say(reply)

    async def _answer(self, text: str) -> None:
        asking, self._asking = self._asking, None
        match asking:
            case ApprovalRequired(tool_call_id=call_id):
                choice = ANSWERS.get(text.lower(), "reject")
                note = "" if choice != "reject" or text.lower() in ("n", "no") else text
                if await decide(self._hub, SOURCE, call_id, choice, OPERATOR, note) != "decided":
                    self._say(f"! {outcome_line('expired')[0]}")
            case Question(request_id=request_id):
                try:
                    await self._hub.answer(request_id, text, source=SOURCE)
                except TextRefused as exc:  # the question still waits: the next line answers
                    self._asking = asking
                    self._say(f"! {exc}")
                except (InboxError, HubError) as exc:
                    self._say(f"! {exc}")

    def _is_command(self, line: str) -> bool:
        """``/name`` of one of the terminal's commands (a path, ``/home/ann``, is not)."""
        name, _, _rest = line.partition(" ")
        if not name.startswith("/"):
            return False
        return self.commands.get(name[1:].lower(), is_owner=True) is not None

    def _asks(self, call_id: int) -> bool:
        match self._asking:
            case ApprovalRequired(tool_call_id=asked) | Question(request_id=asked):
                return asked == call_id
        return False

    def _drop_backlog(self) -> None:
        """``/stop`` drops what was typed meanwhile, as the hub drops queued messages."""
        if self._backlog:
            self._say(f"({len(self._backlog)} line(s) typed meanwhile dropped)")
            self._backlog.clear()

    def _close_prompts(self) -> None:
        """The call stays pending (asked again at the next start) and the turn ends."""
        asking, self._asking = self._asking, None
        if asking is not None:
            self._hub.leave_waiting(asking.session_id)

    def _interrupt(self) -> None:
        """Ctrl-C: the turn stops; at the prompt the chat ends as at ``/quit`` (it raised
        ``KeyboardInterrupt`` into the loop until 2026-12-06: ``chathub serve`` printed a
        traceback into the chat and skipped its graceful stop)."""
        if self._running:
            self._drop_backlog()
            self._stopping = asyncio.ensure_future(self._hub.cancel(SOURCE))
        else:
            self._leaving.set()

    def _prompt(self) -> None:
        self._out.write("› ")
        self._out.flush()

    def _say(self, text: str) -> None:
        self._out.write(plainly(text) + "\n")  # a fact or a job's name may be a model's
        self._out.flush()
