"""The hub's one event broadcast, and a subscription to the events of one source.

In a fleet, the events of turns run by other processes arrive too (``EventRelay``,
``relay.py``), marked ``HubEvent.remote``. They reach only subscribers that ask for them
(``subscribe(..., remote=True)``: a web chat socket), from broadcasts of their own: a
subscriber that delivers what it receives (the Telegram adapter) never sees another
process's events, and their volume never makes it lag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.bus.broadcast import Broadcast, Lagged, Subscription
from engine.hub.types import HubEvent

__all__ = ["EVENT_CAPACITY", "HubEvents", "RemoteGap", "RemoteLagged", "SourceEvents"]

EVENT_CAPACITY = 512


@dataclass(frozen=True, slots=True)
class RemoteGap:
    """Other processes' events of ``source`` (``None``: of every source) may have been
    missed; a subscriber to them gets it as ``RemoteLagged``."""

    source: str | None
    reason: str


class RemoteLagged(Lagged):
    """Events of other processes may have been missed (``reason``): re-read the tables.

    A ``Lagged`` so that whoever handles falling behind (the web chat's ``lagged`` frame,
    which makes the page reload the conversation) handles this the same way; how many
    were missed is not known, so ``missed`` is 0.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(0)
        self.reason = reason

    def __repr__(self) -> str:
        return f"RemoteLagged({self.reason!r})"

    def __str__(self) -> str:
        return f"events of other processes may have been missed ({self.reason})"


Item = HubEvent | RemoteGap


class SourceEvents:
    """A subscription to the hub's events of one source (or all): ``HubEvent`` or ``Lagged``."""

    def __init__(self, subscription: Subscription[Item], source: str | None) -> None:
        self._subscription = subscription
        self._source = source

    async def recv(self) -> HubEvent:
        """The next event of the source; raises ``Lagged`` once after falling behind (and
        ``RemoteLagged`` when other processes' events may have been missed)."""
        while True:
            item = await self._subscription.recv()
            if self._source is not None and item.source not in (self._source, None):
                continue
            if isinstance(item, RemoteGap):
                raise RemoteLagged(item.reason)
            return item

    @property
    def pending(self) -> int:
        """Items buffered and not yet received."""
        return self._subscription.pending

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
    own (another chat's token deltas never fill its buffer, wake it or make it lag).

    Each of those exists twice: for this process's events only, and (``remote``) for them
    and other processes' together."""

    __slots__ = ("_all", "_by_source", "_capacity")

    def __init__(self, capacity: int = EVENT_CAPACITY) -> None:
        self._capacity = capacity
        # Indexed by ``remote``: False, this process's events; True, everyone's.
        self._all: tuple[Broadcast[Item], Broadcast[Item]] = (
            Broadcast(capacity),
            Broadcast(capacity),
        )
        self._by_source: dict[tuple[str, bool], Broadcast[Item]] = {}

    @property
    def closed(self) -> bool:
        return self._all[0].closed

    def publish(self, source: str, session_id: int | None, event: Any) -> None:
        """An event of a turn (or decision) of this process: every subscriber gets it."""
        # After close a late turn event has no one to reach; dropping it is not an error.
        if self.closed:
            return
        item = HubEvent(source, session_id, event)
        self._deliver(source, item, False)
        self._deliver(source, item, True)

    def publish_remote(self, source: str, session_id: int | None, event: Any) -> None:
        """An event of another process's turn: only subscribers to remote events get it."""
        if self.closed:
            return
        self._deliver(source, HubEvent(source, session_id, event, remote=True), True)

    def remote_gap(self, source: str | None, reason: str) -> None:
        """Other processes' events of ``source`` (``None``: of all) may have been missed:
        every subscriber to them gets a ``RemoteLagged``."""
        if self.closed:
            return
        gap = RemoteGap(source, reason)
        if source is not None:
            self._deliver(source, gap, True)
            return
        self._all[True].publish(gap)
        for (name, remote), own in list(self._by_source.items()):
            if remote and not own.publish(gap):
                del self._by_source[(name, remote)]

    def _deliver(self, source: str, item: Item, remote: bool) -> None:
        self._all[remote].publish(item)
        key = (source, remote)
        own = self._by_source.get(key)
        if own is not None and not own.publish(item):
            del self._by_source[key]  # its last subscriber left

    def subscribe(
        self, source: str | None, capacity: int | None = None, *, remote: bool = False
    ) -> SourceEvents:
        """``remote``: other processes' events too (a viewer; never for a subscriber that
        delivers what it gets, or another process's answers would be sent twice)."""
        if source is None or self.closed:
            return SourceEvents(self._all[remote].subscribe(capacity), source)
        key = (source, remote)
        own = self._by_source.get(key)
        if own is None:
            own = self._by_source[key] = Broadcast(self._capacity)
        return SourceEvents(own.subscribe(capacity), source)

    def close(self) -> None:
        for broadcast in self._all:
            broadcast.close()
        for own in self._by_source.values():
            own.close()
        self._by_source.clear()
