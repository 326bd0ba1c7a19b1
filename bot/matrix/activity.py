"""What a Matrix room shows while a turn runs besides the progress line: "typing…".

The typing notice is set when a turn starts (after a short delay: a fast answer needs
none) and renewed every 20 s (Synapse drops it after the 30 s it was set for); the turn's
end clears it. The answer is not streamed: docs/matrix.md says why.
"""

from __future__ import annotations

import asyncio

from bot.matrix.incoming import parse_source
from bot.matrix.sending import MatrixSender
from bot.platform.tasks import Runtime

__all__ = ["RoomActivity"]

_RENEW_S = 20.0


class RoomActivity:
    def __init__(self, sender: MatrixSender, runtime: Runtime, *, delay_s: float = 0.4) -> None:
        self._sender = sender
        self._runtime = runtime
        self._delay_s = delay_s
        self._typing: dict[str, asyncio.Task[None]] = {}
        #: Rooms told "typing": only they are told it stopped (a fast answer costs no call).
        self._shown: set[str] = set()

    def start_typing(self, source: str) -> None:
        task = self._typing.get(source)
        if task is None or task.done():
            self._typing[source] = self._runtime.background.spawn(self._type(source))

    def stop_typing(self, source: str) -> None:
        task = self._typing.pop(source, None)
        if task is not None:
            task.cancel()
        room = parse_source(source).room_id
        if room in self._shown:
            self._shown.discard(room)
            self._runtime.background.spawn(self._sender.typing(room, False))

    async def _type(self, source: str) -> None:
        room = parse_source(source).room_id
        await self._runtime.sleep(self._delay_s)
        while True:
            self._shown.add(room)
            await self._sender.typing(room, True)
            await self._runtime.sleep(_RENEW_S)

    async def stream(self, source: str, delta: str) -> None:
        return None

    def thinking(self, source: str) -> None:
        return None

    async def end_stream(self, source: str) -> None:
        return None
