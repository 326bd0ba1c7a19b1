"""Slack end to end: an envelope over Socket Mode until the bot's first ``chat.postMessage``.

Both bots run here against the fake Slack (tests/fakes/slack_server.py: the Web API over
real HTTP and Socket Mode over a real WebSocket on 127.0.0.1) and a model that answers at
once:

- bare: a slack-bolt ``AsyncApp`` under its aiohttp Socket Mode handler, answering every
  DM with ``chat.postMessage`` (the baseline);
- chathub: ``Service`` with Slack alone (its default pacing): the message stored before
  the envelope is acknowledged, the turn run, the reply recorded and sent through the
  delivery pipeline.

Latency: one DM at a time, each from one of 90 users who wrote before (at most 15 a
second, under chathub's default 20 for the app), from the push of the envelope until the
reply's ``chat.postMessage`` reaches the fake: p50 and p99. Not more people than that:
chathub asks ``users.info`` for a person's name once, and Slack answers it about 100 times
a minute (Tier 4, the fake too), so with 200 people the warm-up left half the names
unknown and half the measured messages waited for a lookup (a person's first message
does, once per process). The three bots (bare, bare
given a kept-alive session, chathub) run side by side, each on a fake of its own, and
take turns message by message: a slow spell of this shared 2-core machine falls on all of
them alike instead of on whichever ran then. Then 200 threads at once (10 mentions in each
of 20 channels, each starting a thread), one bot after the other: how long until all are
answered, how many were, and how many responses were 429s (the bar: 0; Slack allows about
one message a second per channel, the fake 5 in any 5 s).

    .venv/bin/python -P bench/slack_e2e.py [--messages 200] [--threads 200]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler  # noqa: E402
from slack_bolt.async_app import AsyncApp  # noqa: E402
from slack_sdk.web.async_client import AsyncWebClient  # noqa: E402

from bot.serve import Service, freeze_startup_objects  # noqa: E402
from engine.llm import ModelRegistry  # noqa: E402
from tests.bot.telegram_contract.conftest import app_config  # noqa: E402
from tests.engine.hub.conftest import EchoModel  # noqa: E402
from tests.fakes.slack_server import FakeSlackServer  # noqa: E402
from tests.pg import migrated_sqlite  # noqa: E402

CHANNELS = 20
SPACING_S = 1 / 15
#: People writing DMs: under ``users.info``'s 100 a minute, so the warm-up learns every name.
PEOPLE = 90


def bare_app(fake: FakeSlackServer, session: aiohttp.ClientSession | None = None) -> AsyncApp:
    client = AsyncWebClient(token=fake.bot_token, base_url=fake.api_url, session=session)
    app = AsyncApp(client=client)
    seen: set[str] = set()

    async def answer(event: dict[str, Any], say: Any) -> None:
        key = f"{event['channel']}:{event['ts']}"
        if event.get("subtype") or event.get("bot_id") or key in seen:
            return
        seen.add(key)
        thread = event.get("thread_ts") or (None if event["channel"][0] == "D" else event["ts"])
        with contextlib.suppress(Exception):  # a 429: the bare bot loses the reply
            await say(text=f"echo: {event.get('text', '')}", thread_ts=thread)

    app.event("message")(answer)
    app.event("app_mention")(answer)
    return app


async def until(
    condition: Callable[[], object], within_s: float = 120.0, every_s: float = 0.0005
) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the bot did not answer in time")
        await asyncio.sleep(every_s)


class Replies:
    """When each channel's (each thread's) first reply reached the fake, read from the
    fake's new calls only (the harness shares the event loop with the bot it measures)."""

    def __init__(self, fake: FakeSlackServer) -> None:
        self._fake = fake
        self._seen = len(fake.calls)
        self.first: dict[str, float] = {}

    def update(self) -> int:
        calls = self._fake.calls
        for call in calls[self._seen :]:
            if call.method == "chat.postMessage" and call.error is None:
                where = f"{call.params.get('channel')}:{call.params.get('thread_ts') or ''}"
                self.first.setdefault(where, call.time)
        self._seen = len(calls)
        return len(self.first)


async def one_dm(fake: FakeSlackServer, user: str, text: str) -> float:
    """Milliseconds from the envelope's push until its reply reached the fake."""
    replies = Replies(fake)
    where = f"{fake.dm_channel(user)}:"
    pushed = time.monotonic()
    fake.dm(user, text)
    await until(lambda: replies.update() and where in replies.first)
    return (replies.first[where] - pushed) * 1000


async def latencies(bots: list[Bot], users: list[str], n: int) -> list[list[float]]:
    """``n`` DMs to each bot, the bots taking turns (the first goes first at one message,
    the next at the next), each from the next of ``users``; milliseconds per bot."""
    out: list[list[float]] = [[] for _ in bots]
    for index in range(n):
        for turn in range(len(bots)):
            which = (index + turn) % len(bots)
            await asyncio.sleep(SPACING_S)
            user = users[index % len(users)]
            out[which].append(await one_dm(bots[which].fake, user, f"ping {index}"))
    return out


