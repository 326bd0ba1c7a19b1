"""The fleet's event relay (``engine/hub/relay.py``): what it costs between two processes.

    .venv/bin/python bench/relay.py [--postgres URL] [--events 50] [--deltas 500]

Two relays, each with its own ``PgNotifier`` (its own listening connection), on a fresh
database; both run in this process, so one clock times both ends. Prints:

* latency: from ``publish`` of an event on a to its arrival at a remote subscriber on b,
  p50/p90/max over ``--events`` events sent 20 ms apart (a ``ToolStart``: sent at once),
  and the same for the first token delta of a stream (sent at once, the next ones held);
* notices per streamed answer: ``--deltas`` token deltas of four characters published at
  several paces (all at once, one every 5, 20 and 50 ms), and how many notices carried them.

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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.hub.events import HubEvents
from engine.hub.relay import CHANNEL, EventRelay
from engine.session.events import Done, TextDelta, ToolStart
from engine.store.notify import Notice, PgNotifier, asyncpg_dsn
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
) -> tuple[int, float]:
    """(notices carrying the deltas, seconds the stream took) for one streamed answer."""
    notices = b.subscribe(CHANNEL, capacity=100_000)
    await notices.ready()
    remote = b_events.subscribe(SOURCE, capacity=100_000, remote=True)
    start = time.perf_counter()
    for i in range(deltas):
        a.publish(SOURCE, 1, TextDelta(f"t{i % 100:02d} "))
        await asyncio.sleep(pace_s)
    took = time.perf_counter() - start
    a.publish(SOURCE, 1, Done("(the answer)", 1))
    carried = 0
    async for item in notices:
        assert isinstance(item, Notice)
        if item.payload["type"] == "Done":
            break
        carried += item.payload["type"] == "TextDelta"
    notices.close()
    remote.close()
    return carried, took


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get(POSTGRES_URL_ENV))
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--deltas", type=int, default=500)
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
                carried, took = await notices_per_answer(a, nb, b_events, args.deltas, pace)
                print(
                    f"  one every {pace * 1000:>4.0f} ms ({took:5.2f} s): {carried:4d} notices "
                    f"({args.deltas / carried:.0f} deltas each)"
                )
        finally:
            await a.close()
            await b.close()
            await na.close()
            await nb.close()


if __name__ == "__main__":
    asyncio.run(main())
