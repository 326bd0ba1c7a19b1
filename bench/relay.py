"""The fleet's event relay (``engine/hub/fleet/relay.py``): what it costs between two processes.

    .venv/bin/python bench/relay.py [--postgres URL] [--events 50] [--deltas 500]
        [--chats 20] [--seconds 3]

Two relays, each with its own ``PgNotifier`` (its own listening connection), on a fresh
database; both run in this process, so one clock times both ends. Prints:

* latency: from ``publish`` of an event on a to its arrival at a remote subscriber on b,
  p50/p90/max over ``--events`` events sent 20 ms apart (a ``ToolStart``: sent at once),
  and the same for the first token delta of a stream (sent at once, the next ones held);
* notices per streamed answer: ``--deltas`` token deltas of four characters published at
  several paces (all at once, one every 5, 20 and 50 ms), how many deltas they went out as
  once joined, and in how many notices;
* the sustained rate: ``--chats`` chats streaming for ``--seconds`` at several offered rates
  (and as fast as this process can publish), four token deltas of four characters then a
  ``ToolStart`` over and over; per rate, the events a remote subscriber on b got (a delta
  counted by its characters, as deltas are joined on the way), those lost, the notices
  sent, the events the relay dropped and the gaps b was told of. Both relays share one
  event loop (and its CPU) with the producers.

PostgreSQL from ``--postgres`` or ``CHATHUB_TEST_POSTGRES_URL``. Timings are printed, not
judged.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.bus import Lagged
from engine.hub import CHANNEL, EventRelay, HubEvent, HubEvents, unpack
from engine.session import Done, TextDelta, ToolStart
from engine.store import Notice, PgNotifier, asyncpg_dsn
from tests.pg import POSTGRES_URL_ENV, fresh_postgres_database

SOURCE = "web:bench"


def quantiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p90 = ms[int(len(ms) * 0.9) - 1] if len(ms) >= 10 else ms[-1]
    return (
        f"p50 {statistics.median(ms):.2f} ms, p90 {p90:.2f} ms, max {ms[-1]:.2f} ms (n={len(ms)})"
    )


async def latency(a: EventRelay, b_events: HubEvents, n: int) -> list[float]:
    """Publish-to-arrival of ``n`` ToolStart events sent 20 ms apart."""
    remote = b_events.subscribe(SOURCE, remote=True)
    sent: dict[int, float] = {}
    got: list[float] = []

    async def receive() -> None:
        while len(got) < n:
            item = await remote.recv()
            got.append(time.perf_counter() - sent[item.event.tool_call_id])

    receiver = asyncio.create_task(receive())
    for i in range(n):
        sent[i] = time.perf_counter()
        a.publish(SOURCE, 1, ToolStart(i, "read_file", '{"path": "notes.txt"}'))
        await asyncio.sleep(0.02)
    await asyncio.wait_for(receiver, 30)
    remote.close()
    return got


async def first_delta(a: EventRelay, b_events: HubEvents, n: int) -> list[float]:
    """Publish-to-arrival of a stream's first delta (the next event ends each stream)."""
    remote = b_events.subscribe(SOURCE, remote=True)
    got: list[float] = []
    for i in range(n):
        start = time.perf_counter()
        a.publish(SOURCE, 1, TextDelta("Hello"))
        item = await asyncio.wait_for(remote.recv(), 30)
        got.append(time.perf_counter() - start)
        assert isinstance(item.event, TextDelta)
        a.publish(SOURCE, 1, Done("Hello", i))
        await asyncio.wait_for(remote.recv(), 30)
    remote.close()
    return got


async def notices_per_answer(
    a: EventRelay, b: PgNotifier, b_events: HubEvents, deltas: int, pace_s: float
) -> tuple[int, int, float]:
    """(deltas sent once joined, notices carrying them, seconds the stream took) for one
    streamed answer."""
    notices = b.subscribe(CHANNEL, capacity=100_000)
    await notices.ready()
    remote = b_events.subscribe(SOURCE, capacity=100_000, remote=True)
    start = time.perf_counter()
    for i in range(deltas):
        a.publish(SOURCE, 1, TextDelta(f"t{i % 100:02d} "))
        await asyncio.sleep(pace_s)
    took = time.perf_counter() - start
    a.publish(SOURCE, 1, Done("(the answer)", 1))
    joined = carrying = 0
    async for item in notices:
        assert isinstance(item, Notice)
        kinds = [entry["type"] for entry in unpack(item.payload)]
        joined += kinds.count("TextDelta")
        carrying += "TextDelta" in kinds
        if "Done" in kinds:
            break
    notices.close()
    remote.close()
    return joined, carrying, took


#: Each chat's stream, over and over: this many deltas, then a ToolStart.
DELTAS_PER_TOOL = 4
DELTA = "tok "  # every delta the same size: the characters received count the deltas
END = "web:rate-end"


@dataclass
class Sustained:
    offered: int  # events published on a
    delivered: int  # events whose content reached b's remote subscriber
    notices: int
    dropped: int  # by a's relay (queue full, not sendable)
    gaps: int  # RemoteLagged at b
    producing_s: float
    elapsed_s: float  # from the first publish to a's relay having sent everything