async def threads(fake: FakeSlackServer, user: str, count: int) -> tuple[float, int, int]:
    before = fake.count_429
    replies = Replies(fake)
    started = time.monotonic()
    wanted = set()
    for index in range(count):
        channel = f"C0BENCH{index % CHANNELS:03d}"
        message = fake.mention(channel, user, f"thread {index}")
        wanted.add(f"{channel}:{message.ts}")
    with contextlib.suppress(TimeoutError):  # what was lost stays unanswered
        await until(lambda: replies.update() and wanted <= replies.first.keys(), 60, 0.005)
    answered = len(wanted & replies.first.keys())
    last = max((replies.first[w] for w in wanted if w in replies.first), default=started)
    return last - started, answered, fake.count_429 - before


def people(fake: FakeSlackServer, count: int) -> list[str]:
    ids = [f"U0BENCH{n:04d}" for n in range(count)]
    for uid in ids:
        fake.add_user(uid, uid.lower())
    for index in range(CHANNELS):
        fake.add_channel(f"C0BENCH{index:03d}", f"bench-{index}", members=ids[:1])
    return ids


def names_asked(fake: FakeSlackServer) -> int:
    return sum(1 for call in fake.calls if call.method == "users.info")


def summary(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{name:8} p50 {statistics.median(ordered):6.2f} ms  p99 {p99:6.2f} ms"


def fake_slack() -> FakeSlackServer:
    return FakeSlackServer(ack_timeout=3.0, retry_delays=(60.0, 60.0, 60.0))


@dataclass
class Bot:
    name: str
    fake: FakeSlackServer


@contextlib.asynccontextmanager
async def bare_bot(fake: FakeSlackServer, *, keep_alive: bool) -> AsyncIterator[None]:
    session = aiohttp.ClientSession() if keep_alive else None
    handler = AsyncSocketModeHandler(bare_app(fake, session), fake.app_token)
    await handler.connect_async()
    await until(lambda: fake.ready_connections == 1)
    try:
        yield
    finally:
        await handler.close_async()
        if session is not None:
            await session.close()


@contextlib.asynccontextmanager
async def chathub_bot(fake: FakeSlackServer, users: list[str], home: Path) -> AsyncIterator[None]:
    config = app_config(
        migrated_sqlite(home / "bench.db"),
        home / "workspace",
        slack_bot_token=fake.bot_token,
        slack_app_token=fake.app_token,
        slack_api_url=fake.api_url,
        slack_allowed_user_ids=",".join(users),
        memory_enabled=False,
    )
    service = Service(config, models=ModelRegistry([EchoModel(name="zero")]), http=False)
    await service.start()
    freeze_startup_objects()  # as chathub serve does
    await until(lambda: fake.ready_connections == 1)
    try:
        yield
    finally:
        await service.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--threads", type=int, default=200)
    args = parser.parse_args()
    n = args.messages
    with (
        tempfile.TemporaryDirectory() as tmp,
        fake_slack() as bare_fake,
        fake_slack() as kept_fake,
        fake_slack() as hub_fake,
    ):
        bots = [Bot("bare", bare_fake), Bot("bare+ka", kept_fake), Bot("chathub", hub_fake)]
        users = people(bare_fake, PEOPLE)
        for bot in bots[1:]:
            people(bot.fake, PEOPLE)  # the same people on every fake
        async with (
            bare_bot(bare_fake, keep_alive=False),
            bare_bot(kept_fake, keep_alive=True),
            chathub_bot(hub_fake, users, Path(tmp)),
        ):
            await latencies(bots, users, n)  # every conversation exists, every name known
            asked = names_asked(hub_fake)
            bare_lat, kept_lat, hub_lat = await latencies(bots, users, n)
            lookups = names_asked(hub_fake) - asked
            bare_s, bare_n, bare_429 = await threads(bare_fake, users[0], args.threads)
            hub_s, hub_n, hub_429 = await threads(hub_fake, users[0], args.threads)
    print(f"envelope -> first chat.postMessage, {n} DMs to each bot, taking turns")
    print(summary("bare", bare_lat) + "  (slack-sdk's default: a connection per call)")
    print(summary("bare+ka", kept_lat) + "  (given one aiohttp session, as chathub is)")
    print(summary("chathub", hub_lat))
    ratio = statistics.median(hub_lat) / statistics.median(bare_lat)
    kept = statistics.median(hub_lat) / statistics.median(kept_lat)
    print(f"chathub / bare at p50: {ratio:.2f}x (the bar: at most 1.5x); / bare+ka {kept:.2f}x")
    print(f"  names asked of Slack (users.info) while measuring: {lookups} (every one known)")
    print(f"{args.threads} threads at once ({CHANNELS} channels):")
    print(f"  bare     {bare_n} answered in {bare_s:6.2f} s, {bare_429} responses 429")
    print(f"  chathub  {hub_n} answered in {hub_s:6.2f} s, {hub_429} responses 429")


if __name__ == "__main__":
    asyncio.run(main())
