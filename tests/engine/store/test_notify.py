"""Notices between processes: in order, to every subscriber of a channel, within the limits,
past malformed notifications, and through a lost listening connection (a Resync, then the
notices again). PostgreSQL's run as two notifiers on one database, as two processes would;
the same scenarios run on the in-process notifier (one process publishing to itself).

``pytest -s -k latency`` prints the publish-to-receive latency between two PgNotifiers."""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from engine.store.notify import (
    MAX_PAYLOAD_BYTES,
    LocalNotifier,
    Notice,
    NoticeStream,
    Notifier,
    NotifierUnavailable,
    PayloadTooLarge,
    PgNotifier,
    Resync,
    asyncpg_dsn,
    encode,
    notifier_for,
)
from tests.pg import fresh_postgres_database, requires_postgres

WAIT_S = 10.0  # the bound on every wait for a delivery; nothing waits for time to pass

Item = Notice | Resync


async def take(stream: NoticeStream, count: int) -> list[Item]:
    """The next ``count`` items of ``stream`` (failing after WAIT_S)."""

    async def collect() -> list[Item]:
        return [await anext(stream) for _ in range(count)]

    return await asyncio.wait_for(collect(), WAIT_S)


async def listening(*streams: NoticeStream) -> None:
    for stream in streams:
        await asyncio.wait_for(stream.ready(), WAIT_S)


def payloads(items: list[Item]) -> list[Any]:
    return [item.payload if isinstance(item, Notice) else item for item in items]


@pytest.fixture
async def dsn() -> AsyncIterator[str]:
    """An asyncpg DSN for a database of its own (channels are per database)."""
    async with fresh_postgres_database() as url:
        yield asyncpg_dsn(url)


@pytest.fixture(params=["local", pytest.param("postgresql", marks=requires_postgres)])
async def pair(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[Notifier, Notifier]]:
    """(publisher, receiver): two PgNotifiers on one database, or one LocalNotifier twice."""
    if request.param == "local":
        local = LocalNotifier("p1")
        await local.start()
        yield local, local
        await local.close()
        return
    async with fresh_postgres_database() as url:
        sender, receiver = notifier_for(url, "p1"), notifier_for(url, "p2")
        await sender.start()
        await receiver.start()
        try:
            yield sender, receiver
        finally:
            await sender.close()
            await receiver.close()


async def test_notices_arrive_in_order_with_their_sender(
    pair: tuple[Notifier, Notifier],
) -> None:
    sender, receiver = pair
    stream = receiver.subscribe("approvals")
    await listening(stream)
    for i in range(50):
        await sender.publish("approvals", {"approval": i, "tags": ("a", "b")})
    got = await take(stream, 50)
    assert got == [
        Notice("approvals", {"approval": i, "tags": ["a", "b"]}, "p1") for i in range(50)
    ]
    assert stream.pending == 0


async def test_every_subscriber_gets_every_notice_of_its_channels(
    pair: tuple[Notifier, Notifier],
) -> None:
    sender, receiver = pair
    on_a = receiver.subscribe("a")
    on_both = receiver.subscribe(["a", "b"])
    on_b = receiver.subscribe({"b"})
    also_a = receiver.subscribe("a")
    await listening(on_a, on_both, on_b, also_a)
    for channel, n in [("a", 1), ("b", 1), ("a", 2)]:
        await sender.publish(channel, {"n": n})
    assert payloads(await take(on_both, 3)) == [{"n": 1}, {"n": 1}, {"n": 2}]
    assert [n.channel for n in await take(on_a, 2)] == ["a", "a"]
    assert payloads(await take(also_a, 2)) == [{"n": 1}, {"n": 2}]
    assert payloads(await take(on_b, 1)) == [{"n": 1}]
    assert (on_a.pending, on_both.pending, on_b.pending, also_a.pending) == (0, 0, 0, 0)


