"""Telegram end to end: latency from an update to the first ``sendMessage``, per binding.

For each binding (python-telegram-bot, aiogram) the whole service runs (``bot.serve.Service``:
engine, ChatHub, Telegram adapter, long polling) against the fake Bot API
(``tests/fakes/telegram_server.py``, real HTTP on 127.0.0.1, in a child process of its own —
Telegram is remote, so it must not share this process's GIL) with a zero-latency model, SQLite in a temporary directory and ``AllowAll``. The
baseline is the same library's own framework with a bare echo handler (ptb ``Application``
+ ``MessageHandler``; aiogram ``Dispatcher`` + ``Router``), polling the same fake.

Latency, measured in the fake's process on one clock: ``time.monotonic()`` just before the
update is pushed, to the arrival of the first ``sendMessage`` to that chat
(``sendChatAction`` does not count).

* 1 chat: ``--messages`` messages, each sent once the previous one is answered.
* 200 chats: one message per chat pushed at once, ``--rounds`` times (all answered
  before the next round); one latency per chat and round.

A warm-up (a few messages; one round for the concurrent case) runs first and is not
counted. Telegram pacing is disabled for the chathub rows (no per-chat interval, 1e6/s
overall) unless marked "default pacing": those rows show what the 30 msg/s overall limit
does to a 200-chat burst. The breakdown (1 chat, a separate instrumented pass) shows where
chathub's time goes between the update and the reply.

Goal (issue 15): chathub within 1.5x of the binding's bare echo round trip (p50). These
latency tables run with ``--latency`` (about 3 minutes on their own).

The default run is issue 20's bar, with DEFAULT pacing (``Pacing()``) and the fake
enforcing Telegram's limits (``tests/fakes/telegram_limits.py``: 429 with ``retry_after``,
counted), for each binding against its bare echo bot, medians of ``--runs`` (3):

* conversation: 30 messages in one chat, each 200 ms after the previous reply (the runs
  side by side in their own chats, 70 ms apart, unless ``--separate-runs``); p50 of the
  first 5 replies and of all 30, the time each reply spent in ``Pacer.turn`` against what
  the private bucket requires (a simulated ``Bucket`` fed with when each reply was ready),
  and ``Outbound.pacer.waited_s``;
* a 3-message turn in a quiet chat: a tool that needs no approval (its progress line is
  a message), then an answer in two parts; push -> the third ``sendMessage``, against the
  bare bot's three replies;
* a 100-chat burst: one message each at once; until all are answered, against 100 / the
  overall rate;
* start-up: a real process each (``python -m bot.cli serve`` with the fake OpenAI-compatible
  model and ``TELEGRAM_LIBRARY``; ``bench/telegram_bare.py``), from its start to its first
  ``getUpdates``; its RSS after 30 chats' messages are answered;
* every 429 the fake answered (the bar: 0), and the fullest each limit's window was.

    python bench/telegram_e2e.py [--quick] [--runs 3] [--separate-runs] [--latency]
        [--messages 100] [--chats 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fakes

from bench.telegram_bare import replies as bare_replies
from bot.delivery import SEND, CallKind, Pacing
from bot.delivery.pacing import Bucket, Pacer, PacingPolicy, Rate, Ticket
from bot.serve import Service, freeze_startup_objects
from bot.settings import load_settings
from bot.telegram.bindings.factory import make_bot_api
from engine.config import AppConfig, EngineConfig, HubConfig
from engine.llm import (
    LlmResponse,
    Message,
    ModelRegistry,
    ScriptedModel,
    ToolCallRequest,
    ToolSchema,
    Usage,
)
from engine.session import AllowAll
from engine.tools import ToolCategory
from tests.bot.process import free_port, service_env
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import Call, FakeTelegramServer, Json

LIBRARIES = ("ptb", "aiogram")
TOKEN = "123456:BENCH-TOKEN"
FIRST_CHAT = 10_001
GOAL_RATIO = 1.5
WARMUP_MESSAGES = 5
ANSWER = "ok"

SETTLE_S = 0.2
# Every bucket and cap unlimited, the overall one included.
NO_PACING = Pacing.unpaced()
THREADS = {"MainThread": "event loop", "chathub-sqlite": "SQLite"}
CPU_COLUMNS = ("event loop", "SQLite", "fake API", "other")


class AbandonedRequests(logging.Filter):
    """Counts (and hides) the fake's tracebacks for requests the client gave up mid-body."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if type(exc).__name__ == "ClientDisconnect":
            self.count += 1
            return False
        return True


ABANDONED = AbandonedRequests()


def thread_cpu(fake_pid: int | None = None) -> dict[str, float]:
    """CPU seconds (user + system) per thread of this process, grouped by ``THREADS``,
    and of the fake Bot API's process."""
    ticks = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = defaultdict(float)

    def seconds(path: str) -> float | None:
        try:
            with open(path) as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / ticks

    for thread in threading.enumerate():
        used = seconds(f"/proc/self/task/{thread.native_id}/stat")
        if used is not None:
            totals[THREADS.get(thread.name, "other")] += used
    if fake_pid is not None:
        totals["fake API"] += seconds(f"/proc/{fake_pid}/stat") or 0.0
    return totals


class InstantModel(ScriptedModel):
    """Answers every request at once with a short text; records nothing."""

    def __init__(self) -> None:
        super().__init__(name="instant", record=False)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, on_delta: Any = None
    ) -> LlmResponse:
        if on_delta is not None:
            on_delta(ANSWER)
        return LlmResponse(content=ANSWER, usage=Usage(10, 1), model=self.name)


# -- the fake, in a process of its own ------------------------------------------------------


@dataclass
class _Pushed:
    at: float
    expect: int  # replies (sendMessage) to wait for
    seen: int = 0


