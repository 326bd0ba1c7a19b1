"""``chathub chat``: talk to the engine in a terminal.

Line input, streamed output, tool activity shown as it happens. The conversation is the
``console`` source's session, so it survives restarts; ``/new`` starts a fresh one.
A turn a crash interrupted is resumed at start. While a turn runs, a line answers the
approval prompt or question it shows (``y`` approves, ``a`` approves and stops asking for
this session, anything else rejects with that text as the reason); other lines wait and
become the next messages, in order (so piped input works line by line). Ctrl-C stops a running turn; at the prompt it (or Ctrl-D, or ``/quit``) exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from typing import Any, TextIO

from engine.approval.broker import BypassRequest
from engine.approval.deciders import OPERATOR
from engine.core import Engine
from engine.session.events import (
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
from engine.session.handler import ChatSessionHandler
from engine.store.inbox import InboxError

SOURCE = "console"
HELP = "Commands: /new (fresh conversation), /help, /quit. Ctrl-C stops a running turn."
APPROVE_HELP = "Approve? [y]es / [a]lways this session / anything else rejects (as the reason)"
_PREVIEW = 160


def _preview(text: str) -> str:
    text = " ".join(text.split())
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
                self._write(text)
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
                    self._write(content + "\n")
                self._streaming = False
            case Error(message=message):
                self._line(f"! {message}")
            case ApprovalRequired():
                self._line(describe_approval(event))
                self._line(APPROVE_HELP)
            case Question(question=question):
                self._line(f"? {question}")

    def _line(self, text: str) -> None:
        if self._streaming:  # tool activity after streamed text starts on its own line
            self._write("\n")
            self._streaming = False
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


def describe_approval(event: ApprovalRequired) -> str:
    """The approval prompt: the whole call, concrete (command and directory, old → new)."""
    preview = event.preview
    if preview is not None and preview.kind == "command":
        return f"⚠ {event.name} wants to run in {preview.workdir}:\n  $ {preview.command}"
    if preview is not None and preview.kind == "file":
        before = "(new file)" if preview.old_content is None else preview.old_content
        return (
            f"⚠ {event.name} wants to write {preview.path}\n"
            f"--- before\n{before}\n+++ after\n{preview.new_content}"
        )
    return f"⚠ {event.name} wants to run with {json.dumps(event.arguments, ensure_ascii=False)}"


class _LineReader:
    """Reads stdin on a daemon thread so a pending read never blocks shutdown."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stream: TextIO) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._loop = loop
        self._stream = stream
        self._next: asyncio.Future[str | None] | None = None
        threading.Thread(target=self._pump, name="chathub-stdin", daemon=True).start()

    def _pump(self) -> None:
        while True:
            line = self._stream.readline()
            self._loop.call_soon_threadsafe(self._queue.put_nowait, line or None)
            if not line:
                return

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


class TerminalChat:
    def __init__(self, engine: Engine, *, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout):
        self._engine = engine
        self._stdin = stdin
        self._out = stdout
        self._render = TerminalRenderer(stdout)
        self._handler: ChatSessionHandler | None = None
        self._turn: asyncio.Future[object] | None = None
        self._asking: ApprovalRequired | Question | None = None
        self._stdin_closed = False
        self._backlog: list[str] = []
        self._asked = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = _LineReader(loop, self._stdin)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
        handler = await self._session()
        self._say(f"chathub — session {handler.session.id}. {HELP}")
        if handler.session.id in await self._engine.interrupted_sessions():
            self._say("Resuming the turn a restart interrupted…")
            await self._drive(handler.resume_turn(emit=self._on_event), reader)
        while True:
            if self._backlog:
                line: str | None = self._backlog.pop(0)
            elif self._stdin_closed:
                return
            else:
                self._prompt()
                line = await reader.readline()
            if line is None:
                self._say("")
                return
            text = line.strip()
            if not text:
                continue
            if text in ("/quit", "/exit"):
                return
            if text == "/help":
                self._say(HELP)
                continue
            if text == "/new":
                handler = await self._session(fresh=True)
                self._say(f"New conversation (session {handler.session.id}).")
                continue
            await self._drive(handler.handle_message(text, emit=self._on_event), reader)

    async def _drive(self, turn: Any, reader: _LineReader) -> None:
        """Run a turn; lines answer its prompts, the others wait for their own turn."""
        self._turn = asyncio.ensure_future(turn)
        self._asking = None
        asked = asyncio.Event()
        self._asked = asked
        try:
            while not self._turn.done():
                if self._asking is not None and self._backlog:
                    await self._answer(self._backlog.pop(0))
                    continue
                if self._asking is not None and self._stdin_closed:
                    self._close_prompts()  # nobody can answer: the call stays pending
                    continue
                asked.clear()
                woke = asyncio.ensure_future(asked.wait())
                waits: set[asyncio.Future[Any]] = {self._turn, woke}
                if not self._stdin_closed:
                    waits.add(reader.line_future())
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                woke.cancel()
                if self._stdin_closed or not reader.line_future().done():
                    continue
                line = reader.take()
                if line is None:
                    self._stdin_closed = True
                elif line.strip():
                    self._backlog.append(line.strip())
            self._turn.result()
        finally:
            self._turn = None

    async def _answer(self, text: str) -> None:
        asking, self._asking = self._asking, None
        try:
            match asking:
                case ApprovalRequired(tool_call_id=call_id, session_id=session_id):
                    if text.lower() in ("y", "yes"):
                        await self._engine.approve(call_id, decider=OPERATOR, session_id=session_id)
                    elif text.lower() in ("a", "always"):
                        await self._engine.approve(
                            call_id, BypassRequest("all"), decider=OPERATOR, session_id=session_id
                        )
                    else:
                        note = "" if text.lower() in ("n", "no") else text
                        await self._engine.reject(
                            call_id, note, decider=OPERATOR, session_id=session_id
                        )
                case Question(request_id=request_id, session_id=session_id):
                    await self._engine.resolve_question(request_id, text, session_id=session_id)
        except InboxError as exc:
            self._say(f"! {exc}")

    def _on_event(self, event: TurnEvent) -> None:
        if isinstance(event, ApprovalRequired | Question):
            self._asking = event
            self._asked.set()
        self._render(event)

    def _close_prompts(self) -> None:
        """The call stays pending (asked again at the next start) and the turn ends."""
        asking, self._asking = self._asking, None
        if asking is not None:
            self._engine.approvals.close_session(asking.session_id)

    def _interrupt(self) -> None:
        if self._turn is not None and self._handler is not None:
            self._handler.cancel()
        else:
            raise KeyboardInterrupt

    async def _session(self, *, fresh: bool = False) -> ChatSessionHandler:
        sessions = self._engine.store.sessions
        session_id = None if fresh else await sessions.active_for_source(SOURCE)
        if session_id is None:
            handler = await self._engine.new_session(SOURCE)
            await sessions.set_active_for_source(SOURCE, handler.session.id)
        else:
            handler = await self._engine.open_session(session_id)
        self._handler = handler
        return handler

    def _prompt(self) -> None:
        self._out.write("› ")
        self._out.flush()

    def _say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()