async def test_a_channel_subscribed_later_gets_what_is_published_after(
    pair: tuple[Notifier, Notifier],
) -> None:
    sender, receiver = pair
    first = receiver.subscribe("first")
    await listening(first)
    await sender.publish("later", {"n": 1})  # nobody listens on it yet: gone
    await sender.publish("first", {"n": 1})
    assert payloads(await take(first, 1)) == [{"n": 1}]

    later = receiver.subscribe("later")
    await listening(later)
    await sender.publish("later", {"n": 2})
    await sender.publish("first", {"n": 2})
    assert payloads(await take(later, 1)) == [{"n": 2}]
    assert payloads(await take(first, 1)) == [{"n": 2}]
    assert later.pending == 0


async def test_a_closed_stream_ends_and_the_others_go_on(
    pair: tuple[Notifier, Notifier],
) -> None:
    sender, receiver = pair
    leaving, staying = receiver.subscribe("c"), receiver.subscribe("c")
    await listening(leaving, staying)
    await sender.publish("c", {"n": 1})
    assert payloads(await take(leaving, 1)) == [{"n": 1}]
    leaving.close()
    await sender.publish("c", {"n": 2})
    assert payloads(await take(staying, 2)) == [{"n": 1}, {"n": 2}]
    assert [item async for item in leaving] == []


