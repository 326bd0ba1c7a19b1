"""The terminal as a person uses it: lines typed into ``TerminalChat``, the text it prints.

The chat runs in-process over ``Service(console=True)`` (``chathub serve`` at a terminal
with no Telegram token): stdin is a pipe the driver writes lines into, stdout a screen that
keeps every character and wakes whoever waits for text. Ctrl-C is a real SIGINT, which the
chat's own handler turns into ``hub.cancel``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from bot.serve import Service
from bot.terminal import TerminalChat
from tests.bot.platform_contract.driver import Prompt, StopAsking

__all__ = ["TerminalDriver", "TerminalScreen"]

T = TypeVar("T")

WAIT_S = 5.0
PROMPT = "› "  # the input prompt, printed before each line is read
APPROVAL_MARK = "⚠ "
APPROVAL_END = "Approve?"
QUESTION_MARK = "? "


class TerminalScreen(io.TextIOBase):
    """A stdout that keeps what is printed and wakes waiters on every write."""

    def __init__(self) -> None:
        self.text = ""
        self._changed = asyncio.Event()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.text += text
        self._changed.set()
        return len(text)

    def lines(self) -> list[str]:
        """Printed lines without the input prompts in front of them."""
        return [line.replace(PROMPT, "") for line in self.text.split("\n")]

    async def wait_for(self, found: Callable[[], T | bool | None], what: str) -> T:
        """The first truthy ``found()``, checked after every write (``WAIT_S`` at most)."""

        async def until() -> T:
            while not (value := found()):
                self._changed.clear()
                await self._changed.wait()
            return value  # type: ignore[return-value]

        try:
            return await asyncio.wait_for(until(), WAIT_S)
        except TimeoutError:
            raise AssertionError(f"{what} not shown; the terminal shows:\n{self.text}") from None


class _Keyboard:
    """The chat's stdin: a pipe; closing it is Ctrl-D."""

    def __init__(self) -> None:
        read_fd, self._write_fd = os.pipe()
        self.stdin = os.fdopen(read_fd, "r", encoding="utf-8")

    def type(self, line: str) -> None:
        os.write(self._write_fd, (line + "\n").encode())

    def close(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1


class TerminalDriver:
    """A person at ``chathub``'s terminal chat."""

    name = "terminal"
    source = "console"

    def __init__(self, start_service: Callable[[], Awaitable[Service]], workspace: Path) -> None:
        self._start_service = start_service
        self.workspace = workspace
        self.service: Service
        self.screen = TerminalScreen()
        self._keyboard: _Keyboard | None = None
        self._chat: asyncio.Task[None] | None = None
        self._approvals_seen = 0
        self._questions_seen = 0

    async def start(self) -> None:
        self.service = await self._start_service()
        assert self.service.hub is not None and self.service.console_events is not None
        self._keyboard = _Keyboard()
        chat = TerminalChat(
            self.service.hub,
            self.service.console_events,
            resuming=self.service.console_resuming,
            stdin=self._keyboard.stdin,
            stdout=self.screen,
        )
        self._chat = asyncio.create_task(chat.run(), name="terminal-chat")
        await self.expect("chathub — session")

    async def say(self, text: str) -> None:
        assert self._keyboard is not None
        self._keyboard.type(text)

    async def reply_to(self, text: str) -> str:
        start = len(self.screen.text)
        await self.say(text)

        def reply() -> str | None:  # what came before the next prompt
            end = self.screen.text.find(PROMPT, start)
            return None if end < 0 else self.screen.text[start:end].strip()

        return await self.screen.wait_for(reply, f"the reply to {text!r}")

    async def expect(self, needle: str) -> str:
        def found() -> str | None:
            return next((line for line in self.screen.lines() if needle in line), None)

        return await self.screen.wait_for(found, repr(needle))

    async def expect_message(self, text: str) -> None:
        await self.screen.wait_for(lambda: text in self.screen.lines(), f"the line {text!r}")

    def shown(self) -> list[str]:
        return self.screen.lines()

    async def approval(self) -> Prompt:
        self._approvals_seen += 1
        return await self._prompt(APPROVAL_MARK, self._approvals_seen, end=APPROVAL_END)

    def approvals_shown(self) -> int:
        return sum(line.startswith(APPROVAL_MARK) for line in self.screen.lines())

    def questions_shown(self) -> int:
        return sum(line.startswith(QUESTION_MARK) for line in self.screen.lines())

    async def approve(self, card: Prompt) -> None:
        await self.say("y")

    async def approve_and_stop_asking(self, card: Prompt, *, for_: StopAsking) -> None:
        await self.say("t" if for_ == "15m" else "a")

    async def reject(self, card: Prompt, reason: str = "") -> None:
        await self.say(reason or "n")

    async def question(self) -> Prompt:
        self._questions_seen += 1
        return await self._prompt(QUESTION_MARK, self._questions_seen)

    async def answer(self, question: Prompt, text: str) -> None:
        await self.say(text)

    async def ctrl_c(self) -> None:
        """SIGINT to this process, which the running chat has taken over."""
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            raise AssertionError("the terminal chat does not handle Ctrl-C")
        os.kill(os.getpid(), signal.SIGINT)

    async def expect_stopped(self) -> None:
        await self.expect("cancelled")

    async def idle(self) -> None:
        """The chat prompts for the next line once the turn is over."""
        hub = self.service.hub
        await self.screen.wait_for(
            lambda: not hub.is_processing(self.source) and self.screen.text.endswith(PROMPT),
            "the prompt after the turn",
        )

    async def restart(self) -> None:
        await self._end()
        self.screen = TerminalScreen()
        self._approvals_seen = self._questions_seen = 0
        await self.start()

    async def close(self) -> None:
        await self._end(stop_the_turn=True)

    async def _end(self, *, stop_the_turn: bool = False) -> None:
        """Ctrl-D, then the service stops; ``stop_the_turn``: a turn still running is
        stopped first, as Ctrl-C would (else the chat waits for it)."""
        if self._keyboard is not None:
            self._keyboard.close()
        hub = self.service.hub
        if stop_the_turn and hub is not None and hub.is_processing(self.source):
            await hub.cancel(self.source)
        if self._chat is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._chat), WAIT_S)
            self._chat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._chat
            self._chat = None
        if self._keyboard is not None:
            self._keyboard.stdin.close()
            self._keyboard = None
        await self.service.stop()

    async def _prompt(self, mark: str, nth: int, *, end: str | None = None) -> Prompt:
        """The ``nth`` block that starts with a line ``mark``…, up to the line ``end``…"""

        def found() -> Prompt | None:
            lines = self.screen.lines()
            starts = [i for i, line in enumerate(lines) if line.startswith(mark)]
            if len(starts) < nth:
                return None
            first = starts[nth - 1]
            if end is None:
                return Prompt(lines[first][len(mark) :], handle=first)
            last = next((i for i in range(first, len(lines)) if lines[i].startswith(end)), None)
            return None if last is None else Prompt("\n".join(lines[first:last]), handle=first)

        return await self.screen.wait_for(found, f"prompt {nth} ({mark!r})")
