"""What a Slack thread shows while a turn runs besides the progress line: its status.

Slack has no typing indicator for apps; an assistant thread has a status line
(``assistant.threads.setStatus``, "is thinking…"), which Slack clears when the app posts
its reply. It is set once per turn in a thread; where Slack refuses it (not an assistant
thread, no ``assistant:write``), this process stops asking. The answer is not streamed.
"""

from __future__ import annotations

import asyncio

from bot.platform.tasks import Runtime
from bot.slack.incoming import parse_source
from bot.slack.sending import SlackSender

__all__ = ["THINKING", "ThreadActivity"]

THINKING = "is thinking…"


class ThreadActivity:
    def __init__(self, sender: SlackSender, runtime: Runtime, *, delay_s: float = 0.4) -> None:
        self._sender = sender
        self._runtime = runtime
        self._delay_s = delay_s
        self._refused = False
        self._pending: dict[str, asyncio.Task[None]] = {}

    def start_typing(self, source: str) -> None:
        if self._refused or parse_source(source).thread_ts is None:
            return
        task = self._pending.get(source)
        if task is None or task.done():
            self._pending[source] = self._runtime.background.spawn(self._show(source))

    def stop_typing(self, source: str) -> None:
        """The turn ended: a status not yet set is not set (the reply clears a set one)."""
        task = self._pending.pop(source, None)
        if task is not None:
            task.cancel()

    async def _show(self, source: str) -> None:
        await self._runtime.sleep(self._delay_s)  # a fast answer needs no status
        if not await self._sender.status(parse_source(source), THINKING):
            self._refused = True

    async def stream(self, source: str, delta: str) -> None:
        return None

    def thinking(self, source: str) -> None:
        return None

    async def end_stream(self, source: str) -> None:
        return None
