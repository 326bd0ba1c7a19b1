"""A generic in-process broadcast channel for asyncio.

Every subscriber owns a bounded FIFO buffer. ``publish`` appends the item to each
buffer and returns at once: it never awaits and never blocks, however slow a
subscriber is. When a subscriber's buffer is full, its *oldest* item is dropped
and counted; the next ``recv`` reports the count as :class:`Lagged` (once), then
the retained items follow in order.

Count semantics: ``Lagged(n)`` means exactly ``n`` published items were dropped
from this subscription's buffer since the previous report, and every one of them
is older than every item ``recv`` returns afterwards. A subscription with
capacity ``c`` that is ``u > c`` items behind therefore gets ``Lagged(u - c)``
followed by the newest ``c`` items. Over a subscription's life, items received
plus items reported missed equals items published while it was subscribed (once
it has drained its buffer).

The channel is not thread-safe: publish, subscribe and receive from the thread
running the event loop (use ``loop.call_soon_threadsafe`` from other threads).
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType
from typing import Generic, Self, TypeVar

__all__ = ["DEFAULT_CAPACITY", "Broadcast", "BusClosed", "Lagged", "Subscription"]

T = TypeVar("T")

DEFAULT_CAPACITY = 256


# Named after the condition (like tokio's RecvError::Lagged), not "...Error": lagging is
# an expected, recoverable event for a subscriber.
class Lagged(Exception):
    """The subscriber fell behind and ``missed`` items were dropped from its buffer.

    Raised by :meth:`Subscription.recv`, yielded as a value by ``async for``.
    Compares equal by count so tests and logs can treat it as a value.
    """

    def __init__(self, missed: int) -> None:
        super().__init__(missed)
        self.missed = missed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lagged) and other.missed == self.missed

    def __hash__(self) -> int:
        return hash((Lagged, self.missed))

    def __repr__(self) -> str:
        return f"Lagged({self.missed})"

    def __str__(self) -> str:
        return f"subscriber lagged behind and missed {self.missed} item(s)"


class BusClosed(Exception):
    """The channel (or this subscription) is closed and the buffer is drained."""


class Subscription(Generic[T]):
    """One subscriber's view of a :class:`Broadcast`: a bounded buffer plus a wake-up.

    Use ``await sub.recv()`` or ``async for item in sub`` (items are ``T | Lagged``).
    Close it (or use ``async with``) when done so the channel stops buffering for it.
    """

    __slots__ = ("_buf", "_capacity", "_channel", "_closed", "_missed", "_ready")

    def __init__(self, channel: Broadcast[T] | None, capacity: int) -> None:
        self._channel = channel
        self._capacity = capacity
        # maxlen makes append() evict the oldest item in O(1); _push counts evictions.
        self._buf: deque[T] = deque(maxlen=capacity)
        self._missed = 0
        # An Event (not a per-wait future) so publish wakes us with one cheap call
        # whether or not we are currently waiting; it binds to the loop lazily.
        self._ready = asyncio.Event()
        self._closed = channel is None

    @property
    def capacity(self) -> int:
        """Maximum number of items buffered for this subscriber."""
        return self._capacity

    @property
    def pending(self) -> int:
        """Items buffered and not yet received."""
        return len(self._buf)

    @property
    def closed(self) -> bool:
        """True once the channel or this subscription has been closed."""
        return self._closed

    def _push(self, item: T) -> None:
        buf = self._buf
        if len(buf) == self._capacity:
            self._missed += 1  # append() below evicts the oldest item
        buf.append(item)
        self._ready.set()

    def _detach(self) -> None:
        """Called by the channel on close: stop receiving, keep the buffer to drain."""
        self._channel = None
        self._closed = True
        self._ready.set()

    async def recv(self) -> T:
        """Return the next item, waiting for one if the buffer is empty.

        Raises :class:`Lagged` once after items were dropped, then returns the
        retained ones; raises :class:`BusClosed` when closed and drained.
        """
        while True:
            if self._missed:
                missed, self._missed = self._missed, 0
                raise Lagged(missed)
            if self._buf:
                return self._buf.popleft()
            if self._closed:
                raise BusClosed
            # No await between the emptiness check and clear(), so no wake-up is lost.
            self._ready.clear()
            await self._ready.wait()

    def close(self) -> None:
        """Unsubscribe and discard the buffer; pending and future ``recv`` raise BusClosed."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel._subs.pop(self, None)
        self._closed = True
        self._buf.clear()
        self._missed = 0
        self._ready.set()  # wake any task blocked in recv() so it sees the close

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T | Lagged:
        # Lagged is yielded rather than raised so a plain `async for` can log it and go on.
        try:
            return await self.recv()
        except Lagged as lagged:
            return lagged
        except BusClosed:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Broadcast(Generic[T]):
    """Fan-out channel: every item published reaches every current subscriber.

    Subscribers only see items published after they subscribed. ``publish`` is
    synchronous and O(subscribers) with no task creation.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        _check_capacity(capacity)
        self._capacity = capacity
        # A dict (not a set) keeps delivery order deterministic; values are unused.
        self._subs: dict[Subscription[T], None] = {}
        self._closed = False

    @property
    def capacity(self) -> int:
        """Default per-subscriber buffer size."""
        return self._capacity

    @property
    def receiver_count(self) -> int:
        """Number of live subscriptions."""
        return len(self._subs)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    def subscribe(self, capacity: int | None = None) -> Subscription[T]:
        """Return a new subscription that receives items published from now on.

        After :meth:`close`, the subscription is already closed (``recv`` raises
        :class:`BusClosed`, ``async for`` ends at once).
        """
        if capacity is None:
            capacity = self._capacity
        else:
            _check_capacity(capacity)
        if self._closed:
            return Subscription(None, capacity)
        sub = Subscription(self, capacity)
        self._subs[sub] = None
        return sub

    def publish(self, item: T) -> int:
        """Deliver ``item`` to every subscriber's buffer; return how many got it.

        Never blocks or awaits. Publishing on a closed channel delivers nothing
        and returns 0, so a late publisher during shutdown does not fail.
        """
        subs = self._subs
        for sub in subs:
            sub._push(item)
        return len(subs)

    def close(self) -> None:
        """Close the channel: subscribers drain what they hold, then see BusClosed.

        Idempotent.
        """
        self._closed = True
        subs, self._subs = self._subs, {}
        for sub in subs:
            sub._detach()


def _check_capacity(capacity: int) -> None:
    if capacity < 1:
        raise ValueError(f"capacity must be at least 1, got {capacity}")
