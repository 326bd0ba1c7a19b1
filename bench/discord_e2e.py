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
and p99. The two bots run side by side, each in a process of its own with a fake of its
own (discord.py keeps its API base in a class attribute, so two bots cannot share a
process), and take turns message by message: a slow spell of this shared 2-core machine
falls on both alike instead of on whichever ran then. Then 200 channels at once, one bot
after the other: how long until all are answered, and how many responses were 429s (the
bar: 0).

    .venv/bin/python -P bench/discord_e2e.py [--messages 200] [--channels 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
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
BURST_USER = FIRST_USER + 5000
MESSAGES = "POST /channels/{channel_id}/messages"
BOTS = ("bare", "chathub")


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


#: DMs come at most this often to each bot: under Discord's 50 requests a second for a bot,
#: so what is measured is the path, not chathub's pacing keeping that limit (the burst
#: below is).
SPACING_S = 1 / 40


async def one_dm(fake: FakeDiscordServer, user: int, text: str) -> float:
    """Milliseconds from the DM's push into the gateway until its reply reached the fake."""
    replies = Replies(fake)
    pushed = time.monotonic()
    channel = fake.dm(user, text)["channel_id"]
    await until(lambda: replies.update() and channel in replies.first)
    return (replies.first[channel] - pushed) * 1000


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


@contextlib.asynccontextmanager
async def bare_bot(fake: FakeDiscordServer) -> AsyncIterator[None]:
    discord.http.Route.BASE = fake.base_url
    bot = Bare()
    task = asyncio.create_task(bot.start(TOKEN))
    await bot.ready.wait()
    try:
        yield
    finally:
        await bot.close()
        await asyncio.gather(task, return_exceptions=True)


@contextlib.asynccontextmanager
async def chathub_bot(
    fake: FakeDiscordServer, allowed: list[int], home: Path
) -> AsyncIterator[None]:
    config = app_config(
        migrated_sqlite(home / "bench.db"),
        home / "workspace",
        discord_bot_token=TOKEN,
        discord_api_url=fake.base_url,
        discord_allowed_user_ids=",".join(map(str, allowed)),
        memory_enabled=False,
    )
    service = Service(config, models=ModelRegistry([EchoModel(name="zero")]), http=False)
    await service.start()
    freeze_startup_objects()  # as chathub serve does
    assert service.discord is not None and service.discord.adapter is not None
    adapter = service.discord.adapter
    await until(lambda: adapter.bot.is_ready())  # on the gateway, its guilds known
    try:
        yield
    finally:
        await service.stop()


async def serve(kind: str, n: int, channels: int) -> None:
    """One bot and its fake, doing what the lines on stdin say ("dm <index>", "burst")."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    with tempfile.TemporaryDirectory() as tmp, FakeDiscordServer(token=TOKEN) as fake:
        regulars = users(fake, FIRST_USER, n)
        crowd = users(fake, BURST_USER, channels)
        bot = bare_bot(fake) if kind == "bare" else chathub_bot(fake, regulars + crowd, Path(tmp))
        async with bot:
            print("ready", flush=True)
            while line := (await reader.readline()).decode().split():
                if line[0] == "dm":
                    index = int(line[1])
                    print(await one_dm(fake, regulars[index % n], f"ping {index}"), flush=True)
                elif line[0] == "burst":
                    seconds, count_429 = await burst(fake, crowd)
                    print(seconds, count_429, flush=True)


class Child:
    """A bot's process, asked one thing at a time."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @classmethod
    async def start(cls, kind: str, n: int, channels: int) -> Child:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-P", __file__, "--serve", kind,
            "--messages", str(n), "--channels", str(channels),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        child = cls(process)
        if await child.ask(None) != ["ready"]:
            raise RuntimeError(f"the {kind} bot did not start")
        return child

    async def ask(self, line: str | None) -> list[str]:
        assert self._process.stdin is not None and self._process.stdout is not None
        if line is not None:
            self._process.stdin.write(f"{line}\n".encode())
            await self._process.stdin.drain()
        return (await self._process.stdout.readline()).decode().split()

    async def stop(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        await self._process.wait()


async def latencies(bots: list[Child], n: int) -> list[list[float]]:
    """``n`` DMs to each bot, the bots taking turns (the first goes first at one message,
    the next at the next); milliseconds per bot."""
    out: list[list[float]] = [[] for _ in bots]
    for index in range(n):
        for turn in range(len(bots)):
            which = (index + turn) % len(bots)
            await asyncio.sleep(SPACING_S / len(bots))
            out[which].append(float((await bots[which].ask(f"dm {index}"))[0]))
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--channels", type=int, default=200)
    parser.add_argument("--serve", choices=BOTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        await serve(args.serve, args.messages, args.channels)
        return
    bots = [await Child.start(kind, args.messages, args.channels) for kind in BOTS]
    try:
        await latencies(bots, args.messages)  # every conversation exists
        bare_lat, hub_lat = await latencies(bots, args.messages)
        print(
            f"MESSAGE_CREATE -> first message POST, {args.messages} DMs to each bot, taking turns"
        )
        print(summary("bare", bare_lat))
        print(summary("chathub", hub_lat))
        ratio = statistics.median(hub_lat) / statistics.median(bare_lat)
        print(f"chathub / bare at p50: {ratio:.2f}x (the bar: at most 1.5x)", flush=True)
        if not args.channels:  # --channels 0: the latency alone
            return
        (bare_s, bare_429), (hub_s, hub_429) = [
            [float(v) for v in await bot.ask("burst")] for bot in bots
        ]
    finally:
        for bot in bots:
            await bot.stop()
    print(f"{args.channels} channels at once:")
    print(f"  bare     all answered in {bare_s:6.2f} s, {int(bare_429)} responses 429")
    print(f"  chathub  all answered in {hub_s:6.2f} s, {int(hub_429)} responses 429")


if __name__ == "__main__":
    asyncio.run(main())
