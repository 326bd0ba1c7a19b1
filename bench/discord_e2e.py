"""Discord end to end: a gateway MESSAGE_CREATE until the bot's reply arrives at the API.

Both bots run here against the fake Discord (tests/fakes/discord_server.py: real HTTP and
a real WebSocket on 127.0.0.1) and a model that answers at once:

- bare: discord.py's ``Client`` echoing every DM with ``channel.send`` (the baseline);
- chathub: ``Service`` with Discord alone (its default pacing), a message stored, the turn
  run, the reply recorded and sent through the delivery pipeline.

Latency: one DM at a time, each from one of as many users who wrote once before (their
conversations exist; no channel's 5-per-5 s bucket is what is measured; at most 40 a
second, under Discord's 50 for a bot, which chathub's pacing keeps), from the push
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

from bot.serve import Service, freeze_startup_objects  # noqa: E402
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


async def until(
    condition: Callable[[], object], within_s: float = 60.0, every_s: float = 0.0005
) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the bot did not answer in time")
        await asyncio.sleep(every_s)


class Replies:
    """When each channel's first reply reached the fake, read from its new calls only (the
    harness shares the event loop with the bot it measures: it must stay cheap)."""

    def __init__(self, fake: FakeDiscordServer) -> None:
        self._fake = fake
        self._seen = len(fake.calls)
        self.first: dict[str, float] = {}

    def update(self) -> int:
        calls = self._fake.calls
        for call in calls[self._seen :]:
            if call.route == MESSAGES and call.status == 200:
                self.first.setdefault(call.params["channel_id"], call.time)
        self._seen = len(calls)
        return len(self.first)


#: DMs come at most this often: under Discord's 50 requests a second for a bot, so what is
#: measured is the path, not chathub's pacing keeping that limit (the burst below is).
SPACING_S = 1 / 40


async def latencies(fake: FakeDiscordServer, users: list[int], n: int) -> list[float]:
    """``n`` DMs, one at a time, each from the next of ``users``; milliseconds each."""
    out: list[float] = []
    for index in range(n):
        if out:
            await asyncio.sleep(max(0.0, SPACING_S - out[-1] / 1000))
        replies = Replies(fake)
        pushed = time.monotonic()
        channel = fake.dm(users[index % len(users)], f"ping {index}")["channel_id"]
        await until(lambda r=replies, c=channel: r.update() and c in r.first)
        out.append((replies.first[channel] - pushed) * 1000)
    return out


async def burst(fake: FakeDiscordServer, users: list[int]) -> tuple[float, int]:
    before = fake.count_429
    replies = Replies(fake)
    started = time.monotonic()
    channels = {fake.dm(user, "all at once")["channel_id"] for user in users}
    await until(lambda: replies.update() and channels <= replies.first.keys(), 300, 0.005)
    return max(replies.first[c] for c in channels) - started, fake.count_429 - before


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
        regulars = users(fake, FIRST_USER, n)
        await latencies(fake, regulars, n)
        lat = await latencies(fake, regulars, n)
        result = await burst(fake, users(fake, FIRST_USER + 5000, channels))
        await bot.close()
        await asyncio.gather(task, return_exceptions=True)
        return lat, result


async def run_chathub(n: int, channels: int) -> tuple[list[float], tuple[float, int]]:
    with tempfile.TemporaryDirectory() as tmp, FakeDiscordServer(token=TOKEN) as fake:
        regulars = users(fake, FIRST_USER, n)
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
        freeze_startup_objects()  # as chathub serve does
        assert service.discord is not None and service.discord.adapter is not None
        adapter = service.discord.adapter
        await until(lambda: adapter.bot_id is not None)
        await latencies(fake, regulars, n)
        lat = await latencies(fake, regulars, n)
        result = await burst(fake, ids[n:])
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