def _fake_process(commands: Connection, events: Connection, enforce_limits: bool) -> None:
    """The child: the fake Bot API, pushing on command and reporting each reply's latency.

    Latency is measured here, on one clock: from just before the update is pushed to the
    arrival of the ``expect``-th ``sendMessage`` to that chat (the first, unless asked for
    more). With ``enforce_limits`` the fake answers calls over Telegram's limits with 429
    (``tests/fakes/telegram_limits.py``) and only accepted sends count as replies.
    """
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("uvicorn.error").addFilter(ABANDONED)
    pushed: dict[int, _Pushed] = {}
    lock = threading.Lock()
    first_poll: list[bool] = []  # armed: report the next getUpdates

    def on_send(method: str, params: Json, at: float) -> None:  # the fake's thread
        if method.lower() != "sendmessage":
            return
        with contextlib.suppress(TypeError, ValueError):
            chat_id = int(params.get("chat_id"))  # type: ignore[arg-type]
            with lock:
                waiting = pushed.get(chat_id)
                if waiting is None:
                    return
                waiting.seen += 1
                if waiting.seen < waiting.expect:
                    return
                del pushed[chat_id]
            events.send(("reply", chat_id, at - waiting.at, waiting.at))

    def on_call(call: Call) -> None:  # the fake's thread
        if call.method.lower() == "getupdates":
            if first_poll and first_poll.pop():
                events.send(("polled", call.time))
        elif not enforce_limits:
            on_send(call.method, call.params, call.time)

    fake = FakeTelegramServer(enforce_limits=enforce_limits)
    fake.calls = _CallLog(on_call)
    if fake.limits is not None:
        limits, record = fake.limits, fake.limits.record

        def accepted(method: str, params: Json) -> None:  # the lock held
            record(method, params)
            on_send(method, params, time.monotonic())

        limits.record = accepted  # type: ignore[method-assign]
    fake.start()
    events.send(("ready", fake.base_url))
    try:
        while (command := commands.recv()) is not None:
            if command == "stats":
                stats: dict[str, Any] = {"429": 0, "peak": {}, "rejected": []}
                if fake.limits is not None:
                    stats["429"] = fake.limits.count_429
                    stats["peak"] = dict(fake.limits.peak)
                    stats["rejected"] = [(r.method, r.rule) for r in fake.limits.rejected[:5]]
                events.send(("stats", stats))
            elif command == "watch-poll":
                first_poll.append(True)
            else:
                for chat_id, text, expect in command:
                    with lock:
                        pushed[chat_id] = _Pushed(time.monotonic(), expect)
                    fake.user_message(chat_id, chat_id, text)
    finally:
        fake.stop()


class _CallLog(list[Call]):
    """The fake's call list, telling ``on_call`` of every call as it arrives."""

    def __init__(self, on_call: Callable[[Call], None]) -> None:
        super().__init__()
        self._on_call = on_call

    def append(self, call: Call) -> None:
        super().append(call)
        self._on_call(call)


class WatchedTelegram:
    """The fake Bot API in a child process (as Telegram is remote: no shared GIL).

    ``push`` sends a user message; its future is the latency in seconds.
    """

    def __init__(self, *, enforce_limits: bool = False) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[int, asyncio.Future[float]] = {}
        self._answers: dict[str, asyncio.Future[Any]] = {}
        #: When each chat's awaited reply was pushed (the fake's clock: CLOCK_MONOTONIC).
        self.pushed_at: dict[int, float] = {}
        context = multiprocessing.get_context("spawn")
        child_commands, self._commands = context.Pipe(duplex=False)  # (receive, send)
        self._events, child_events = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_fake_process,
            args=(child_commands, child_events, enforce_limits),
            daemon=True,
        )
        self.base_url = ""

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def start(self) -> WatchedTelegram:
        self._process.start()
        tag, self.base_url = self._events.recv()
        assert tag == "ready"
        if self._loop is not None:
            self._loop.add_reader(self._events.fileno(), self._on_events)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self._events.fileno())
        with contextlib.suppress(OSError):
            self._commands.send(None)
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()

    def _on_events(self) -> None:
        while self._events.poll():
            event = self._events.recv()
            if event[0] == "reply":
                _, chat_id, latency, pushed_at = event
                self.pushed_at[chat_id] = pushed_at
                future = self._waiting.pop(chat_id, None)
            else:  # "stats", "polled": answers to a command
                future = self._answers.pop(event[0], None)
                latency = event[1]
            if future is not None and not future.done():
                future.set_result(latency)

    def push(self, chat_id: int, text: str, *, expect: int = 1) -> asyncio.Future[float]:
        """A user message; its future is the latency to the ``expect``-th reply."""
        return self.push_many([(chat_id, text)], expect=expect)[0]

    def push_many(
        self, messages: Sequence[tuple[int, str]], *, expect: int = 1
    ) -> list[asyncio.Future[float]]:
        """Push several user messages in one go (a burst); a latency future each."""
        assert self._loop is not None
        futures = []
        for chat_id, _ in messages:
            future: asyncio.Future[float] = self._loop.create_future()
            self._waiting[chat_id] = future
            futures.append(future)
        self._commands.send([(chat, text, expect) for chat, text in messages])
        return futures

    def _ask(self, command: str, answer: str) -> asyncio.Future[Any]:
        assert self._loop is not None
        future: asyncio.Future[Any] = self._loop.create_future()
        self._answers[answer] = future
        self._commands.send(command)
        return future

    async def stats(self) -> dict[str, Any]:
        """The fake's 429 count and the fullest each rate-limit window has been."""
        return await asyncio.wait_for(self._ask("stats", "stats"), 10)

    def next_poll(self) -> asyncio.Future[float]:
        """When the next ``getUpdates`` arrives (the fake's clock)."""
        return self._ask("watch-poll", "polled")


# -- the systems under test ------------------------------------------------------------------


@contextlib.asynccontextmanager
async def chathub(
    library: str,
    fake: WatchedTelegram,
    chats: Sequence[int],
    pacing: Pacing,
    *,
    model: Any = None,
    tools: Sequence[Any] = (),
) -> AsyncIterator[Service]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            database_url=f"sqlite+aiosqlite:///{tmp}/chathub.db",
            chathub_workspace=Path(tmp) / "workspace",
            chathub_timezone="UTC",
            telegram_bot_token=TOKEN,
            telegram_api_url=fake.base_url,
            telegram_allowed_user_ids=",".join(str(chat) for chat in chats),
            _env_file=None,
        )
        config = AppConfig(settings=settings, models=(), engine=EngineConfig(), hub=HubConfig())
        service = Service(
            config,
            models=ModelRegistry([model or InstantModel()]),
            policy=AllowAll(),
            api=make_bot_api(library, TOKEN, fake.base_url),
            pacing=pacing,
            http=False,
        )
        await service.start()
        assert service.engine is not None
        for tool in tools:
            service.engine.tools.register(tool)
        freeze_startup_objects()  # as `chathub serve` does
        try:
            yield service
            await asyncio.sleep(SETTLE_S)  # the reply's bookkeeping, before stopping
        finally:
            await service.stop()


