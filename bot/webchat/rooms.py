"""The open sockets of each conversation, for what the hub does not broadcast itself
(a question answered, a card decided in one tab): every tab hears it."""

from __future__ import annotations

from typing import Protocol

from bot.webchat.protocol import ServerFrame

__all__ = ["Rooms", "Sink"]


class Sink(Protocol):
    async def send(self, frame: ServerFrame) -> None:
        """Send ``frame``; a socket already gone drops it quietly."""


class Rooms:
    def __init__(self) -> None:
        self._rooms: dict[str, set[Sink]] = {}

    def join(self, source: str, sink: Sink) -> None:
        self._rooms.setdefault(source, set()).add(sink)

    def leave(self, source: str, sink: Sink) -> None:
        room = self._rooms.get(source)
        if room is not None:
            room.discard(sink)
            if not room:
                del self._rooms[source]

    async def broadcast(self, source: str, frame: ServerFrame) -> None:
        for sink in list(self._rooms.get(source, ())):
            await sink.send(frame)
