"""``chathub chat``: talk to the engine in a terminal.

Line input, streamed output, tool activity shown as it happens. The conversation is the
``console`` source's session, so it survives restarts; ``/new`` starts a fresh one.
Ctrl-C stops a running turn; at the prompt it (or Ctrl-D, or ``/quit``) exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from typing import TextIO

from engine.core import Engine
from engine.session.events import (
    Done,
    Error,
    ModelFallback,
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

SOURCE = "console"
HELP = "Commands: /new (fresh conversation), /help, /quit. Ctrl-C stops a running turn."
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

    def _line(self, text: str) -> None:
        if self._streaming:  # tool activity after streamed text starts on its own line
            self._write("\n")
            self._streaming = False
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


class _LineReader:
    """Reads stdin on a daemon thread so a pending read never blocks shutdown."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stream: TextIO) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._loop = loop
        self._stream = stream
        threading.Thread(target=self._pump, name="chathub-stdin", daemon=True).start()

    def _pump(self) -> None:
        while True:
            line = self._stream.readline()
            self._loop.call_soon_threadsafe(self._queue.put_nowait, line or None)
            if not line:
                return

    async def readline(self) -> str | None:
        return await self._queue.get()


class TerminalChat:
    def __init__(self, engine: Engine, *, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout):
        self._engine = engine
        self._stdin = stdin
        self._out = stdout
        self._render = TerminalRenderer(stdout)
        self._handler: ChatSessionHandler | None = None
        self._turn: asyncio.Task[object] | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = _LineReader(loop, self._stdin)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
        handler = await self._session()
        self._say(f"chathub — session {handler.session.id}. {HELP}")
        while True:
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
            self._turn = asyncio.ensure_future(handler.handle_message(text, emit=self._render))
            try:
                await self._turn
            finally:
                self._turn = None

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
