"""Matrix end to end on a real Synapse: a person's message until the bot's reply event.

Both bots run here against one Synapse started for the run (tests/bot/matrix/homeserver.py:
SQLite, rate limits lifted) and a model that answers at once:

- bare: a matrix-nio ``AsyncClient`` syncing (``sync_forever``) and answering every
  message with ``room_send`` (the baseline: the same library, nothing stored);
- chathub: ``Service`` with Matrix alone (its default pacing): the event stored before the
  sync token moves past it, the turn run, the reply recorded and sent through the
  delivery pipeline with a transaction id from its row.

Latency: one message at a time in one of 20 direct rooms, from the message's
``origin_server_ts`` to the reply's (Synapse's own clock, so the person's client costs
nothing): p50 and p99. Then one message in each of 100 rooms at once: how long until all
are answered, and how many were.

    .venv/bin/python -P bench/matrix_e2e.py [--messages 100] [--rooms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nio import AsyncClient, AsyncClientConfig, InviteMemberEvent, RoomMessageText  # noqa: E402

from bot.matrix.sending import matrix_pacing  # noqa: E402
from bot.matrix.settings import MatrixSettings  # noqa: E402
from bot.serve import Service, freeze_startup_objects  # noqa: E402
from engine.llm import ModelRegistry  # noqa: E402
from tests.bot.matrix.homeserver import Homeserver, Person, unavailable  # noqa: E402
from tests.bot.telegram_contract.conftest import app_config  # noqa: E402
from tests.engine.hub.conftest import EchoModel  # noqa: E402
from tests.pg import migrated_sqlite  # noqa: E402

LATENCY_ROOMS = 20


async def bare_bot(homeserver: Homeserver, bot: Person) -> tuple[AsyncClient, asyncio.Task[Any]]:
    client = AsyncClient(homeserver.url, bot.user_id, config=AsyncClientConfig(max_timeouts=0))
    client.access_token = bot.token
    client.user_id = bot.user_id

    async def on_invite(room: Any, event: InviteMemberEvent) -> None:
        if event.state_key == bot.user_id and event.membership == "invite":
            await client.join(room.room_id)

    async def on_message(room: Any, event: RoomMessageText) -> None:
        if event.sender != bot.user_id:
            await client.room_send(
                room.room_id, "m.room.message", {"msgtype": "m.text", "body": f"echo: {event.body}"}
            )

    await client.sync(timeout=0)  # history is not answered
    client.add_event_callback(on_invite, InviteMemberEvent)
    client.add_event_callback(on_message, RoomMessageText)
    task = asyncio.create_task(client.sync_forever(timeout=30000))
    return client, task


async def joined_rooms(homeserver: Homeserver, person: Person, bot: str, count: int) -> list[str]:
    rooms = [person.create_room(invite=[bot], direct=True) for _ in range(count)]
    deadline = time.monotonic() + 60
    for room in rooms:
        while True:
            members = await asyncio.to_thread(
                person.request, "GET", f"/_matrix/client/v3/rooms/{room}/joined_members"
            )
            if bot in members.get("joined", {}):
                break
            assert time.monotonic() < deadline, "the bot did not join"
            await asyncio.sleep(0.05)
    return rooms


async def reply_to(person: Person, room: str, bot: str, event_id: str, sent_at: int) -> float:
    """Milliseconds from ``event_id`` to the bot's next message in ``room`` (server time)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        events = await asyncio.to_thread(person.messages, room, 5)
        for event in reversed(events):
            mine = event.get("sender") == bot and event.get("type") == "m.room.message"
            if mine and event["origin_server_ts"] >= sent_at and event["event_id"] != event_id:
                return float(event["origin_server_ts"] - sent_at)
        await asyncio.sleep(0.01)
    raise AssertionError("no reply")


async def latencies(person: Person, rooms: list[str], bot: str, n: int) -> list[float]:
    values = []
    for i in range(n):
        room = rooms[i % len(rooms)]
        event_id = await asyncio.to_thread(person.say, room, f"ping {i}")
        sent = await asyncio.to_thread(
            person.request, "GET", f"/_matrix/client/v3/rooms/{room}/event/{event_id}"
        )
        values.append(await reply_to(person, room, bot, event_id, sent["origin_server_ts"]))
    return values