async def test_a_payload_over_the_limit_raises_and_nothing_is_sent(
    pair: tuple[Notifier, Notifier],
) -> None:
    sender, receiver = pair
    stream = receiver.subscribe("big")
    await listening(stream)
    # Sized so that the encoded notice is exactly at the limit; "é" takes two bytes.
    padding = MAX_PAYLOAD_BYTES - len(encode("big", {"x": ""}, "p1").encode())
    at_limit = {"x": "é" * (padding // 2) + "x" * (padding % 2)}
    assert len(encode("big", at_limit, "p1").encode()) == MAX_PAYLOAD_BYTES
    over = {"x": at_limit["x"] + "x"}

    with pytest.raises(PayloadTooLarge, match=rf"{MAX_PAYLOAD_BYTES + 1} bytes.*over the limit"):
        await sender.publish("big", over)
    with pytest.raises(ValueError):  # PayloadTooLarge is one
        await sender.publish("big", {"x": "x" * 10_000})
    await sender.publish("big", at_limit)
    await sender.publish("big", {"after": True})
    assert payloads(await take(stream, 2)) == [at_limit, {"after": True}]


async def test_bad_channel_names_and_payloads_are_refused(
    pair: tuple[Notifier, Notifier],
) -> None:
    sender, receiver = pair
    for name in ["", "Upper", "1st", "a-b", "a b", "ü", "a" * 64, "a;drop"]:
        with pytest.raises(ValueError, match="bad notice channel name"):
            receiver.subscribe(name)
        with pytest.raises(ValueError, match="bad notice channel name"):
            await sender.publish(name, {})
    with pytest.raises(ValueError, match="bad notice channel name"):
        receiver.subscribe(["fine", "Not"])
    with pytest.raises(ValueError, match="at least one channel"):
        receiver.subscribe([])
    longest = "_" + "a" * 62
    stream = receiver.subscribe(longest)  # one channel, not its letters
    assert stream.channels == {longest}
    with pytest.raises(TypeError):
        await sender.publish(longest, {"x": object()})
    with pytest.raises(ValueError):
        await sender.publish(longest, {"x": float("nan")})
    with pytest.raises(TypeError):
        await sender.publish(longest, [1, 2])  # type: ignore[arg-type]
    await listening(stream)
    await sender.publish(longest, {"ok": 1})
    assert payloads(await take(stream, 1)) == [{"ok": 1}]


async def test_a_full_buffer_becomes_one_resync_and_the_listener_never_waits(
    pair: tuple[Notifier, Notifier],
) -> None:
    sender, receiver = pair
    slow = receiver.subscribe("busy", capacity=3)
    fast = receiver.subscribe("busy")
    await listening(slow, fast)
    for n in range(1, 6):
        await sender.publish("busy", {"n": n})
    # Every stream is handed a notice at the same moment: once ``fast`` has all five,
    # ``slow`` has been offered them too.
    assert len(await take(fast, 5)) == 5
    assert slow.pending == 3
    assert payloads(await take(slow, 3)) == [Resync("overflow"), {"n": 4}, {"n": 5}]
    await sender.publish("busy", {"n": 6})
    assert payloads(await take(slow, 1)) == [{"n": 6}]


async def test_closing_the_notifier_ends_every_iteration_once_drained(
    pair: tuple[Notifier, Notifier],
) -> None:
    sender, receiver = pair
    waiting, holding = receiver.subscribe("quiet"), receiver.subscribe(["bye", "other"])
    await listening(waiting, holding)

    async def drain(stream: NoticeStream) -> list[Item]:
        return [item async for item in stream]

    reader = asyncio.create_task(drain(waiting))  # blocked: nothing comes on "quiet"
    await sender.publish("bye", {"n": 1})
    await sender.publish("bye", {"n": 2})
    await asyncio.wait_for(_until(lambda: holding.pending == 2), WAIT_S)
    await receiver.close()
    assert await asyncio.wait_for(reader, WAIT_S) == []
    assert payloads(await asyncio.wait_for(drain(holding), WAIT_S)) == [{"n": 1}, {"n": 2}]
    late = receiver.subscribe("bye")
    assert [item async for item in late] == []
    with pytest.raises(NotifierUnavailable, match="closed"):
        await receiver.publish("bye", {"n": 3})


async def _until(condition: Callable[[], bool]) -> None:
    # A buffer's fill has no event to wait on; callers bound this with wait_for.
    while not condition():  # noqa: ASYNC110
        await asyncio.sleep(0.005)


# -- PostgreSQL only


@requires_postgres
async def test_two_processes_each_receive_both_in_their_order(dsn: str) -> None:
    one, two = PgNotifier(dsn, "one"), PgNotifier(dsn, "two")
    await one.start()
    await two.start()
    try:
        streams = {"one": one.subscribe("hub"), "two": two.subscribe("hub")}
        await listening(*streams.values())
        for i in range(20):
            await one.publish("hub", {"i": i})
            await two.publish("hub", {"i": i})
        for stream in streams.values():
            got = await take(stream, 40)
            assert all(isinstance(item, Notice) for item in got)
            for sender in ("one", "two"):  # its own notices too
                mine = [n.payload["i"] for n in got if isinstance(n, Notice) and n.sender == sender]
                assert mine == list(range(20))
    finally:
        await one.close()
        await two.close()


@requires_postgres
async def test_a_malformed_notification_is_logged_and_skipped(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncpg

    receiver = PgNotifier(dsn, "me")
    await receiver.start()
    raw = await asyncpg.connect(dsn)
    try:
        stream = receiver.subscribe("events")
        await listening(stream)
        with caplog.at_level(logging.WARNING, logger="engine.store.notify"):
            for junk in ["not json", "[1, 2]", '{"sender": 7, "payload": {}}', '{"payload": 1}']:
                await raw.execute(f"NOTIFY events, '{junk}'")
            await raw.execute("""SELECT pg_notify('events', '{"sender": "x", "payload": {}}')""")
            assert await take(stream, 1) == [Notice("events", {}, "x")]
        skipped = [r for r in caplog.records if "not a notice" in r.getMessage()]
        assert len(skipped) == 4 and "not json" in skipped[0].getMessage()
        assert receiver.listener_pid is not None  # the listener lives on
    finally:
        await raw.close()
        await receiver.close()


async def _terminate(dsn: str, pid: int) -> None:
    import asyncpg

    admin = await asyncpg.connect(dsn)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()


@requires_postgres
async def test_a_killed_listener_reconnects_gives_a_resync_and_then_the_notices(
    dsn: str,
) -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    sender = PgNotifier(dsn, "sender")
    receiver = PgNotifier(dsn, "receiver", sleep=sleep)
    await receiver.start()
    try:
        stream = receiver.subscribe(["jobs", "stops"])
        await listening(stream)
        await sender.publish("jobs", {"n": 1})
        assert payloads(await take(stream, 1)) == [{"n": 1}]
        before = receiver.listener_pid
        assert before is not None
        await _terminate(dsn, before)
        assert await take(stream, 1) == [Resync("reconnected")]
        assert receiver.listener_pid not in (None, before)
        assert sleeps == []  # the first attempt after the loss succeeded
        await sender.publish("stops", {"n": 2})
        await sender.publish("jobs", {"n": 3})
        assert payloads(await take(stream, 2)) == [{"n": 2}, {"n": 3}]
    finally:
        await sender.close()
        await receiver.close()


@requires_postgres
async def test_reconnecting_backs_off_while_postgres_refuses(dsn: str) -> None:
    import asyncpg

    sleeps: list[float] = []
    to_refuse = refused = 0

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def connect(to: str) -> Any:
        nonlocal to_refuse, refused
        if to_refuse:
            to_refuse -= 1
            refused += 1
            raise ConnectionRefusedError("PostgreSQL is restarting")
        return await asyncpg.connect(to)

    sender = PgNotifier(dsn, "sender")
    receiver = PgNotifier(dsn, "receiver", sleep=sleep, connect=connect, backoff_max=0.3)
    await receiver.start()
    to_refuse = 4  # the next four attempts, after the loss
    try:
        stream = receiver.subscribe("jobs")
        await listening(stream)
        pid = receiver.listener_pid
        assert pid is not None
        await _terminate(dsn, pid)
        assert await take(stream, 1) == [Resync("reconnected")]
        assert refused == 4 and sleeps == [0.05, 0.1, 0.2, 0.3]
        await sender.publish("jobs", {"n": 1})
        assert payloads(await take(stream, 1)) == [{"n": 1}]
    finally:
        await sender.close()
        await receiver.close()


@requires_postgres
async def test_losses_unread_become_one_resync(dsn: str) -> None:
    sender, receiver = PgNotifier(dsn, "sender"), PgNotifier(dsn, "receiver")
    await receiver.start()
    try:
        idle, watcher = receiver.subscribe("jobs"), receiver.subscribe("jobs")
        await listening(idle, watcher)
        for _ in range(2):
            pid = receiver.listener_pid
            assert pid is not None
            await _terminate(dsn, pid)
            assert await take(watcher, 1) == [Resync("reconnected")]
        await sender.publish("jobs", {"n": 1})
        assert payloads(await take(idle, 2)) == [Resync("reconnected"), {"n": 1}]
    finally:
        await sender.close()
        await receiver.close()


@requires_postgres
async def test_a_channel_nobody_wants_any_more_is_unlistened(dsn: str) -> None:
    receiver = PgNotifier(dsn, "receiver")
    await receiver.start()
    try:
        one, two, both = (
            receiver.subscribe("one"),
            receiver.subscribe("two"),
            receiver.subscribe(["one", "two"]),
        )
        await listening(one, two, both)
        assert receiver.listening == {"one", "two"}
        one.close()
        both.close()
        await asyncio.wait_for(_until(lambda: receiver.listening == {"two"}), WAIT_S)
        again = receiver.subscribe("one")
        await listening(again)
        assert receiver.listening == {"one", "two"}
    finally:
        await receiver.close()


class _Silent:
    """A listening connection that stops answering without closing (a half-open TCP
    connection): its termination listeners never run, its queries never return."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.silent = conn, False

    async def fetchval(self, query: str) -> Any:
        if self.silent:
            await asyncio.Event().wait()
        return await self.conn.fetchval(query)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


@requires_postgres
async def test_a_listener_that_stops_answering_is_found_by_its_ping(dsn: str) -> None:
    import asyncpg

    opened: list[_Silent] = []

    async def connect(to: str) -> Any:
        opened.append(_Silent(await asyncpg.connect(to)))
        return opened[-1]

    sender = PgNotifier(dsn, "sender")
    receiver = PgNotifier(dsn, "receiver", connect=connect, ping_interval=0.05, connect_timeout=0.2)
    await receiver.start()
    try:
        stream = receiver.subscribe("jobs")
        await listening(stream)
        opened[0].silent = True
        assert await take(stream, 1) == [Resync("reconnected")]
        assert len(opened) == 2 and opened[0].conn.is_closed()
        await sender.publish("jobs", {"n": 1})
        assert payloads(await take(stream, 1)) == [{"n": 1}]
    finally:
        await sender.close()
        await receiver.close()


@requires_postgres
async def test_a_notice_published_before_the_kill_comes_before_the_resync(dsn: str) -> None:
    sender, receiver = PgNotifier(dsn, "sender"), PgNotifier(dsn, "receiver")
    await receiver.start()
    try:
        stream = receiver.subscribe("jobs")
        await listening(stream)
        await sender.publish("jobs", {"n": 1})
        # Delivered into the buffer, not yet read, when the connection goes.
        await asyncio.wait_for(_until(lambda: stream.pending == 1), WAIT_S)
        pid = receiver.listener_pid
        assert pid is not None
        await _terminate(dsn, pid)
        assert payloads(await take(stream, 2)) == [{"n": 1}, Resync("reconnected")]
    finally:
        await sender.close()
        await receiver.close()


@requires_postgres
async def test_publish_to_postgres_with_its_listener_gone_still_works(dsn: str) -> None:
    """Publishing does not go through the listening connection."""
    import asyncpg

    notifier = PgNotifier(dsn, "p")
    await notifier.start()
    raw = await asyncpg.connect(dsn)
    try:
        await raw.add_listener("x", lambda *args: got.put_nowait(args[3]))
        got: asyncio.Queue[str] = asyncio.Queue()
        pid = notifier.listener_pid
        assert pid is not None
        await _terminate(dsn, pid)
        await notifier.publish("x", {"n": 1})
        text = await asyncio.wait_for(got.get(), WAIT_S)
        assert text == '{"sender":"p","payload":{"n":1}}'
    finally:
        await raw.close()
        await notifier.close()


@requires_postgres
async def test_latency_between_two_processes(dsn: str) -> None:
    """Prints publish-to-receive latency, one notice at a time and 500 in a burst."""
    sender, receiver = PgNotifier(dsn, "sender"), PgNotifier(dsn, "receiver")
    await receiver.start()
    try:
        stream = receiver.subscribe("bench")
        await listening(stream)
        await sender.publish("bench", {"warm": True})
        await take(stream, 1)
        count = 500
        one_by_one = []
        for i in range(count):
            start = time.perf_counter()
            await sender.publish("bench", {"session": i})
            (item,) = await take(stream, 1)
            one_by_one.append(time.perf_counter() - start)
            assert isinstance(item, Notice) and item.payload == {"session": i}
        start = time.perf_counter()
        sent: dict[int, float] = {}
        burst = []

        async def receive() -> None:
            for _ in range(count):
                item = await anext(stream)
                assert isinstance(item, Notice)
                burst.append(time.perf_counter() - sent[item.payload["session"]])

        reader = asyncio.create_task(receive())
        for i in range(count):
            sent[i] = time.perf_counter()
            await sender.publish("bench", {"session": i})
        await asyncio.wait_for(reader, WAIT_S)
        total = time.perf_counter() - start
        print(
            f"\nnotify latency over {count}: one at a time p50 {_ms(one_by_one, 50)} "
            f"p99 {_ms(one_by_one, 99)}; in a burst p50 {_ms(burst, 50)} "
            f"p99 {_ms(burst, 99)}, {count / total:.0f} notices/s"
        )
    finally:
        await sender.close()
        await receiver.close()


def _ms(samples: list[float], percentile: int) -> str:
    return f"{statistics.quantiles(samples, n=100)[percentile - 1] * 1000:.2f} ms"


# -- PostgreSQL away (no server needed)


async def _silent_server() -> tuple[asyncio.Server, int]:
    """A port that accepts connections and never answers (PostgreSQL hung, or a firewall)."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _refused_port() -> int:
    server = await asyncio.start_server(lambda *_: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port


async def _bounded(call: Callable[[], Awaitable[None]]) -> None:
    await asyncio.wait_for(call(), WAIT_S)


async def test_publishing_while_postgres_is_away_raises_within_the_timeout() -> None:
    pytest.importorskip("asyncpg")
    server, port = await _silent_server()
    refused = await _refused_port()
    hung = PgNotifier(f"postgresql://u@127.0.0.1:{port}/db", "p", publish_timeout=0.3)
    gone = PgNotifier(f"postgresql://u@127.0.0.1:{refused}/db", "p")
    try:
        with pytest.raises(NotifierUnavailable, match=r"took over 0.3 s"):
            await _bounded(lambda: hung.publish("jobs", {"n": 1}))
        with pytest.raises(NotifierUnavailable, match="could not publish a notice on 'jobs'"):
            await _bounded(lambda: gone.publish("jobs", {"n": 1}))
        with pytest.raises(PayloadTooLarge):  # checked before any connection is tried
            await gone.publish("jobs", {"x": "x" * MAX_PAYLOAD_BYTES})
    finally:
        await hung.close()
        await gone.close()
        server.close()


async def test_starting_while_postgres_is_away_raises() -> None:
    pytest.importorskip("asyncpg")
    server, port = await _silent_server()
    refused = await _refused_port()
    try:
        for dsn in [
            f"postgresql://u@127.0.0.1:{port}/db",
            f"postgresql://u@127.0.0.1:{refused}/db",
        ]:
            notifier = PgNotifier(dsn, "p", connect_timeout=0.3)
            with pytest.raises(NotifierUnavailable, match="notice listener's connection"):
                await _bounded(notifier.start)
            await notifier.close()
    finally:
        server.close()


def test_urls_choose_the_notifier_and_convert_to_an_asyncpg_dsn() -> None:
    assert isinstance(notifier_for("sqlite+aiosqlite:///x.db", "p"), LocalNotifier)
    assert isinstance(notifier_for("sqlite:///:memory:", "p"), LocalNotifier)
    pg = notifier_for("postgresql+asyncpg://u:secret@db:5433/chathub?ssl=require", "p7")
    assert isinstance(pg, PgNotifier) and pg.process_id == "p7"
    assert asyncpg_dsn("postgresql+asyncpg://u:secret@db:5433/chathub?ssl=require") == (
        "postgresql://u:secret@db:5433/chathub?ssl=require"
    )
    assert asyncpg_dsn("postgresql://u@h/d") == "postgresql://u@h/d"
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        asyncpg_dsn("sqlite:///x.db")
    with pytest.raises(ValueError, match="no notifier"):
        notifier_for("mysql://u@h/d", "p")


@requires_postgres
async def test_close_as_the_connection_is_lost_does_not_wait_for_a_reconnect(dsn: str) -> None:
    """The listening connection is found lost in the very step ``close`` cancels the
    supervisor: ``close`` returns at once (Python 3.11's ``wait_for`` used to swallow that
    cancellation, and the supervisor reconnected and pinged before letting go)."""
    for _ in range(5):
        notifier = PgNotifier(dsn, "p", ping_interval=60.0)
        await notifier.start()
        notifier._lost.set()
        closing = asyncio.ensure_future(notifier.close())
        done, _ = await asyncio.wait({closing}, timeout=WAIT_S / 2)
        assert done, "close waited for the supervisor's reconnect and next ping"
        assert notifier.listener_pid is None
