"""The hub's one event broadcast, and a subscription to the events of one source."""

from __future__ import annotations

from typing import Any

from engine.bus.broadcast import Broadcast, Lagged, Subscription
from engine.hub.types import HubEvent

__all__ = ["EVENT_CAPACITY", "HubEvents", "SourceEvents"]

EVENT_CAPACITY = 512


class SourceEvents:
    """A subscription to the hub's events of one source (or all): ``HubEvent`` or ``Lagged``."""

    def __init__(self, subscription: Subscription[HubEvent], source: str | None) -> None:
        self._subscription = subscription
        self._source = source

    async def recv(self) -> HubEvent:
        """The next event of the source; raises ``Lagged`` once after falling behind."""
        while True:
            event = await self._subscription.recv()
            if self._source is None or event.source == self._source:
                return event

    def close(self) -> None:
        self._subscription.close()

    def __aiter__(self) -> SourceEvents:
        return self

    async def __anext__(self) -> HubEvent | Lagged:
        try:
            return await self.recv()
        except Lagged as lagged:
            return lagged
        except Exception as exc:  # BusClosed
            raise StopAsyncIteration from exc


class HubEvents:
    """Every turn's events, tagged with their source, once on one broadcast."""

    __slots__ = ("_broadcast",)

    def __init__(self, capacity: int = EVENT_CAPACITY) -> None:
        self._broadcast: Broadcast[HubEvent] = Broadcast(capacity)

    def publish(self, source: str, session_id: int | None, event: Any) -> None:
        # After close a late turn event has no one to reach; dropping it is not an error.
        if not self._broadcast.closed:
            self._broadcast.publish(HubEvent(source, session_id, event))

    def subscribe(self, source: str | None, capacity: int | None = None) -> SourceEvents:
        return SourceEvents(self._broadcast.subscribe(capacity), source)

    def close(self) -> None:
        self._broadcast.close()
