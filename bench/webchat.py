"""The web chat's measured bar (issue 22), printed.

The service's parts in this process (engine over SQLite in a temporary directory, ChatHub,
the HTTP app with the web chat, uvicorn on 127.0.0.1) with a zero-latency model that
streams its answer at once and ``AllowAll``; the clients are ``websockets`` connections.

* message → first ``text_delta``, one socket, ``--messages`` messages one after another
  (each sent once the previous answer's ``done`` came): p50 / p99. Beside it the same
  through the hub alone (``send_message`` → the first ``TextDelta`` on ``hub.events``):
  what the socket adds. (The Telegram path's figure is ``bench/telegram_e2e.py --latency``.)
* ``--sockets`` sockets (one conversation each) sending one message at once: all
  answered?, p50 / p99 of message → ``done``, and the wall time of the burst.
* memory per idle open socket: the clients in a child process open ``--idle`` sockets and
  wait; this process's RSS before and after, divided by their number.

    python bench/webchat.py [--messages 300] [--sockets 200] [--idle 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.http.app import create_app
from bot.http.signins import LoginThrottle
from bot.schema import LAYERS
from bot.settings import load_config, load_settings
from bot.webchat.auth import SocketAuth
from bot.webchat.conversations import AnyConversation
from bot.webchat.limits import SocketLimits
from bot.webchat.transport import WebChat
from engine.core import Engine
from engine.hub import ChatHub
from engine.llm import LlmResponse, Message, ModelRegistry, ScriptedModel, ToolSchema, Usage
from engine.session import AllowAll, Done, TextDelta
from engine.store import Store

ANSWER = "Hello from the zero-latency model."


class InstantModel(ScriptedModel):
    """Streams its whole answer at once and returns it; records nothing."""

    def __init__(self) -> None:
        super().__init__(name="instant", record=False)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, on_delta: Any = None
    ) -> LlmResponse:
        if on_delta is not None:
            on_delta(ANSWER)
        return LlmResponse(content=ANSWER, usage=Usage(10, 1), model=self.name)


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def recv_until(connection: Any, kind: str) -> float:
    while True:
        frame = json.loads(await connection.recv())
        if frame["type"] == kind:
            return time.perf_counter()


async def one_socket(url: str, messages: int) -> list[float]:
    latencies = []
    async with connect(f"{url}?conversation=seq") as ws:
        await recv_until(ws, "turn_running")
        for i in range(messages + 5):  # the first 5 warm up
            sent = time.perf_counter()
            await ws.send(json.dumps({"type": "message", "text": f"message {i}"}))
            first = await recv_until(ws, "text_delta")
            await recv_until(ws, "done")
            if i >= 5:
                latencies.append(first - sent)
    return latencies


async def through_hub(hub: ChatHub, messages: int) -> list[float]:
    latencies = []
    events = hub.events("web:hub-only")
    for i in range(messages + 5):
        sent = time.perf_counter()
        await hub.send_message("web:hub-only", f"message {i}")
        first = None
        while True:
            item = await events.recv()
            if isinstance(item.event, TextDelta) and first is None:
                first = time.perf_counter()
            if isinstance(item.event, Done):
                break
        if i >= 5:
            latencies.append((first or time.perf_counter()) - sent)
    events.close()
    return latencies


async def burst(url: str, count: int) -> tuple[int, list[float], float]:
    sockets = []
    for i in range(count):
        ws = await connect(f"{url}?conversation=burst{i}", max_queue=None)
        await recv_until(ws, "turn_running")
        sockets.append(ws)

    async def one(ws: Any, i: int) -> float:
        sent = time.perf_counter()
        await ws.send(json.dumps({"type": "message", "text": f"at once {i}"}))
        return await asyncio.wait_for(recv_until(ws, "done"), 120) - sent

    started = time.perf_counter()
    results = await asyncio.gather(
        *(one(ws, i) for i, ws in enumerate(sockets)), return_exceptions=True
    )
    wall = time.perf_counter() - started
    for ws in sockets:
        await ws.close()
    latencies = [r for r in results if isinstance(r, float)]
    return len(latencies), latencies, wall


def _idle_clients(url: str, count: int, ready: Any, done: Any) -> None:
    async def run() -> None:
        sockets = []
        for i in range(count):
            ws = await connect(f"{url}?conversation=idle{i}")
            await recv_until(ws, "turn_running")
            sockets.append(ws)
        ready.set()
        await asyncio.get_running_loop().run_in_executor(None, done.wait)
        for ws in sockets:
            await ws.close()

    asyncio.run(run())


async def idle_memory(url: str, count: int) -> tuple[int, int]:
    context = multiprocessing.get_context("spawn")
    ready, done = context.Event(), context.Event()
    before = rss_bytes()
    child = context.Process(target=_idle_clients, args=(url, count, ready, done))
    child.start()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, ready.wait)
    await asyncio.sleep(0.5)  # let the last sockets' handshakes settle here
    after = rss_bytes()
    done.set()
    await loop.run_in_executor(None, child.join)
    return before, after


async def instant_service(home: Path) -> tuple[Engine, ChatHub]:
    """The engine over a SQLite file in ``home`` (every layer's tables) with the
    zero-latency model and ``AllowAll``, and its hub, started."""
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{home / 'chathub.db'}",
        chathub_workspace=home / "workspace",
        chathub_timezone="UTC",
        _env_file=None,
    )
    store = await Store.open(settings.database_url, LAYERS)
    engine = await Engine.open(
        load_config(settings),
        models=ModelRegistry([InstantModel()]),
        policy=AllowAll(),
        store=store,
    )
    hub = ChatHub(engine)
    await hub.start()
    return engine, hub


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as home:
        engine, hub = await instant_service(Path(home))
        auth = SocketAuth(token=None, signins=None, throttle=LoginThrottle())
        limits = SocketLimits(frames_per_second=1e6, burst=1_000_000)
        webchat = WebChat(hub, auth, AnyConversation(), limits=limits)
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so (a
        # plain socket() would leave Nagle on and every reply 40 ms late).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        url = f"ws://127.0.0.1:{sock.getsockname()[1]}/ws/chat"
        server = uvicorn.Server(
            uvicorn.Config(create_app(webchat=webchat), log_level="warning", lifespan="off")
        )
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to wait on)
            await asyncio.sleep(0.01)
        try:
            socket_latency = await one_socket(url, args.messages)
            hub_latency = await through_hub(hub, args.messages)
            answered, burst_latency, wall = await burst(url, args.sockets)
            before, after = await idle_memory(url, args.idle)
        finally:
            server.should_exit = True
            await serving
            await webchat.close()
            await hub.close()
            await engine.close()

    print(f"web chat bench (python {sys.version.split()[0]}, {os.cpu_count()} cores)")
    print(f"message -> first text_delta, 1 socket, {args.messages} messages:")
    print(
        f"  socket  p50 {ms(statistics.median(socket_latency))}"
        f"  p99 {ms(percentile(socket_latency, 99))}"
    )
    print(
        f"  hub     p50 {ms(statistics.median(hub_latency))}"
        f"  p99 {ms(percentile(hub_latency, 99))}  (send_message -> TextDelta, no socket)"
    )
    print(f"{args.sockets} sockets, one message each at once:")
    print(f"  answered {answered}/{args.sockets} in {wall:.2f} s")
    if burst_latency:
        print(
            f"  message -> done p50 {ms(statistics.median(burst_latency))}"
            f"  p99 {ms(percentile(burst_latency, 99))}"
        )
    print(f"idle sockets: {args.idle} open")
    print(
        f"  RSS {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB:"
        f" {(after - before) / args.idle / 1024:.1f} KiB per socket"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--idle", type=int, default=500)
    asyncio.run(main(parser.parse_args()))