@contextlib.asynccontextmanager
async def ptb_echo(fake: WatchedTelegram, concurrent: bool) -> AsyncIterator[None]:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        for _ in range(bare_replies(update.message.text)):
            await update.message.reply_text(update.message.text)

    root = fake.base_url
    application = (
        Application.builder()
        .token(TOKEN)
        .base_url(f"{root}/bot")
        .base_file_url(f"{root}/file/bot")
        .concurrent_updates(concurrent)
        .build()
    )
    application.add_handler(MessageHandler(filters.TEXT, echo))
    await application.initialize()
    await application.start()
    assert application.updater is not None
    await application.updater.start_polling(poll_interval=0.0, timeout=10)
    try:
        yield
        await asyncio.sleep(SETTLE_S)  # the last replies' answers, before stopping
    finally:
        await application.updater.stop()
        await application.stop()
        await application.shutdown()


@contextlib.asynccontextmanager
async def aiogram_echo(fake: WatchedTelegram) -> AsyncIterator[None]:
    from aiogram import Bot, Dispatcher, Router
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.types import Message as TgMessage

    router = Router()

    @router.message()
    async def echo(message: TgMessage) -> None:
        for _ in range(bare_replies(message.text or "")):
            await message.answer(message.text or "?")

    dispatcher = Dispatcher()
    dispatcher.include_router(router)
    bot = Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(fake.base_url)))
    polling = asyncio.create_task(
        dispatcher.start_polling(bot, handle_signals=False, polling_timeout=10)
    )
    try:
        yield
        await asyncio.sleep(SETTLE_S)  # the last replies' answers, before stopping
    finally:
        with contextlib.suppress(RuntimeError):  # polling never started
            await dispatcher.stop_polling()
        await asyncio.wait_for(polling, 10)


def echo_bot(library: str, fake: WatchedTelegram, concurrent: bool) -> Any:
    return ptb_echo(fake, concurrent) if library == "ptb" else aiogram_echo(fake)


# -- scenarios -------------------------------------------------------------------------------


@dataclass
class Sample:
    latencies_ms: list[float] = field(default_factory=list)
    missing: int = 0
    cpu_ms: dict[str, float] = field(default_factory=dict)  # per message, by thread
    round_s: float = 0.0  # wall time of a round (all chats answered)

    def percentile(self, p: float) -> float:
        data = sorted(self.latencies_ms)
        if not data:
            return float("nan")
        return data[min(len(data) - 1, int(len(data) * p))]


def merge(samples: Sequence[Sample]) -> Sample:
    """One sample from blocks: every latency, the mean CPU and round time."""
    merged = Sample()
    for sample in samples:
        merged.latencies_ms.extend(sample.latencies_ms)
        merged.missing += sample.missing
        merged.round_s += sample.round_s / len(samples)
        for name, value in sample.cpu_ms.items():
            merged.cpu_ms[name] = merged.cpu_ms.get(name, 0.0) + value / len(samples)
    return merged


async def sequential(fake: WatchedTelegram, messages: int, timeout_s: float) -> Sample:
    """One chat; the next message once the previous one is answered."""
    sample = Sample()
    for i in range(WARMUP_MESSAGES + messages):
        try:
            latency = await asyncio.wait_for(fake.push(FIRST_CHAT, f"message {i}"), timeout_s)
        except TimeoutError:
            sample.missing += 1
            continue
        if i >= WARMUP_MESSAGES:
            sample.latencies_ms.append(latency * 1000)
    return sample


async def burst(
    fake: WatchedTelegram,
    chats: Sequence[int],
    rounds: int,
    timeout_s: float,
    *,
    warmup: bool = True,
    after_warmup: Callable[[], None] | None = None,
) -> Sample:
    """One message per chat pushed at once, ``rounds`` times; a warm-up round first."""
    sample = Sample()
    cpu_before: dict[str, float] = {}
    started = 0.0
    for r in range(-1 if warmup else 0, rounds):
        if r == 0:
            if after_warmup is not None:
                after_warmup()
            cpu_before, started = thread_cpu(fake.pid), time.monotonic()
        futures = fake.push_many([(chat, f"round {r} in {chat}") for chat in chats])
        done, pending = await asyncio.wait(futures, timeout=timeout_s)
        for future in pending:
            future.cancel()
        if r >= 0:
            sample.latencies_ms.extend(f.result() * 1000 for f in done)
            sample.missing += len(pending)
    sample.round_s = (time.monotonic() - started) / max(rounds, 1)
    cpu_after, messages = thread_cpu(fake.pid), max(len(chats) * rounds, 1)
    sample.cpu_ms = {
        name: (cpu_after.get(name, 0.0) - cpu_before.get(name, 0.0)) * 1000 / messages
        for name in CPU_COLUMNS
    }
    return sample


@dataclass
class Row:
    library: str
    scenario: str
    chathub: Sample
    baseline: Sample | None
    note: str = ""


