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
    """Every turn's events, tagged with their source: a subscriber to every source gets
    them all; a subscriber to one source gets only that source's, from a broadcast of its
    own (another chat's token deltas never fill its buffer, wake it or make it lag)."""

    __slots__ = ("_all", "_by_source", "_capacity")

    def __init__(self, capacity: int = EVENT_CAPACITY) -> None:
        self._capacity = capacity
        self._all: Broadcast[HubEvent] = Broadcast(capacity)
        self._by_source: dict[str, Broadcast[HubEvent]] = {}

    def publish(self, source: str, session_id: int | None, event: Any) -> None:
        # After close a late turn event has no one to reach; dropping it is not an error.
        if self._all.closed:
            return
        item = HubEvent(source, session_id, event)
        self._all.publish(item)
        own = self._by_source.get(source)
        if own is not None and not own.publish(item):
            del self._by_source[source]  # its last subscriber left

    def subscribe(self, source: str | None, capacity: int | None = None) -> SourceEvents:
        if source is None or self._all.closed:
            return SourceEvents(self._all.subscribe(capacity), source)
        own = self._by_source.get(source)
        if own is None:
            own = self._by_source[source] = Broadcast(self._capacity)
        return SourceEvents(own.subscribe(capacity), source)

    def close(self) -> None:
        self._all.close()
        for own in self._by_source.values():
            own.close()
        self._by_source.clear()
