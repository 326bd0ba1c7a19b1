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
import re
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from bot.platform.cards import CardContent, Choice, card_content, decide, outcome_line
from bot.platform.commands import COMMAND, CommandContext, CommandRegistry, shared_commands
from bot.platform.failures import report_failure
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
    UserMessage,
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
#: After a stop, how often the chat looks whether the hub still works on the console: a
#: message the stop dropped before its turn began ends with no event.
IDLE_CHECK_S = 0.2
#: What a terminal acts on in a model's text: control characters but the line break and
#: the tab (escapes that move, erase, retitle, write the clipboard), C1 controls, lone
#: surrogates, and the bidirectional overrides and isolates. A joiner, a tag or a
#: direction mark is part of how a language or an emoji is written (``plainly``, for cards,
#: showed them as codes: a Persian answer's ``\u200c``; found by review on 2026-12-07).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\r": "\\r", "\x1b": "\\x1b"}


def readable(text: str) -> str:
    """A model's answer as the terminal may print it: written as it is, but for what a
    terminal would act on, shown as its code."""
    return _UNSAFE.sub(lambda m: _NAMED.get(m.group()) or f"\\u{ord(m.group()):04x}", text)


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
                self._write(readable(text))
            case Thinking(content=content) if content and not self._streaming:
                self._line(f"· {_preview(content)}")
            # A tool's name is the model's until it is checked (a name of escapes reached
            # the terminal raw until 2026-12-07; found by review).
            case ToolStart(name=name, arguments=arguments):
                self._line(f"⚙ {plainly(name)} {_preview(arguments)}")
            case ToolDone(name=name, result=result):
                self._line(f"  ✓ {plainly(name)}: {_preview(result)}")
            case ToolError(name=name, error=error):
                self._line(f"  ✗ {plainly(name)}: {_preview(error)}")
            case ToolRejected(name=name, reason=reason):
                self._line(f"  ⊘ {plainly(name)}: {_preview(reason)}")
            case ToolCancelled(name=name):
                self._line(f"  ⊘ {plainly(name)}: cancelled")
            case ModelFallback(failed_model=failed, next_model=nxt, reason=reason):
                self._line(
                    f"! {plainly(failed)} failed ({_preview(reason)}); trying {plainly(nxt)}"
                )
            case Done(content=content):
                if self._streaming:
                    self._write("\n")
                else:
                    self._write(readable(content) + "\n")
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
    """A job's card names its job, as every platform's does: it looked like the chat's own
    turn's until 2026-12-07, and its call was approved as one's own (found by review)."""
    tool = plainly(card.tool)
    who = f" (agent {plainly(card.agent)}, sub-agent depth {card.depth})" if card.depth > 0 else ""
    head = f"⏰ {plainly(card.asked_by)}: " if card.asked_by else "⚠ "
    if card.label == "Command":
        where = f" in {card.workdir}" if card.workdir else ""
        return f"{head}{tool}{who} wants to run{where}:\n  $ {card.content}"
    if card.label == "Diff":
        new = " (new file)" if card.new_file else ""
        return f"{head}{tool}{who} wants to write {card.path}{new}\n{card.content}"
    return f"{head}{tool}{who} wants to run with:\n{card.content}"


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
    approval prompt or question a turn shows (the latest shown; one still open is shown
    again after it); Ctrl-C stops the turn (``hub.cancel``).
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
        typed_ahead_answers: bool | None = None,
    ) -> None:
        """``events``: the ``console`` source's events, subscribed before the hub started;
        ``resuming``: the hub resumes a turn of it a restart interrupted (its events are
        in ``events`` from its start); ``jobs``: the console's scheduled jobs (``/jobs``);
        ``memory``: long-term memory (``/search``, ``/memory``, ``/forget_me``);
        ``typed_ahead_answers``: a line read before a prompt was shown may answer it (piped
        input; by default when stdin is no terminal). At a terminal it may not: the second
        line of a paste rejected a command its sender never saw (found by review)."""
        self._hub = hub
        self._resuming = resuming
        self._events = events
        self._stdin = stdin
        self._out = stdout
        self._render = TerminalRenderer(stdout)
        self.commands = terminal_commands(jobs, memory)
        if typed_ahead_answers is None:
            typed_ahead_answers = not (hasattr(stdin, "isatty") and stdin.isatty())
        self._typed_ahead_answers = typed_ahead_answers
        #: The prompts shown and not answered, oldest first, each with the number of lines
        #: read when it was shown (two at once: a job's card while the chat's own waits).
        self._open: list[tuple[ApprovalRequired | Question, int]] = []
        self._running = False
        self._began = False  # the running turn is our message's (its echo came)
        self._stop_asked = False
        self._stdin_closed = False
        self._read = 0  # lines read so far
        self._backlog: list[tuple[int, str]] = []  # (its number, the line)
        self._changed = asyncio.Event()
        self._stopping: asyncio.Future[int] | None = None
        self._leaving = asyncio.Event()  # Ctrl-C at the prompt

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        if isinstance(self._out, io.TextIOWrapper):  # a Latin-1 terminal: "?" for "—"
            self._out.reconfigure(errors="replace")  # (a traceback until 2026-12-07)
        reader = _LineReader(loop, self._stdin)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
        pump = asyncio.create_task(self._pump(), name="terminal-events")
        try:
            session_id = await self._hub.session_id(SOURCE)
            self._say(f"chathub — session {session_id}. {HELP}")
            self._running = self._began = self._resuming
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
                number, line = self._backlog.pop(0)
            elif self._stdin_closed:
                return
            else:
                self._prompt()
                line = await self._next_line(reader)
                number = self._read
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
            if self._open and self._answers(number):  # a job's card, shown while no turn
                await self._answer(text)  # of ours ran (it went to the model as a message)
                continue
            self._running, self._began, self._stop_asked = True, False, False
            try:
                await self._hub.send_message(SOURCE, text)
            except HubError as exc:
                self._running = False
                self._say(f"! {exc}")
                continue
            except Exception:  # the database busy past its wait, say: the chat goes on
                self._running = False
                self._failed(f"sending {text[:40]!r}")
                continue
            await self._wait_turn(reader)

    async def _next_line(self, reader: _LineReader) -> str | None:
        """The next line typed; ``None`` at the end of input or at Ctrl-C."""
        leaving = asyncio.ensure_future(self._leaving.wait())
        try:
            await asyncio.wait({leaving, reader.line_future()}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
        if self._leaving.is_set():
            return None
        self._read += 1
        return reader.take()

    async def _wait_turn(self, reader: _LineReader) -> None:
        """Until the turn ends; lines answer its prompts, ``/stop`` stops it, the others
        wait for their turn."""
        while self._running:
            answer = self._answer_waiting()
            if answer is not None:
                line = answer[1]
                if line in _QUIT:  # left for _converse, the call kept pending (as at EOF)
                    self._close_prompts()
                    continue
                self._backlog.remove(answer)
                if self._is_command(line):  # never a reason ("/quit" was one), but a
                    await self._command(line)  # path is an answer
                else:
                    await self._answer(line)
                continue
            if self._open and self._stdin_closed:
                self._close_prompts()  # nobody can answer: the call stays pending
                continue
            self._changed.clear()
            woke = asyncio.ensure_future(self._changed.wait())
            waits: set[asyncio.Future[Any]] = {woke}
            if not self._stdin_closed:
                waits.add(reader.line_future())
            # After a stop the hub may drop our message before its turn began: no event
            # says so, and the chat waited for ever (found by review on 2026-12-07).
            timeout = IDLE_CHECK_S if self._stop_asked else None
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            woke.cancel()
            if self._stop_asked and not self._hub.has_work(SOURCE):
                self._running = False
                continue
            if self._stdin_closed or not reader.line_future().done():
                continue
            line = reader.take()
            self._read += 1
            if line is None:
                self._stdin_closed = True
            elif line.strip().lower() in _STOP:  # for this turn: now, as Ctrl-C (and Telegram)
                self._drop_backlog()
                await self._command(line.strip())
            elif line.strip():
                self._backlog.append((self._read, line.strip()))

    def _answer_waiting(self) -> tuple[int, str] | None:
        """The first line waiting that may answer the latest prompt: one read after it was
        shown (or any, when typed-ahead answers are allowed)."""
        if not self._open:
            return None
        return next((entry for entry in self._backlog if self._answers(entry[0])), None)

    def _answers(self, number: int) -> bool:
        """Whether line ``number`` may answer the latest prompt: read after it was shown
        (a pasted line waiting in the backlog decided a job's card shown after it, until
        2026-12-07; found by review), or any when typed-ahead answers are allowed."""
        return self._typed_ahead_answers or number > self._open[-1][1]

    async def _pump(self) -> None:
        async for item in self._events:
            if isinstance(item, Lagged):
                continue
            event = item.event
            if isinstance(event, ApprovalRequired | Question):
                self._open.append((event, self._read))
            if isinstance(event, UserMessage):
                self._began = True  # (a background turn's has no message)
            if isinstance(event, DecisionMade) and self._forget(event.tool_call_id):
                # decided elsewhere: the next line is no answer to it
                verb, suffix = outcome_line(event.outcome)
                by = f" by {event.by}" if event.by else ""  # ("by  —" until 2026-12-07)
                self._say(f"{verb}{by}{suffix}")
            try:
                self._render(event)  # events it does not show (NewSession, ...) pass by
            except Exception:  # one event's fault: the turn's end must still be seen
                log.exception("showing %s failed", type(event).__name__)
            if isinstance(event, Done | Error):
                # Ours ended (a job's card asks on: review); a background turn's end (a
                # task's result told) is not our message's, which may still wait (until
                # 2026-12-07 it ended the wait: Ctrl-C then left the chat; review).
                self._open = [(p, n) for p, n in self._open if p.session_id != item.session_id]
                if self._began or not self._hub.has_work(SOURCE):
                    self._running = self._began = False
            self._changed.set()

    async def _command(self, text: str) -> None:
        head, _, argument = text.partition(" ")
        name = head[1:].lower()
        context = CommandContext(self._hub, SOURCE, argument.strip(), None, is_owner=True)
        if f"/{name}" in (*_STOP, "/new", "/clear"):  # each drops what waits (review)
            self._stop_asked = True
        try:
            reply = await self.commands.run(name, context)
            if reply is None and name in ("new", "clear"):  # the terminal shows no events
                reply = f"New conversation (session {await self._hub.session_id(SOURCE)})."
        except HubError as exc:
            reply = f"! {exc}"
        except Exception:
            self._failed(f"/{name}")
            return
        if reply:
            self._say(reply)

    async def _answer(self, text: str) -> None:
        """``text`` answers the latest prompt shown; one still open is shown again."""
        asking = self._open.pop()[0]
        try:
            await self._answered(asking, text)
        except Exception:
            self._failed(f"answering call {_call_of(asking)}")
        if self._open and self._open[-1][0] is not asking:
            self._say("Still waiting for an answer:")
            self._render(self._open[-1][0])

    async def _answered(self, asking: ApprovalRequired | Question, text: str) -> None:
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
                    self._open.append((asking, self._read))
                    self._say(f"! {exc}")
                except (InboxError, HubError) as exc:
                    self._say(f"! {exc}")

    def _failed(self, what: str) -> None:
        """One line for a failure of ours (the details in the log, by the error's id)."""
        error = report_failure(log, f"the terminal chat: {what}")
        self._say(f"! That failed (error {error}); try again.")

    def _is_command(self, line: str) -> bool:
        """``/name`` of one of the terminal's commands (a path, ``/home/ann``, is not)."""
        name, _, _rest = line.partition(" ")
        if not name.startswith("/"):
            return False
        return self.commands.get(name[1:].lower(), is_owner=True) is not None

    def _forget(self, call_id: int) -> bool:
        """Drop the prompt of ``call_id``; whether one was open."""
        kept = [(p, n) for p, n in self._open if _call_of(p) != call_id]
        forgot, self._open = len(kept) != len(self._open), kept
        return forgot

    def _drop_backlog(self) -> None:
        """``/stop`` drops what was typed meanwhile, as the hub drops queued messages."""
        if self._backlog:
            self._say(f"({len(self._backlog)} line(s) typed meanwhile dropped)")
            self._backlog.clear()

    def _close_prompts(self) -> None:
        """The calls stay pending (asked again at the next start) and the turn ends; a
        job's card waits on (the web inbox may still decide it)."""
        open_, self._open = self._open, []
        ours = {
            p.session_id for p, _ in open_ if not isinstance(p, ApprovalRequired) or not p.asked_by
        }
        for session_id in ours:
            self._hub.leave_waiting(session_id)

    def _interrupt(self) -> None:
        """Ctrl-C: the turn stops; at the prompt the chat ends as at ``/quit`` (it raised
        ``KeyboardInterrupt`` into the loop until 2026-12-06: ``chathub serve`` printed a
        traceback into the chat and skipped its graceful stop)."""
        if self._running:
            self._drop_backlog()
            self._stop_asked = True
            self._stopping = asyncio.ensure_future(self._hub.cancel(SOURCE))
            self._changed.set()
        else:
            self._leaving.set()

    def _prompt(self) -> None:
        self._out.write("› ")
        self._out.flush()

    def _say(self, text: str) -> None:
        self._out.write(plainly(text) + "\n")  # a fact or a job's name may be a model's
        self._out.flush()


def _call_of(prompt: ApprovalRequired | Question) -> int:
    return prompt.tool_call_id if isinstance(prompt, ApprovalRequired) else prompt.request_id
