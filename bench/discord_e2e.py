"""Discord end to end: a gateway MESSAGE_CREATE until the bot's reply arrives at the API.

Both bots run here against the fake Discord (tests/fakes/discord_server.py: real HTTP and
a real WebSocket on 127.0.0.1) and a model that answers at once:

- bare: discord.py's ``Client`` echoing every DM with ``channel.send`` (the baseline);
- chathub: ``Service`` with Discord alone (its default pacing), a message stored, the turn
  run, the reply recorded and sent through the delivery pipeline.

Latency: one DM at a time, round-robin over 25 users who wrote once before (their
conversations exist; no channel's 5-per-5 s bucket is what is measured), from the push
into the gateway until the reply's ``POST /channels/{id}/messages`` reaches the fake: p50
and p99. Then 200 channels at
once: how long until all are answered, and how many responses were 429s (the bar: 0).

    .venv/bin/python -P bench/discord_e2e.py [--messages 200] [--channels 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import discord  # noqa: E402
import yarl  # noqa: E402
from discord.gateway import DiscordWebSocket  # noqa: E402

from bot.serve import Service  # noqa: E402
from engine.llm import ModelRegistry  # noqa: E402
from tests.bot.telegram_contract.conftest import app_config  # noqa: E402
from tests.engine.hub.conftest import EchoModel  # noqa: E402
from tests.fakes.discord_server import FakeDiscordServer  # noqa: E402
from tests.pg import migrated_sqlite  # noqa: E402

TOKEN = "bench-discord-token"
FIRST_USER = 400_000_000_000_000_000
MESSAGES = "POST /channels/{channel_id}/messages"


class Bare(discord.Client):
    def __init__(self) -> None:
        super().__init__(intents=discord.Intents.default(), guild_ready_timeout=0.05)
        self.ready = asyncio.Event()

    async def setup_hook(self) -> None:
        _shards, url, _limits = await self.http.get_bot_gateway()
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)

    async def on_ready(self) -> None:
        self.ready.set()

    async def on_message(self, message: discord.Message) -> None:
        if message.author.id != (self.user.id if self.user else None):
            await message.channel.send(f"echo: {message.content}")


async def until(condition: Callable[[], object], within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the bot did not answer in time")
        await asyncio.sleep(0.0005)


def answered(fake: FakeDiscordServer, channel: str) -> float | None:
    times = [c.time for c in fake.calls_to(MESSAGES) if c.params["channel_id"] == channel]
    return times[0] if times else None


ROUND_ROBIN = 25


async def latencies(fake: FakeDiscordServer, users: list[int], n: int) -> list[float]:
    """``n`` DMs, one at a time, round-robin over ``users``; milliseconds each."""
    out = []
    for index in range(n):
        user = users[index % len(users)]
        before = len(fake.calls_to(MESSAGES))
        pushed = time.monotonic()
        fake.dm(user, f"ping {index}")
        await until(lambda before=before: len(fake.calls_to(MESSAGES)) > before)
        out.append((fake.calls_to(MESSAGES)[before].time - pushed) * 1000)
    return out


async def burst(fake: FakeDiscordServer, users: list[int]) -> tuple[float, int]:
    before = fake.count_429
    started = time.monotonic()
    channels = [fake.dm(user, "all at once")["channel_id"] for user in users]
    await until(lambda: all(answered(fake, c) is not None for c in channels), within_s=300)
    return time.monotonic() - started, fake.count_429 - before


def users(fake: FakeDiscordServer, start: int, count: int) -> list[int]:
    ids = list(range(start, start + count))
    for uid in ids:
        fake.add_user(uid, username=f"u{uid % 100000}")
    return ids


def summary(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{name:8} p50 {statistics.median(ordered):6.2f} ms  p99 {p99:6.2f} ms"


async def run_bare(n: int, channels: int) -> tuple[list[float], tuple[float, int]]:
    with FakeDiscordServer(token=TOKEN) as fake:
        discord.http.Route.BASE = fake.base_url
        bot = Bare()
        task = asyncio.create_task(bot.start(TOKEN))
        await bot.ready.wait()
        regulars = users(fake, FIRST_USER, ROUND_ROBIN)
        await latencies(fake, regulars, ROUND_ROBIN)
        lat = await latencies(fake, regulars, n)
        result = await burst(fake, users(fake, FIRST_USER + 5000, channels))
        await bot.close()
        await asyncio.gather(task, return_exceptions=True)
        return lat, result


async def run_chathub(n: int, channels: int) -> tuple[list[float], tuple[float, int]]:
    with tempfile.TemporaryDirectory() as tmp, FakeDiscordServer(token=TOKEN) as fake:
        regulars = users(fake, FIRST_USER, ROUND_ROBIN)
        ids = [*regulars, *users(fake, FIRST_USER + 5000, channels)]
        config = app_config(
            migrated_sqlite(Path(tmp) / "bench.db"),
            Path(tmp) / "workspace",
            discord_bot_token=TOKEN,
            discord_api_url=fake.base_url,
            discord_allowed_user_ids=",".join(map(str, ids)),
            memory_enabled=False,
        )
        service = Service(config, models=ModelRegistry([EchoModel(name="zero")]), http=False)
        await service.start()
        assert service.discord is not None and service.discord.adapter is not None
        adapter = service.discord.adapter
        await until(lambda: adapter.bot_id is not None)
        await latencies(fake, regulars, ROUND_ROBIN)
        lat = await latencies(fake, regulars, n)
        result = await burst(fake, ids[ROUND_ROBIN:])
        await service.stop()
        return lat, result


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--channels", type=int, default=200)
    args = parser.parse_args()
    bare_lat, (bare_s, bare_429) = await run_bare(args.messages, args.channels)
    hub_lat, (hub_s, hub_429) = await run_chathub(args.messages, args.channels)
    print(f"MESSAGE_CREATE -> first message POST, {args.messages} DMs one at a time")
    print(summary("bare", bare_lat))
    print(summary("chathub", hub_lat))
    ratio = statistics.median(hub_lat) / statistics.median(bare_lat)
    print(f"chathub / bare at p50: {ratio:.2f}x (the bar: at most 1.5x)")
    print(f"{args.channels} channels at once:")
    print(f"  bare     all answered in {bare_s:6.2f} s, {bare_429} responses 429")
    print(f"  chathub  all answered in {hub_s:6.2f} s, {hub_429} responses 429")


if __name__ == "__main__":
    asyncio.run(main())
