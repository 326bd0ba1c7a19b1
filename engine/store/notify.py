"""Small notices between processes: PostgreSQL ``LISTEN/NOTIFY``, or in-process for SQLite.

A notice names what changed (ids); whoever receives it reads the rest from the tables.
Delivery is at most once: while the listening connection is down (or a subscriber falls
too far behind) notices are lost, and every affected subscriber is told so with a
:class:`Resync`, after which it re-reads the tables it cares about.

* :class:`LocalNotifier`: one process (SQLite, or tests); ``publish`` reaches this
  process's subscribers only.
* :class:`PgNotifier`: one dedicated connection LISTENs on every channel a subscriber asked
  for, and reconnects with backoff when it drops; ``publish`` is ``SELECT pg_notify`` on a
  small pool of other connections, so a publish never waits behind the listener.

Both encode a notice the same way and apply the same limits (channel names, payload size),
so code that works on one works on the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self

from sqlalchemy.engine import make_url

__all__ = [
    "DEFAULT_CAPACITY",
    "MAX_PAYLOAD_BYTES",
    "LocalNotifier",
    "Notice",
    "NoticeStream",
    "Notifier",
    "NotifierUnavailable",
    "PayloadTooLarge",
    "PgNotifier",
    "Resync",
    "asyncpg_dsn",
    "notifier_for",
]

log = logging.getLogger(__name__)

#: The most bytes one encoded notice (envelope included) may take. PostgreSQL refuses
#: payloads of 8,000 bytes or more; this leaves room and keeps notices small.
MAX_PAYLOAD_BYTES = 7_000
#: Notices buffered per subscriber before it is given a Resync instead.
DEFAULT_CAPACITY = 1_000

# An unquoted-looking identifier of at most 63 bytes (PostgreSQL's NAMEDATALEN - 1), so
# the name LISTENed on is the name notified on, whatever the quoting.
_CHANNEL = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True, slots=True)
class Notice:
    """One notice as received; ``sender`` is the publishing process's id."""

    channel: str
    payload: dict[str, Any]
    sender: str


@dataclass(frozen=True, slots=True)
class Resync:
    """Notices may have been missed: re-read the tables.

    ``reason``: ``"reconnected"`` (the listening connection was lost and is back) or
    ``"overflow"`` (this subscriber's buffer was full; what it held was dropped).
    """

    reason: str


class PayloadTooLarge(ValueError):
    """The encoded notice is over ``MAX_PAYLOAD_BYTES``; nothing was sent."""


class NotifierUnavailable(RuntimeError):
    """A notice could not be published (PostgreSQL unreachable, too slow, or closed)."""


def check_channel(channel: str) -> str:
    """``channel`` itself, or ValueError when it is not a valid channel name."""
    if not isinstance(channel, str) or not _CHANNEL.fullmatch(channel):
        raise ValueError(
            f"bad notice channel name {channel!r}: it must match [a-z_][a-z0-9_]{{0,62}}"
        )
    return channel