async def sustained(
    a: EventRelay, b_events: HubEvents, *, chats: int, burst: int, pace_s: float, seconds: float
) -> Sustained:
    """``chats`` chats each publishing ``burst`` events every ``pace_s`` (0: as fast as the
    loop turns) for ``seconds``, then a ``Done``; what reached b once a sent everything."""
    sources = [f"web:rate{i}" for i in range(chats)]
    remote = b_events.subscribe(None, capacity=10_000_000, remote=True)
    counts = {"tools": 0, "chars": 0, "gaps": 0, "dones": 0}
    published = 0
    sent_before, dropped_before = a.sent, a.dropped

    async def receive() -> None:
        while True:
            try:
                item: HubEvent = await remote.recv()
            except Lagged:  # a RemoteLagged: events of a chat were lost on the way
                counts["gaps"] += 1
                continue
            if item.source == END:
                return
            if isinstance(item.event, TextDelta):
                counts["chars"] += len(item.event.text)
            elif isinstance(item.event, ToolStart):
                counts["tools"] += 1
            elif isinstance(item.event, Done):
                counts["dones"] += 1

    async def produce(source: str, end: float) -> None:
        nonlocal published
        loop = asyncio.get_running_loop()
        n, due = 0, loop.time()
        while loop.time() < end:
            for _ in range(burst):
                if n % (DELTAS_PER_TOOL + 1) == DELTAS_PER_TOOL:
                    a.publish(source, 1, ToolStart(n, "read_file", '{"path": "notes.txt"}'))
                else:
                    a.publish(source, 1, TextDelta(DELTA))
                n += 1
            published += burst
            due += pace_s
            await asyncio.sleep(max(0.0, due - loop.time()))

    receiver = asyncio.create_task(receive())
    start = time.perf_counter()
    end = asyncio.get_running_loop().time() + seconds
    await asyncio.gather(*(produce(source, end) for source in sources))
    producing = time.perf_counter() - start
    for source in sources:
        a.publish(source, 1, Done("(the answer)", 1))
    published += chats
    # Once a's relay has sent everything (the gaps too), one more event: b has all that
    # came before it once it arrives. (``_idle``: there is no public way to wait for it.)
    await asyncio.wait_for(a._idle.wait(), 120)
    elapsed = time.perf_counter() - start
    a.publish(END, None, Done("(the end)", 1))
    await asyncio.wait_for(receiver, 30)
    remote.close()
    return Sustained(
        offered=published,
        delivered=counts["tools"] + counts["chars"] // len(DELTA) + counts["dones"],
        notices=a.sent - sent_before,
        dropped=a.dropped - dropped_before,
        gaps=counts["gaps"],
        producing_s=producing,
        elapsed_s=elapsed,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get(POSTGRES_URL_ENV))
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--deltas", type=int, default=500)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if not args.postgres:
        raise SystemExit(f"PostgreSQL needed: --postgres URL or {POSTGRES_URL_ENV}")
    os.environ[POSTGRES_URL_ENV] = args.postgres
    async with fresh_postgres_database(args.postgres) as url:
        dsn = asyncpg_dsn(url)
        na, nb = PgNotifier(dsn, "a"), PgNotifier(dsn, "b")
        await na.start()
        await nb.start()
        a_events, b_events = HubEvents(), HubEvents()
        a, b = EventRelay(na, a_events), EventRelay(nb, b_events)
        await a.start()
        await b.start()
        try:
            await latency(a, b_events, 5)  # warm: the publishing pool's connections
            print(
                f"event a -> b ({args.events} ToolStart): {quantiles(await latency(a, b_events, args.events))}"
            )
            print(
                f"first delta of a stream a -> b: {quantiles(await first_delta(a, b_events, 20))}"
            )
            print(f"notices per streamed answer of {args.deltas} deltas:")
            for pace in (0.0, 0.005, 0.02, 0.05):
                joined, carrying, took = await notices_per_answer(
                    a, nb, b_events, args.deltas, pace
                )
                print(
                    f"  one every {pace * 1000:>4.0f} ms ({took:5.2f} s): sent as {joined:4d} "
                    f"joined deltas ({args.deltas / joined:.0f} each) in {carrying:4d} notices"
                )
            print(
                f"sustained, {args.chats} chats, {DELTAS_PER_TOOL} deltas then a ToolStart, "
                f"{args.seconds:g} s each:"
            )
            # (events per chat per burst, seconds between bursts); 0 s: as fast as it can.
            rates = (
                (1, 0.01),
                (3, 0.01),
                (10, 0.01),
                (20, 0.01),
                (30, 0.01),
                (50, 0.01),
                (10, 0.0),
            )
            for burst, pace in rates:
                got = await sustained(
                    a, b_events, chats=args.chats, burst=burst, pace_s=pace, seconds=args.seconds
                )
                offered = f"{args.chats * burst / pace:>6.0f}/s" if pace else "   max  "
                print(
                    f"  offered {offered}: published {got.offered / got.producing_s:6.0f}/s, "
                    f"delivered {got.delivered / got.elapsed_s:6.0f}/s "
                    f"({got.delivered}/{got.offered}, lost {got.offered - got.delivered}), "
                    f"{got.notices / got.elapsed_s:5.0f} notices/s "
                    f"({got.delivered / max(got.notices, 1):.1f} events each), "
                    f"dropped {got.dropped}, gaps {got.gaps}, "
                    f"drained in {got.elapsed_s - got.producing_s:.2f} s"
                )
        finally:
            await a.close()
            await b.close()
            await na.close()
            await nb.close()


if __name__ == "__main__":
    asyncio.run(main())