async def burst(person: Person, rooms: list[str], bot: str) -> tuple[float, int]:
    start = time.monotonic()
    await asyncio.gather(*(asyncio.to_thread(person.say, room, "burst") for room in rooms))

    def answered(room: str) -> bool:
        return any(
            e.get("sender") == bot and "burst" in (e.get("content") or {}).get("body", "")
            for e in person.messages(room, 5)
        )

    done: set[str] = set()
    deadline = time.monotonic() + 120
    while len(done) < len(rooms) and time.monotonic() < deadline:
        for room in rooms:
            if room not in done and await asyncio.to_thread(answered, room):
                done.add(room)
        await asyncio.sleep(0.05)
    return time.monotonic() - start, len(done)


async def until_synced(service: Service) -> None:
    deadline = time.monotonic() + 30
    while service.matrix is None or service.matrix.state() != "ok":
        assert time.monotonic() < deadline, "chathub did not sync"
        await asyncio.sleep(0.05)


def summary(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{name:8} p50 {statistics.median(ordered):6.1f} ms  p99 {p99:6.1f} ms"


async def run_bare(homeserver: Homeserver, n: int, count: int) -> tuple[list[float], float, int]:
    tag = uuid.uuid4().hex[:6]
    bot, person = homeserver.register(f"barebot{tag}"), homeserver.register(f"bareperson{tag}")
    client, task = await bare_bot(homeserver, bot)
    rooms = await joined_rooms(homeserver, person, bot.user_id, LATENCY_ROOMS)
    await latencies(person, rooms, bot.user_id, 10)  # warm up
    lat = await latencies(person, rooms, bot.user_id, n)
    many = await joined_rooms(homeserver, person, bot.user_id, count)
    took, answered = await burst(person, many, bot.user_id)
    task.cancel()
    await client.close()
    return lat, took, answered


async def run_chathub(homeserver: Homeserver, n: int, count: int) -> tuple[list[float], float, int]:
    tag = uuid.uuid4().hex[:6]
    bot, person = homeserver.register(f"hubbot{tag}"), homeserver.register(f"hubperson{tag}")
    with tempfile.TemporaryDirectory() as tmp:
        settings = {
            "matrix_homeserver": homeserver.url,
            "matrix_user_id": bot.user_id,
            "matrix_access_token": bot.token,
            "matrix_allowed_user_ids": person.user_id,
            "memory_enabled": False,
        }
        config = app_config(migrated_sqlite(Path(tmp) / "bench.db"), Path(tmp) / "ws", **settings)
        # The homeserver's limits are lifted here: so is the account's pace (the room's
        # stays Matrix's default).
        pacing = matrix_pacing(MatrixSettings(matrix_global_per_second=1000, _env_file=None))
        service = Service(
            config,
            models=ModelRegistry([EchoModel(name="zero")]),
            http=False,
            matrix_pacing=pacing,
        )
        await service.start()
        freeze_startup_objects()  # as chathub serve does
        await until_synced(service)
        rooms = await joined_rooms(homeserver, person, bot.user_id, LATENCY_ROOMS)
        await latencies(person, rooms, bot.user_id, 10)
        lat = await latencies(person, rooms, bot.user_id, n)
        many = await joined_rooms(homeserver, person, bot.user_id, count)
        took, answered = await burst(person, many, bot.user_id)
        await service.stop()
        return lat, took, answered


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--rooms", type=int, default=100)
    args = parser.parse_args()
    why = unavailable()
    if why is not None:
        print(f"skipped: {why}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        homeserver = Homeserver(Path(tmp))
        homeserver.start()
        try:
            bare_lat, bare_s, bare_n = await run_bare(homeserver, args.messages, args.rooms)
            hub_lat, hub_s, hub_n = await run_chathub(homeserver, args.messages, args.rooms)
        finally:
            homeserver.stop()
    print(f"message -> reply event (Synapse's timestamps), {args.messages} one at a time")
    print(summary("bare", bare_lat) + "  (matrix-nio: sync_forever, room_send)")
    print(summary("chathub", hub_lat))
    ratio = statistics.median(hub_lat) / max(statistics.median(bare_lat), 1.0)
    print(f"chathub / bare at p50: {ratio:.2f}x (the bar: at most 1.5x)")
    print(f"{args.rooms} rooms at once, one message each:")
    print(f"  bare     {bare_n} answered in {bare_s:6.2f} s")
    print(f"  chathub  {hub_n} answered in {hub_s:6.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