async def measure(library: str, args: argparse.Namespace) -> list[Row]:
    loop = asyncio.get_running_loop()
    chats = [FIRST_CHAT + n for n in range(args.chats)]
    rows: list[Row] = []

    async def on_fake(work: Callable[[WatchedTelegram], Any]) -> Any:
        fake = WatchedTelegram()
        fake.watch(loop)
        fake.start()
        try:
            return await work(fake)
        finally:
            fake.stop()

    messages = -(-args.messages // args.blocks)  # per block
    rounds = -(-args.rounds // args.blocks)

    async def hub_sequential(fake: WatchedTelegram) -> Sample:
        async with chathub(library, fake, chats, NO_PACING):
            return await sequential(fake, messages, args.timeout)

    async def echo_sequential(fake: WatchedTelegram) -> Sample:
        async with echo_bot(library, fake, concurrent=False):
            return await sequential(fake, messages, args.timeout)

    async def hub_burst(fake: WatchedTelegram) -> Sample:
        async with chathub(library, fake, chats, NO_PACING):
            return await burst(fake, chats, rounds, args.timeout)

    async def echo_burst(fake: WatchedTelegram) -> Sample:
        async with echo_bot(library, fake, concurrent=True):
            return await burst(fake, chats, rounds, args.timeout)

    async def hub_burst_paced(fake: WatchedTelegram) -> Sample:
        async with chathub(library, fake, chats, NO_PACING) as service:
            assert service.adapter is not None
            outbound = service.adapter.outbound

            def pace() -> None:  # warm up unpaced, then measure with Telegram's limits
                outbound.pacing = Pacing()
                outbound.pacer = Pacer(
                    outbound.pacing.policy, clock=time.monotonic, is_group=outbound.client.is_group
                )

            return await burst(fake, chats, 1, args.timeout + 60, after_warmup=pace)

    async def alternating(hub: Any, echo: Any) -> tuple[Sample, Sample]:
        """Blocks in ABBA order (hub, echo, echo, hub, ...): the machine's drift during the
        run weighs on both systems alike."""
        hubs: list[Sample] = []
        echos: list[Sample] = []
        for block in range(args.blocks):
            pair = [(hub, hubs), (echo, echos)]
            for work, into in pair if block % 2 == 0 else reversed(pair):
                into.append(await on_fake(work))
        return merge(hubs), merge(echos)

    rows.append(Row(library, "1 chat", *await alternating(hub_sequential, echo_sequential)))
    rows.append(Row(library, f"{args.chats} chats", *await alternating(hub_burst, echo_burst)))
    if args.paced:
        rows.append(
            Row(
                library,
                f"{args.chats} chats, DEFAULT PACING",
                await on_fake(hub_burst_paced),
                None,
                "1 round; 30 msg/s overall",
            )
        )
    return rows


# -- where chathub's time goes ---------------------------------------------------------------


@dataclass
class Trace:
    marks: list[tuple[float, str]] = field(default_factory=list)
    db: list[tuple[float, float, str]] = field(default_factory=list)


def _instrument(service: Service, trace: Trace) -> None:
    """Wrap (per instance) the steps on the way from an update to the reply."""
    assert service.adapter is not None and service.engine is not None
    store, hub, outbound = service.adapter.store, service.adapter.hub, service.adapter.outbound

    def around(obj: Any, name: str) -> None:
        inner = getattr(obj, name)

        async def wrapper(*a: Any, **kw: Any) -> Any:
            trace.marks.append((time.monotonic(), f"{name}>"))
            try:
                return await inner(*a, **kw)
            finally:
                trace.marks.append((time.monotonic(), f"{name}<"))

        setattr(obj, name, wrapper)

    around(store, "accept_polled")
    around(hub, "send_message")
    around(outbound, "deliver_row")

    db = service.engine.store.db
    run = db.run

    async def timed_run(fn: Any, *a: Any, **kw: Any) -> Any:
        started = time.monotonic()
        try:
            return await run(fn, *a, **kw)
        finally:
            trace.db.append((started, time.monotonic(), getattr(fn, "__name__", "?")))

    db.run = timed_run  # type: ignore[method-assign]


@dataclass
class Breakdown:
    library: str
    phases: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    db_units: list[int] = field(default_factory=list)
    db_ms: list[float] = field(default_factory=list)
    db_names: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    total: list[float] = field(default_factory=list)


PHASES = (
    ("getUpdates wake-up + binding parse", "push", "accept_polled>"),
    # SQLite: the update rows are queued to ride with the next unit of work (the turn's first)
    ("accept_polled (queue the update row)", "accept_polled>", "accept_polled<"),
    ("adapter: parse, open cards, lane", "accept_polled<", "send_message>"),
    ("hub.send_message (accept, idle chat)", "send_message>", "send_message<"),
    # update row + user row + handled mark, the model, the answer (+ outbox rows), Done, render
    ("turn: 2 commits, model, Done", "send_message<", "deliver_row>"),
    ("pacing + binding sendMessage", "deliver_row>", "send"),
)


async def breakdown(library: str, messages: int, timeout_s: float) -> Breakdown:
    loop = asyncio.get_running_loop()
    result = Breakdown(library)
    fake = WatchedTelegram()
    fake.watch(loop)
    fake.start()
    try:
        async with chathub(library, fake, [FIRST_CHAT], NO_PACING) as service:
            trace = Trace()
            _instrument(service, trace)
            for i in range(WARMUP_MESSAGES + messages):
                del trace.marks[:]
                del trace.db[:]
                pushed = time.monotonic()
                latency = await asyncio.wait_for(fake.push(FIRST_CHAT, f"m {i}"), timeout_s)
                sent = pushed + latency
                await asyncio.sleep(0.01)  # let the reply's bookkeeping finish before the next
                if i < WARMUP_MESSAGES:
                    continue
                first: dict[str, float] = {"push": pushed, "send": sent}
                for at, mark in trace.marks:
                    first.setdefault(mark, at)
                if any(a not in first or b not in first for _, a, b in PHASES):
                    continue
                result.total.append(latency * 1000)
                for name, a, b in PHASES:
                    result.phases[name].append((first[b] - first[a]) * 1000)
                on_path = [(s, e, n) for s, e, n in trace.db if s < sent]
                result.db_units.append(len(on_path))
                result.db_ms.append(sum(min(e, sent) - s for s, e, _ in on_path) * 1000)
                for _, _, name in on_path:
                    result.db_names[name] += 1
    finally:
        fake.stop()
    return result


# -- report ------------------------------------------------------------------------------------


def fmt(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.2f}"


def report(rows: list[Row], args: argparse.Namespace) -> None:
    print()
    header = (
        f"{'library':<8} | {'scenario':<26} | {'p50 ms':>8} | {'p99 ms':>8} | "
        f"{'base p50':>8} | {'base p99':>8} | {'ratio p50':>9} | {'ratio p99':>9} | goal"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        hub50, hub99 = row.chathub.percentile(0.5), row.chathub.percentile(0.99)
        base50 = row.baseline.percentile(0.5) if row.baseline else None
        base99 = row.baseline.percentile(0.99) if row.baseline else None
        ratio50 = hub50 / base50 if base50 else None
        ratio99 = hub99 / base99 if base99 else None
        if ratio50 is None:
            goal = f"n/a ({row.note})" if row.note else "n/a"
        else:
            goal = f"<= {GOAL_RATIO}x: {'met' if ratio50 <= GOAL_RATIO else 'MISSED'}"
        ratio50_text = "-" if ratio50 is None else f"{ratio50:.2f}x"
        ratio99_text = "-" if ratio99 is None else f"{ratio99:.2f}x"
        print(
            f"{row.library:<8} | {row.scenario:<26} | {fmt(hub50):>8} | {fmt(hub99):>8} | "
            f"{fmt(base50):>8} | {fmt(base99):>8} | {ratio50_text:>9} | {ratio99_text:>9} | "
            f"{goal}"
        )
    print()
    print(
        "Many-chat case: CPU per message by thread (ms; /proc, 10 ms ticks) and wall time "
        "per round (all chats answered); the fake Bot API runs in its own process"
    )
    cpu_rows = [
        (row, label, sample)
        for row in rows
        if row.chathub.cpu_ms
        for label, sample in (("chathub", row.chathub), ("echo", row.baseline))
        if sample is not None
    ]
    head = f"{'library':<8} | {'scenario':<26} | {'system':<8} | " + " | ".join(
        f"{name:>10}" for name in CPU_COLUMNS
    )
    print(f"{head} | {'round ms':>9}")
    print("-" * (len(head) + 12))
    for row, label, sample in cpu_rows:
        cells = " | ".join(f"{sample.cpu_ms.get(name, 0.0):>10.2f}" for name in CPU_COLUMNS)
        print(
            f"{row.library:<8} | {row.scenario:<26} | {label:<8} | {cells} | "
            f"{sample.round_s * 1000:>9.0f}"
        )
    for row in rows:
        for label, sample in (("chathub", row.chathub), ("baseline", row.baseline)):
            if sample is not None and sample.missing:
                print(
                    f"  {row.library} {row.scenario} {label}: {sample.missing} unanswered "
                    f"within {args.timeout:.0f} s"
                )


def report_breakdown(results: list[Breakdown]) -> None:
    print()
    print("Where chathub's time goes (1 chat, instrumented pass; mean / p50 in ms):")
    width = 20
    print(f"{'step':<38} | " + " | ".join(f"{b.library:>{width}}" for b in results))
    print("-" * (41 + (width + 3) * len(results)))

    def cell(values: list[float]) -> str:
        if not values:
            return "-"
        return f"{statistics.fmean(values):.2f} / {statistics.median(values):.2f}"

    for name, _, _ in PHASES:
        cells = " | ".join(f"{cell(b.phases.get(name, [])):>{width}}" for b in results)
        print(f"{name:<38} | {cells}")
    print(
        f"{'= push -> sendMessage':<38} | "
        + " | ".join(f"{cell(b.total):>{width}}" for b in results)
    )
    units = " | ".join(
        f"{(statistics.fmean(b.db_units) if b.db_units else 0):>{width}.1f}" for b in results
    )
    print(f"{'DB units of work before the reply':<38} | {units}")
    print(
        f"{'time awaiting them (sum)':<38} | "
        + " | ".join(f"{cell(b.db_ms):>{width}}" for b in results)
    )
    for b in results:
        n = max(len(b.db_units), 1)
        names = ", ".join(
            f"{name} x{count / n:.1f}"
            for name, count in sorted(b.db_names.items(), key=lambda kv: -kv[1])
        )
        print(f"  {b.library} units per message: {names}")


# -- issue 20's bar: default pacing, a fake that enforces Telegram's limits -----------------

CONVERSATION = 30  # messages in one chat, each GAP_S after the previous reply
CONVERSATION_FIRST = 5
GAP_S = 0.2
STAGGER_S = 0.07  # side-by-side conversations start this far apart
BURST_CHATS = 100
SUBPROCESS_CHATS = 30  # the messages a started process answers before its RSS is read
LONG_ANSWER = " ".join(f"word{n}" for n in range(900))  # > 4096 characters: two messages
BAR = {
    "conversation": 2.0,  # first 5 replies p50, x the bare bot's
    "turn": 2.0,  # time to the last of three messages, x the bare bot's
    "burst": 1.10,  # 100 chats answered, x 100 / overall rate
    "startup_s": 0.6,
    "startup": 2.0,
    "rss_mb": 80.0,
}
BAR_BASE = 20_001  # chat ids of this section: well apart from the latency section's
CHATHUB_BIN = [sys.executable, "-m", "bot.cli", "serve"]
BARE_SCRIPT = Path(__file__).resolve().parent / "telegram_bare.py"


class TurnModel(ScriptedModel):
    """Zero latency. "three ...": a tool call, then an answer long enough for two messages
    (three sends in all: the progress line, two parts); anything else: a short answer."""

    def __init__(self) -> None:
        super().__init__(name="instant", record=False)
        self._calls = 0

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, on_delta: Any = None
    ) -> LlmResponse:
        said = [m for m in messages if m.get("role") != "system"]  # the time note is last
        last = said[-1] if said else {}
        if last.get("role") == "tool":
            return LlmResponse(content=LONG_ANSWER, usage=Usage(10, 900), model=self.name)
        if last.get("role") == "user" and "three" in str(last.get("content")):
            self._calls += 1
            call = ToolCallRequest(f"call-{self._calls}", LookupTool.name, "{}")
            return LlmResponse(content="", tool_calls=(call,), usage=Usage(10, 1), model=self.name)
        return LlmResponse(content=ANSWER, usage=Usage(10, 1), model=self.name)


class LookupTool:
    """A tool that needs no approval (``AllowAll``) and answers at once."""

    name = "bench_lookup"
    description = "Looks the answer up."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012
    category = ToolCategory.INTROSPECTION
    root_agent_only = False
    sub_agents_only = False
    interactive_only = False
    rerun_safe = True

    async def run(self, args: dict[str, Any], ctx: Any) -> str:
        return "42"


@dataclass
class Conversation:
    latencies_ms: list[float] = field(default_factory=list)
    waits_s: list[float] = field(default_factory=list)  # in Pacer.turn, per reply
    required_s: list[float] = field(default_factory=list)  # what the bucket requires
    missing: int = 0

    def p50(self, first: int | None = None) -> float:
        data = self.latencies_ms[:first] if first else self.latencies_ms
        return statistics.median(data) if data else float("nan")


@dataclass
class BarRuns:
    """One system's measurements, a value per run."""

    first5_ms: list[float] = field(default_factory=list)
    all30_ms: list[float] = field(default_factory=list)
    conversations: list[Conversation] = field(default_factory=list)
    waited_s: float = 0.0  # Outbound.pacer.waited_s over the conversations
    turn_ms: list[float] = field(default_factory=list)
    burst_s: list[float] = field(default_factory=list)
    startup_s: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    #: chathub's second start in the same home (its database exists)
    restart_s: list[float] = field(default_factory=list)
    restart_rss_mb: list[float] = field(default_factory=list)
    count_429: int = 0
    peak: dict[str, int] = field(default_factory=dict)
    rejected: list[Any] = field(default_factory=list)
    missing: int = 0


def bar_chats(kind: str, runs: int, per_run: int = 1) -> list[int]:
    offset = {"warm": 0, "conversation": 100, "turn": 200, "burst": 1000, "process": 9000}[kind]
    return [BAR_BASE + offset + n for n in range(runs * per_run)]


def required_waits(ready: Sequence[float], waits: Sequence[float], rate: Rate) -> list[float]:
    """What the private chat's bucket requires of each reply, given when it was ready."""
    if not ready:
        return []
    bucket = Bucket.full(rate, ready[0])
    required = []
    for at in ready:
        need = bucket.wait(at)
        bucket.take(at + need)
        required.append(need)
    return required


async def converse(
    fake: WatchedTelegram,
    chat: int,
    args: argparse.Namespace,
    waits: dict[int, float] | None,
    start_after: float,
) -> Conversation:
    await asyncio.sleep(start_after)
    result = Conversation()
    ready: list[float] = []
    for i in range(args.conversation):
        before = waits.get(chat, 0.0) if waits is not None else 0.0
        try:
            latency = await asyncio.wait_for(fake.push(chat, f"message {i}"), args.timeout)
        except TimeoutError:
            result.missing += 1
            continue
        waited = (waits.get(chat, 0.0) - before) if waits is not None else 0.0
        result.latencies_ms.append(latency * 1000)
        result.waits_s.append(waited)
        ready.append(fake.pushed_at[chat] + latency - waited)
        await asyncio.sleep(GAP_S)
    if waits is not None:
        result.required_s = required_waits(ready, result.waits_s, PacingPolicy().private)
    return result


async def conversations(
    fake: WatchedTelegram, args: argparse.Namespace, waits: dict[int, float] | None
) -> list[Conversation]:
    chats = bar_chats("conversation", args.runs)
    if args.separate_runs:
        return [await converse(fake, chat, args, waits, 0.0) for chat in chats]
    return list(
        await asyncio.gather(
            *(converse(fake, chat, args, waits, n * STAGGER_S) for n, chat in enumerate(chats))
        )
    )


async def warm_up(fake: WatchedTelegram, args: argparse.Namespace) -> None:
    """A first message and a first three-message turn, each in a chat of its own."""
    first, second = bar_chats("warm", 2)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(fake.push(first, "warm up"), args.timeout)
        await asyncio.wait_for(fake.push(second, "three warm up", expect=3), args.timeout)
    await asyncio.sleep(0.3)


async def turns(fake: WatchedTelegram, args: argparse.Namespace, into: BarRuns) -> None:
    for chat in bar_chats("turn", args.runs):
        try:
            latency = await asyncio.wait_for(
                fake.push(chat, "three messages, please", expect=3), args.timeout
            )
        except TimeoutError:
            into.missing += 1
            continue
        into.turn_ms.append(latency * 1000)
        await asyncio.sleep(0.3)


async def bursts(fake: WatchedTelegram, args: argparse.Namespace, into: BarRuns) -> None:
    chats = bar_chats("burst", args.runs, BURST_CHATS)
    for run in range(args.runs):
        ours = chats[run * BURST_CHATS : (run + 1) * BURST_CHATS]
        futures = fake.push_many([(chat, f"burst {run}") for chat in ours])
        done, pending = await asyncio.wait(futures, timeout=args.timeout + 60)
        for future in pending:
            future.cancel()
        into.missing += len(pending)
        if done:
            into.burst_s.append(max(f.result() for f in done))
        await asyncio.sleep(1.5)  # the overall bucket fills again before the next


def _conversation_stats(into: BarRuns, results: list[Conversation]) -> None:
    into.conversations = results
    for result in results:
        into.missing += result.missing
        into.first5_ms.append(result.p50(CONVERSATION_FIRST))
        into.all30_ms.append(result.p50())


async def bar_chathub(library: str, args: argparse.Namespace) -> BarRuns:
    into = BarRuns()
    fake = WatchedTelegram(enforce_limits=True)
    fake.watch(asyncio.get_running_loop())
    fake.start()
    chats = [
        *bar_chats("warm", 2),
        *bar_chats("conversation", args.runs),
        *bar_chats("turn", args.runs),
        *bar_chats("burst", args.runs, BURST_CHATS),
    ]
    try:
        async with chathub(
            library, fake, chats, Pacing(), model=TurnModel(), tools=[LookupTool()]
        ) as service:
            assert service.adapter is not None
            pacer = service.adapter.outbound.pacer
            waits: dict[int, float] = defaultdict(float)
            turn = pacer.turn

            async def timed_turn(conversation: str | None, kind: CallKind = SEND) -> Ticket:
                started = time.monotonic()
                try:
                    return await turn(conversation, kind)
                finally:
                    if conversation is not None:
                        waits[int(conversation)] += time.monotonic() - started

            pacer.turn = timed_turn  # type: ignore[method-assign]
            await warm_up(fake, args)
            await asyncio.sleep(1.0)  # the warm-up's tokens back in the overall bucket
            before = pacer.waited_s
            _conversation_stats(into, await conversations(fake, args, waits))
            into.waited_s = pacer.waited_s - before
            await turns(fake, args, into)
            await bursts(fake, args, into)
        stats = await fake.stats()
    finally:
        fake.stop()
    into.count_429, into.peak, into.rejected = stats["429"], stats["peak"], stats["rejected"]
    return into


async def bar_bare(library: str, args: argparse.Namespace) -> BarRuns:
    into = BarRuns()
    fake = WatchedTelegram(enforce_limits=True)
    fake.watch(asyncio.get_running_loop())
    fake.start()
    try:
        async with echo_bot(library, fake, concurrent=True):
            await warm_up(fake, args)
            _conversation_stats(into, await conversations(fake, args, None))
            await turns(fake, args, into)
        stats = await fake.stats()
    finally:
        fake.stop()
    into.count_429, into.peak, into.rejected = stats["429"], stats["peak"], stats["rejected"]
    return into


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def started_process(
    system: str,
    library: str,
    fake: WatchedTelegram,
    model: FakeOpenAIServer,
    args: argparse.Namespace,
    into: BarRuns,
    home: Path,
    *,
    restart: bool = False,
) -> None:
    """One start of a real process in ``home``: to its first getUpdates, then
    SUBPROCESS_CHATS chats' messages answered, then its RSS; stopped with SIGTERM.
    ``restart``: the second start in that home (chathub's database is there already). (The
    fake is not reset between processes: a stopped process's long poll, still waiting
    there, would confirm the new updates away with its old offset if update ids started
    again at 1.)"""
    model.reset()
    for _ in range(SUBPROCESS_CHATS + 5):
        model.reply_text(ANSWER)
    chats = bar_chats("process", 1, SUBPROCESS_CHATS)
    startups = into.restart_s if restart else into.startup_s
    rss = into.restart_rss_mb if restart else into.rss_mb
    tmp = str(home)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp, "TELEGRAM_BOT_TOKEN": TOKEN}
    if system == "chathub":
        command = CHATHUB_BIN
        env |= service_env(
            home,
            model.base_url,
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_API_URL=fake.base_url,
            TELEGRAM_LIBRARY=library,
            TELEGRAM_ALLOWED_USER_IDS=",".join(str(chat) for chat in chats),
            HTTP_PORT=str(free_port()),
        )
    else:
        command = [sys.executable, str(BARE_SCRIPT), "--library", library]
        command += ["--api-url", fake.base_url]
    polled = fake.next_poll()
    with open(home / "stderr.txt", "w+") as stderr:  # noqa: ASYNC230 (before the timing)
        started = time.monotonic()
        child = await asyncio.create_subprocess_exec(
            *command,
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            first = await asyncio.wait_for(polled, args.timeout)
            startups.append(first - started)
            futures = fake.push_many([(chat, "hello") for chat in chats])
            _done, pending = await asyncio.wait(futures, timeout=args.timeout)
            for future in pending:
                future.cancel()
            into.missing += len(pending)
            if pending:
                stderr.seek(0)
                print(f"  {system} {library}: {len(pending)} unanswered; its stderr:")
                print(stderr.read()[-2000:])
            await asyncio.sleep(SETTLE_S)
            rss.append(rss_mb(child.pid))
        except TimeoutError:
            into.missing += 1
            stderr.seek(0)
            print(f"  {system} {library}: no getUpdates in time:\n{stderr.read()[-2000:]}")
        finally:
            if child.returncode is None:
                child.terminate()
            try:
                await asyncio.wait_for(child.wait(), 15)
            except TimeoutError:
                child.kill()
                await child.wait()


async def processes(library: str, args: argparse.Namespace, hub: BarRuns, bare: BarRuns) -> None:
    fake = WatchedTelegram(enforce_limits=True)
    fake.watch(asyncio.get_running_loop())
    fake.start()
    model = FakeOpenAIServer().start()
    try:
        for run in range(args.runs):  # alternating, as the machine drifts
            pair = [("chathub", hub), ("bare", bare)]
            for system, into in pair if run % 2 == 0 else reversed(pair):
                with tempfile.TemporaryDirectory() as tmp:
                    # chathub's first start (a new database), then a restart in the same home
                    for restart in (False, True) if system == "chathub" else (False,):
                        await asyncio.sleep(1.1)  # the last process's sends leave the window
                        before = (await fake.stats())["429"]
                        await started_process(
                            system, library, fake, model, args, into, Path(tmp), restart=restart
                        )
                        stats = await fake.stats()
                        into.count_429 += stats["429"] - before
                        into.rejected += stats["rejected"] if stats["429"] > before else []
    finally:
        model.stop()
        fake.stop()


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _runs(values: Sequence[float], digits: int = 0) -> str:
    return "/".join(f"{v:.{digits}f}" for v in values)


def report_bar(results: list[tuple[str, BarRuns, BarRuns]], args: argparse.Namespace) -> list[bool]:
    print()
    print(
        f"Issue 20's bar: DEFAULT pacing (Pacing(): private burst 4 then 1/s, 30/s overall), "
        f"the fake Bot API enforcing Telegram's limits; medians of {args.runs} runs "
        "(each run's value in brackets)"
    )
    head = f"{'binding':<8} | {'measure':<44} | {'chathub':>9} | {'bare':>9} | {'ratio':>7} | bar"
    print(head)
    print("-" * (len(head) + 30))
    verdicts: list[bool] = []
    cap = PacingPolicy().overall
    overall = cap.limit / cap.seconds

    def line(
        library: str,
        name: str,
        ours: float,
        base: float,
        ratio: float | None,
        bar: str,
        met: bool | None,
        detail: str = "",
        digits: int = 1,
    ) -> None:
        ratio_text = "-" if ratio is None else f"{ratio:.2f}x"
        verdict = "" if met is None else ("met" if met else "MISSED")
        if met is not None:
            verdicts.append(met)
        print(
            f"{library:<8} | {name:<44} | {ours:>9.{digits}f} | {base:>9.{digits}f} | "
            f"{ratio_text:>7} | {bar} {verdict}{detail}"
        )

    for library, hub, bare in results:
        h, b = _median(hub.first5_ms), _median(bare.first5_ms)
        line(
            library,
            f"conversation: first {CONVERSATION_FIRST} replies p50 (ms)",
            h,
            b,
            h / b,
            f"<= {BAR['conversation']:g}x",
            h / b <= BAR["conversation"],
            f"  [{_runs(hub.first5_ms, 1)} vs {_runs(bare.first5_ms, 1)}]",
        )
        h, b = _median(hub.all30_ms), _median(bare.all30_ms)
        line(
            library,
            f"conversation: all {args.conversation} replies p50 (ms)",
            h,
            b,
            h / b,
            "(paced: 1/s after the burst)",
            None,
            f"  [{_runs(hub.all30_ms)} vs {_runs(bare.all30_ms)}]",
        )
        waits = [sum(c.waits_s) for c in hub.conversations]
        required = [sum(c.required_s) for c in hub.conversations]
        excess = [
            max((w - r for w, r in zip(c.waits_s, c.required_s, strict=True)), default=0)
            for c in hub.conversations
        ]
        print(
            f"{library:<8} |   pacing wait per conversation: {_median(waits):.2f} s in "
            f"Pacer.turn (the bucket requires {_median(required):.2f} s; the most any reply "
            f"waited beyond it: {_median(excess) * 1000:.1f} ms); Outbound.pacer.waited_s "
            f"over the {len(hub.conversations)} conversations: {hub.waited_s:.2f} s"
        )
        h, b = _median(hub.turn_ms), _median(bare.turn_ms)
        line(
            library,
            "3-message turn: push -> last message (ms)",
            h,
            b,
            h / b,
            f"<= {BAR['turn']:g}x",
            h / b <= BAR["turn"],
            f"  [{_runs(hub.turn_ms, 1)} vs {_runs(bare.turn_ms, 1)}]",
        )
        ideal = BURST_CHATS / overall
        h = _median(hub.burst_s)
        line(
            library,
            f"{BURST_CHATS}-chat burst: all answered (s; base: {BURST_CHATS}/rate)",
            h,
            ideal,
            h / ideal,
            f"<= {BAR['burst']:g}x",
            h / ideal <= BAR["burst"],
            f"  [{_runs(hub.burst_s, 2)}]",
            digits=2,
        )
        h, b = _median(hub.startup_s), _median(bare.startup_s)
        line(
            library,
            "start-up: process start -> first getUpdates (s)",
            h,
            b,
            h / b,
            f"<= {BAR['startup_s']:g} s and <= {BAR['startup']:g}x",
            h <= BAR["startup_s"] and h / b <= BAR["startup"],
            f"  [{_runs(hub.startup_s, 2)} vs {_runs(bare.startup_s, 2)}]",
            digits=2,
        )
        h, b = _median(hub.rss_mb), _median(bare.rss_mb)
        line(
            library,
            f"RSS after start-up + {SUBPROCESS_CHATS} chats answered (MB)",
            h,
            b,
            h / b,
            f"<= {BAR['rss_mb']:g} MB",
            h <= BAR["rss_mb"],
            f"  [{_runs(hub.rss_mb)} vs {_runs(bare.rss_mb)}]",
        )
        print(
            f"{library:<8} |   a restart (chathub's database exists): start-up "
            f"{_median(hub.restart_s):.2f} s [{_runs(hub.restart_s, 2)}], RSS "
            f"{_median(hub.restart_rss_mb):.1f} MB [{_runs(hub.restart_rss_mb)}]"
        )
        line(
            library,
            "responses with status 429 (all of the above)",
            hub.count_429,
            bare.count_429,
            None,
            "0 (chathub)",
            hub.count_429 == 0,
            digits=0,
        )
        peaks = ", ".join(f"{k} {v}" for k, v in sorted(hub.peak.items()))
        print(f"{library:<8} |   chathub's fullest windows (in-process runs): {peaks}")
        if hub.rejected:
            print(f"{library:<8} |   first 429s: {hub.rejected[:3]}")
        for label, runs in (("chathub", hub), ("bare", bare)):
            if runs.missing:
                print(f"{library:<8} |   {label}: {runs.missing} replies missing (timeouts)")
    return verdicts


async def run_bar(args: argparse.Namespace) -> None:
    print(
        f"Conversation: {args.conversation} messages in one chat, each {GAP_S * 1000:.0f} ms "
        f"after the previous reply ({args.runs} runs "
        + (
            "one after another"
            if args.separate_runs
            else f"side by side in {args.runs} chats, {STAGGER_S * 1000:.0f} ms apart"
        )
        + "); 3-message turn: a tool call (its progress line) and an answer in two parts, "
        "in a quiet chat, against a bare bot's three replies; "
        f"{BURST_CHATS}-chat burst: one message each, at once. In-process (as above); "
        "start-up and RSS: a real process each (`python -m bot.cli serve` with the fake "
        "OpenAI-compatible model; bench/telegram_bare.py), from its start to its first "
        f"getUpdates, RSS after {SUBPROCESS_CHATS} chats answered"
    )
    results = []
    for library in args.libraries:
        hub = await bar_chathub(library, args)
        bare = await bar_bare(library, args)
        await processes(library, args, hub, bare)
        results.append((library, hub, bare))
        gc.collect()
    verdicts = report_bar(results, args)
    print(f"bar: {sum(verdicts)} of {len(verdicts)} met")


def leftover_tasks() -> list[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return [task for task in asyncio.all_tasks() if task is not current and not task.done()]


async def run(args: argparse.Namespace) -> None:
    print(
        "Telegram end to end: update -> first sendMessage, zero-latency model, fake Bot API "
        "(real HTTP, its own process), SQLite file (WAL), AllowAll"
    )
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    started = time.monotonic()
    if args.bar:
        await run_bar(args)
    if args.latency:
        await run_latency(args)
    await asyncio.sleep(0)
    left = leftover_tasks()
    print()
    if ABANDONED.count:
        print(
            f"fake API: {ABANDONED.count} request(s) abandoned by the client mid-body "
            "(a cancelled call: chathub's typing indicator is cancelled by the reply)"
        )
    print(f"total {time.monotonic() - started:.1f} s; tasks left running: {len(left)}")
    for task in left:
        print(f"  left running: {task!r}")


async def run_latency(args: argparse.Namespace) -> None:
    print()
    print("Latency, pacing off (--latency):")
    print(
        f"1 chat: {args.messages} sequential messages; {args.chats} chats: {args.rounds} "
        f"round(s) of one message per chat at once; in {args.blocks} blocks alternating "
        f"chathub and echo (ABBA), each with {WARMUP_MESSAGES} warm-up messages / "
        "1 warm-up round, not counted"
    )
    print(
        "chathub: Telegram pacing DISABLED (per-chat interval 0, 1e6 msg/s overall) except "
        "rows marked DEFAULT PACING"
    )
    print(
        "baseline: the library's own framework + bare echo handler; ptb runs "
        "concurrent_updates(True) for the many-chat case (sequential for 1 chat); aiogram "
        "handles updates as tasks (its default)"
    )
    rows: list[Row] = []
    breakdowns: list[Breakdown] = []
    for library in args.libraries:
        rows.extend(await measure(library, args))
        if args.breakdown:
            breakdowns.append(await breakdown(library, args.breakdown_messages, args.timeout))
        gc.collect()
    report(rows, args)
    if breakdowns:
        report_breakdown(breakdowns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run")
    parser.add_argument(
        "--latency",
        action="store_true",
        help="also the latency tables with pacing off (1 chat, many chats, breakdown: ~3 min)",
    )
    parser.add_argument(
        "--no-bar", dest="bar", action="store_false", help="skip issue 20's bar (default pacing)"
    )
    parser.add_argument("--runs", type=int, help="runs of the bar's cases (default 3; quick 1)")
    parser.add_argument(
        "--conversation", type=int, help=f"conversation messages (default {CONVERSATION})"
    )
    parser.add_argument(
        "--separate-runs",
        action="store_true",
        help="the bar's conversations one after another, not side by side (longer)",
    )
    parser.add_argument("--messages", type=int, help="1-chat messages (default 200; quick 30)")
    parser.add_argument("--chats", type=int, help="concurrent chats (default 200; quick 50)")
    parser.add_argument(
        "--rounds", type=int, help="rounds of the many-chat case (default 6; quick 2)"
    )
    parser.add_argument(
        "--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES), help="bindings"
    )
    parser.add_argument(
        "--paced",
        action=argparse.BooleanOptionalAction,
        help="also the many-chat case with the default pacing (default: on; quick: off)",
    )
    parser.add_argument(
        "--no-breakdown", dest="breakdown", action="store_false", help="skip the breakdown"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per wait")
    parser.add_argument(
        "--blocks", type=int, help="alternating chathub/echo blocks per scenario (default 4)"
    )
    args = parser.parse_args()
    args.runs = max(1, args.runs or (1 if args.quick else 3))
    args.conversation = args.conversation or (10 if args.quick else CONVERSATION)
    args.messages = args.messages or (30 if args.quick else 200)
    args.chats = args.chats or (50 if args.quick else 200)
    args.rounds = args.rounds or (2 if args.quick else 6)
    args.blocks = max(1, args.blocks or (2 if args.quick else 4))
    args.breakdown_messages = 20 if args.quick else 50
    if args.paced is None:
        args.paced = not args.quick
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("uvicorn.error").addFilter(ABANDONED)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
