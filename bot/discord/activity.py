"""What a Discord channel shows while a turn runs besides the progress line: typing.

Discord shows "is typing…" for 10 s after each trigger (or until the bot posts), so the
indicator is sent again every ``interval_s`` while the channel's source has work. The
answer is not streamed (``Activity``'s streaming calls do nothing here).
"""

from __future__ import annotations

import asyncio

from bot.discord.incoming import target_of
from bot.discord.sending import DiscordSender
from bot.platform.tasks import Runtime
from engine.hub import ChatHub

__all__ = ["ChannelActivity"]


class ChannelActivity:
    def __init__(
        self,
        hub: ChatHub,
        sender: DiscordSender,
        runtime: Runtime,
        *,
        delay_s: float = 0.4,
        interval_s: float = 8.0,
    ) -> None:
        self._hub = hub
        self._sender = sender
        self._runtime = runtime
        self._delay_s = delay_s
        self._interval_s = interval_s
        self._typing: dict[str, asyncio.Task[None]] = {}

    def start_typing(self, source: str) -> None:
        task = self._typing.get(source)
        if task is None or task.done():
            self._typing[source] = self._runtime.background.spawn(self._keep_typing(source))

    def is_typing(self, source: str) -> bool:
        """Whether "is typing…" is kept up in ``source`` (or about to be)."""
        task = self._typing.get(source)
        return task is not None and not task.done()

    def stop_typing(self, source: str) -> None:
        task = self._typing.pop(source, None)
        if task is not None:
            task.cancel()

    async def _keep_typing(self, source: str) -> None:
        await self._runtime.sleep(self._delay_s)  # a fast answer needs no indicator
        channel = target_of(source)
        while self._hub.has_work(source):
            await self._sender.typing(channel)
            await self._runtime.sleep(self._interval_s)

    async def stream(self, source: str, delta: str) -> None:
        return None

    def thinking(self, source: str) -> None:
        return None

    async def end_stream(self, source: str) -> None:
        return None