def encode(channel: str, payload: dict[str, Any], sender: str) -> str:
    """The text sent for a notice; raises ValueError (PayloadTooLarge) or TypeError."""
    check_channel(channel)
    if not isinstance(payload, dict):
        raise TypeError(f"a notice payload is a dict, not {type(payload).__name__}")
    text = json.dumps(
        {"sender": sender, "payload": payload},
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    size = len(text.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(
            f"the notice on {channel!r} is {size} bytes encoded, over the limit of "
            f"{MAX_PAYLOAD_BYTES}: send ids and let the receivers read the rest from the tables"
        )
    return text


def decode(channel: str, text: str) -> Notice | None:
    """The notice ``text`` carries, or None when it is not one of ours."""
    try:
        envelope = json.loads(text)
    except ValueError:
        return None
    if not isinstance(envelope, dict):
        return None
    sender, payload = envelope.get("sender"), envelope.get("payload")
    if not isinstance(sender, str) or not isinstance(payload, dict):
        return None
    return Notice(channel, payload, sender)


def _channels(channels: str | Iterable[str]) -> frozenset[str]:
    # A lone string is one channel (iterating it would subscribe to its letters).
    names = [channels] if isinstance(channels, str) else list(channels)
    if not names:
        raise ValueError("subscribe to at least one channel")
    return frozenset(check_channel(name) for name in names)


class NoticeStream:
    """One subscriber's notices: ``async for item in stream`` gives ``Notice | Resync``.

    Buffered up to ``capacity``; when full, what it holds is dropped for a single Resync,
    so the listener never waits for a slow subscriber. ``close()`` ends the iteration at
    once; the notifier closing ends it once the buffer is drained.
    """

    __slots__ = (
        "_buf",
        "_capacity",
        "_closed",
        "_detached",
        "_on_close",
        "_ready",
        "_wake",
        "channels",
    )

    def __init__(
        self,
        channels: frozenset[str],
        capacity: int,
        on_close: Callable[[NoticeStream], None],
    ) -> None:
        if capacity < 2:  # room for a Resync and the notice after it
            raise ValueError(f"a notice stream needs a capacity of at least 2, not {capacity}")
        self.channels = channels
        self._capacity = capacity
        self._on_close = on_close
        self._buf: deque[Notice | Resync] = deque()
        self._wake = asyncio.Event()
        self._ready = asyncio.Event()
        self._closed = False  # by its subscriber: nothing more, buffer discarded
        self._detached = False  # by the notifier: drain, then end

    @property
    def pending(self) -> int:
        """Items buffered and not yet received."""
        return len(self._buf)

    async def ready(self) -> None:
        """Return once every channel is listened on: notices published from now on arrive."""
        await self._ready.wait()

    def _mark_ready(self) -> None:
        self._ready.set()

    def _push(self, item: Notice | Resync) -> None:
        if self._closed or self._detached:
            return
        buf = self._buf
        if isinstance(item, Resync) and buf and isinstance(buf[-1], Resync):
            return  # one re-read covers both
        if len(buf) >= self._capacity:
            # The subscriber re-reads the tables anyway: what it held is of no use then.
            buf.clear()
            buf.append(Resync("overflow"))
        buf.append(item)
        self._wake.set()

    def _detach(self) -> None:
        self._detached = True
        self._ready.set()  # nothing will ever be listened on: do not leave ready() hanging
        self._wake.set()

    def close(self) -> None:
        """Unsubscribe and discard what is buffered; the iteration ends."""
        if not self._closed:
            self._closed = True
            self._buf.clear()
            self._wake.set()
            self._ready.set()
            self._on_close(self)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Notice | Resync:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._buf:
                return self._buf.popleft()
            if self._detached:
                raise StopAsyncIteration
            # No await between the emptiness check and clear(): no wake-up is lost.
            self._wake.clear()
            await self._wake.wait()

    async def __aenter__(self) -> Self:
        await self.ready()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Notifier(Protocol):
    """Publishes small notices and hands them to every subscriber of their channel."""

    process_id: str  # the ``sender`` of what this one publishes

    async def start(self) -> None: ...

    async def publish(self, channel: str, payload: dict[str, Any]) -> None: ...

    def subscribe(
        self, channels: str | Iterable[str], *, capacity: int = DEFAULT_CAPACITY
    ) -> NoticeStream: ...

    async def close(self) -> None: ...


class _Subscribers:
    """The streams of one notifier, and fan-out to them."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._streams: dict[NoticeStream, None] = {}  # a dict: delivery order is stable
        self._on_change = on_change
        self.closed = False

    def add(self, channels: str | Iterable[str], capacity: int) -> NoticeStream:
        stream = NoticeStream(_channels(channels), capacity, self._remove)
        if self.closed:
            stream._detach()
        else:
            self._streams[stream] = None
            self._on_change()
        return stream

    def _remove(self, stream: NoticeStream) -> None:
        if self._streams.pop(stream, 0) is None:
            self._on_change()

    @property
    def channels(self) -> frozenset[str]:
        """Every channel some stream wants."""
        return frozenset().union(*(stream.channels for stream in self._streams))

    def mark_ready(self, listened: set[str]) -> None:
        for stream in self._streams:
            if stream.channels <= listened:
                stream._mark_ready()

    def deliver(self, notice: Notice) -> None:
        for stream in self._streams:
            if notice.channel in stream.channels:
                stream._push(notice)

    def resync(self) -> None:
        for stream in self._streams:
            stream._push(Resync("reconnected"))

    def close(self) -> None:
        self.closed = True
        streams, self._streams = self._streams, {}
        for stream in streams:
            stream._detach()


class LocalNotifier:
    """Notices within one process: the same encoding, limits and streams as PostgreSQL's."""

    def __init__(self, process_id: str) -> None:
        self.process_id = process_id
        self._subscribers = _Subscribers(self._changed)

    def _changed(self) -> None:
        self._subscribers.mark_ready(set(self._subscribers.channels))

    async def start(self) -> None:
        """Nothing to connect."""

    async def publish(self, channel: str, payload: dict[str, Any]) -> None:
        text = encode(channel, payload, self.process_id)
        if self._subscribers.closed:
            raise NotifierUnavailable("the notifier is closed")
        # Decoded again so subscribers see what they would over PostgreSQL (lists, not
        # tuples; a copy, not the publisher's dict).
        notice = decode(channel, text)
        assert notice is not None
        self._subscribers.deliver(notice)

    def subscribe(
        self, channels: str | Iterable[str], *, capacity: int = DEFAULT_CAPACITY
    ) -> NoticeStream:
        return self._subscribers.add(channels, capacity)

    def resync(self) -> None:
        """Every subscriber told to read the tables again, as PostgreSQL's listener does
        after it reconnects (notices published meanwhile are lost)."""
        self._subscribers.resync()

    async def close(self) -> None:
        self._subscribers.close()


def asyncpg_dsn(url: str) -> str:
    """The asyncpg DSN for a SQLAlchemy PostgreSQL URL (``postgresql+asyncpg://...``)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"not a PostgreSQL URL: {parsed.drivername!r}")
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


Sleep = Callable[[float], Awaitable[None]]
Connect = Callable[[str], Awaitable[Any]]


class PgNotifier:
    """Notices between processes through PostgreSQL ``LISTEN/NOTIFY``.

    ``start()`` opens the listening connection (it raises NotifierUnavailable if
    PostgreSQL cannot be reached then); ``publish`` works without it (a process that only
    publishes needs no listener). When the listening connection is lost (found by asyncpg,
    or by a ping every ``ping_interval`` seconds), it is opened again after ``sleep``-ing
    ``backoff_min`` seconds, doubling up to ``backoff_max``, until it succeeds; every
    subscriber then gets a Resync. ``connect`` opens the listening connection (tests
    make it fail).
    """

    def __init__(
        self,
        dsn: str,
        process_id: str,
        *,
        publish_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        ping_interval: float = 10.0,
        backoff_min: float = 0.05,
        backoff_max: float = 5.0,
        publishers: int = 2,
        sleep: Sleep = asyncio.sleep,
        connect: Connect | None = None,
    ) -> None:
        self.process_id = process_id
        self._dsn = dsn
        self._publish_timeout = publish_timeout
        self._connect_timeout = connect_timeout
        self._ping_interval = ping_interval
        self._backoff = (backoff_min, backoff_max)
        self._publishers = publishers
        self._sleep = sleep
        self._connect = connect
        self._subscribers = _Subscribers(self._changed)
        self._conn: Any = None  # the listening connection, when up
        self._lost = asyncio.Event()  # set when ``_conn`` is found gone
        self._listened: set[str] = set()  # LISTENed on ``_conn``
        self._conn_lock = asyncio.Lock()  # one operation at a time on ``_conn``
        self._pool: Any = None
        self._pool_lock = asyncio.Lock()
        self._supervisor: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def listener_pid(self) -> int | None:
        """The server process id of the listening connection, when it is up."""
        conn = self._conn
        return None if conn is None or conn.is_closed() else conn.get_server_pid()

    @property
    def listening(self) -> frozenset[str]:
        """The channels LISTENed on by the current listening connection."""
        return frozenset(self._listened)

    async def start(self) -> None:
        if self._supervisor is not None:
            return
        try:
            await self._open_listener()
        except Exception as exc:
            raise NotifierUnavailable(
                f"could not open the notice listener's connection to PostgreSQL: {exc!r}"
            ) from exc
        self._supervisor = asyncio.create_task(self._supervise(), name="notify-listener")

    def subscribe(
        self, channels: str | Iterable[str], *, capacity: int = DEFAULT_CAPACITY
    ) -> NoticeStream:
        return self._subscribers.add(channels, capacity)

    async def publish(self, channel: str, payload: dict[str, Any]) -> None:
        """Send a notice, or raise NotifierUnavailable within ``publish_timeout`` seconds."""
        text = encode(channel, payload, self.process_id)
        if self._closed:
            raise NotifierUnavailable("the notifier is closed")
        try:
            await asyncio.wait_for(self._send(channel, text), self._publish_timeout)
        except TimeoutError as exc:
            raise NotifierUnavailable(
                f"publishing a notice on {channel!r} took over {self._publish_timeout} s: "
                "PostgreSQL is unreachable or overloaded"
            ) from exc
        except _failures() as exc:
            raise NotifierUnavailable(
                f"could not publish a notice on {channel!r}: {exc!r}"
            ) from exc

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._subscribers.close()
        tasks = [*self._tasks, *([self._supervisor] if self._supervisor else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._drop_listener()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), self._connect_timeout)
            except _failures():
                pool.terminate()

    # -- publishing

    async def _send(self, channel: str, text: str) -> None:
        pool = self._pool or await self._open_pool()
        await pool.execute("SELECT pg_notify($1, $2)", channel, text)

    async def _open_pool(self) -> Any:
        import asyncpg

        async with self._pool_lock:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self._dsn, min_size=1, max_size=self._publishers
                )
            return self._pool

    # -- listening

    def _changed(self) -> None:
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._sync_listens())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sync_listens(self) -> None:
        try:
            async with self._conn_lock:
                await self._sync_listens_locked()
        except Exception as exc:  # the connection went: the supervisor reconnects and redoes it
            log.warning("could not LISTEN on the notice channels: %r", exc)

    async def _sync_listens_locked(self) -> None:
        conn = self._conn
        if conn is None or conn.is_closed():
            return
        wanted = self._subscribers.channels
        for channel in sorted(wanted - self._listened):
            await conn.add_listener(channel, self._on_notification)
            self._listened.add(channel)
        for channel in sorted(self._listened - wanted):
            await conn.remove_listener(channel, self._on_notification)
            self._listened.discard(channel)
        self._subscribers.mark_ready(self._listened)

    def _on_notification(self, _conn: Any, pid: int, channel: str, text: str) -> None:
        notice = decode(channel, text)
        if notice is None:
            log.warning(
                "skipped a notification on %r from server process %s that is not a notice: %.100r",
                channel,
                pid,
                text,
            )
            return
        self._subscribers.deliver(notice)

    async def _open_listener(self) -> None:
        if self._connect is None:
            import asyncpg

            connect: Connect = asyncpg.connect
        else:
            connect = self._connect
        conn = await asyncio.wait_for(connect(self._dsn), self._connect_timeout)
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        try:
            async with self._conn_lock:
                self._conn, self._lost, self._listened = conn, lost, set()
                await asyncio.wait_for(self._sync_listens_locked(), self._connect_timeout)
        except BaseException:
            if self._conn is conn:
                await self._drop_listener()
            else:  # never became ours (cancelled waiting for the lock)
                conn.terminate()
            raise

    async def _drop_listener(self) -> None:
        conn, self._conn = self._conn, None
        self._listened = set()
        if conn is None or conn.is_closed():
            return
        try:
            await asyncio.wait_for(conn.close(), self._connect_timeout)
        except _failures():
            conn.terminate()

    async def _supervise(self) -> None:
        # ``_closed`` is checked as well as the cancellation ``close`` sends: Python 3.11's
        # ``wait_for`` returns the result instead of raising when its awaitable finishes as
        # the cancellation comes (a connection lost just as the notifier closes), and the
        # supervisor reconnected and kept ``close`` waiting for its next ping.
        while not self._closed:
            await self._until_lost()
            if self._closed:
                return
            log.warning("the notice listener lost its PostgreSQL connection; reconnecting")
            await self._drop_listener()
            await self._reconnect()
            # After the LISTENs are back: a subscriber re-reading now misses nothing.
            self._subscribers.resync()

    async def _until_lost(self) -> None:
        while not self._closed:
            lost = asyncio.ensure_future(self._lost.wait())
            try:  # ``asyncio.wait``, not ``wait_for``: a cancellation is never swallowed
                done, _ = await asyncio.wait({lost}, timeout=self._ping_interval)
            finally:
                lost.cancel()
            if done or not await self._ping():
                return

    async def _ping(self) -> bool:
        # Finds a connection that died without a word (a half-open TCP connection).
        try:
            async with self._conn_lock:
                conn = self._conn
                if conn is None or conn.is_closed():
                    return False
                await asyncio.wait_for(conn.fetchval("SELECT 1"), self._connect_timeout)
        except _failures() as exc:
            log.warning("the notice listener's ping failed: %r", exc)
            return False
        return True

    async def _reconnect(self) -> None:
        delay, most = self._backoff
        while not self._closed:
            try:
                await self._open_listener()
                return
            except Exception as exc:  # whatever it is, the listener must come back
                log.warning(
                    "the notice listener could not reconnect (%r); again in %s s", exc, delay
                )
            await self._sleep(delay)
            delay = min(delay * 2, most)


def _failures() -> tuple[type[Exception], ...]:
    """What a lost, refused or slow connection raises (asyncpg imported only when one did)."""
    import asyncpg

    return (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


def notifier_for(url: str, process_id: str, **options: Any) -> Notifier:
    """A LocalNotifier for a SQLite URL, a PgNotifier (``options`` passed on) for PostgreSQL."""
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return LocalNotifier(process_id)
    if backend == "postgresql":
        return PgNotifier(asyncpg_dsn(url), process_id, **options)
    raise ValueError(f"no notifier for database URL scheme {backend!r}")
