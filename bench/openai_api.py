"""The OpenAI-compatible API's measured bar (issue 39), printed.

The service's parts in this process (engine over SQLite in a temporary directory, ChatHub,
the HTTP app with the web chat and ``/v1``, uvicorn on 127.0.0.1) with a zero-latency model
that streams its answer at once and ``AllowAll``.

* ``/v1/chat/completions`` with ``stream: true`` → the first chunk with text, one named
  conversation, ``--messages`` requests one after another (each sent once the previous
  answer's ``[DONE]`` came; each request carries only its new message): p50 / p99.
* the web chat on the same machine and service: ``message`` → first ``text_delta`` over
  one socket, the same number of messages: p50 / p99; and the ratio (the bar: ≤ 1.5×).
* the same through the official ``openai`` client (what a script pays on top).

    python bench/openai_api.py [--messages 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai
import uvicorn
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.webchat import InstantModel, ms, percentile, recv_until
from bot.completions import CompletionsApi, talkable_agents
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
from engine.llm import ModelRegistry
from engine.session import AllowAll
from engine.store import Store

WARMUP = 5


async def webchat_first_delta(url: str, messages: int) -> list[float]:
    latencies = []
    async with connect(f"{url}?conversation=bench") as ws:
        await recv_until(ws, "turn_running")
        for i in range(messages + WARMUP):
            sent = time.perf_counter()
            await ws.send(json.dumps({"type": "message", "text": f"message {i}"}))
            first = await recv_until(ws, "text_delta")
            await recv_until(ws, "done")
            if i >= WARMUP:
                latencies.append(first - sent)
    return latencies


async def v1_first_token(base: str, messages: int) -> list[float]:
    latencies = []
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        for i in range(messages + WARMUP):
            body = {
                "model": "main",
                "user": "bench",
                "stream": True,
                "messages": [{"role": "user", "content": f"message {i}"}],
            }
            sent = time.perf_counter()
            first = None
            async with http.stream("POST", "/v1/chat/completions", json=body) as answer:
                async for line in answer.aiter_lines():
                    if first is None and line.startswith("data: {"):
                        delta = json.loads(line[6:])["choices"][0]["delta"]
                        if delta.get("content"):
                            first = time.perf_counter()
            if i >= WARMUP and first is not None:
                latencies.append(first - sent)
    return latencies


async def openai_first_token(base: str, messages: int) -> list[float]:
    latencies = []
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
    for i in range(messages + WARMUP):
        sent = time.perf_counter()
        first = None
        stream = await client.chat.completions.create(
            model="main",
            user="bench-openai",
            stream=True,
            messages=[{"role": "user", "content": f"message {i}"}],
        )
        async for chunk in stream:
            if first is None and chunk.choices[0].delta.content:
                first = time.perf_counter()
        if i >= WARMUP and first is not None:
            latencies.append(first - sent)
    await client.close()
    return latencies


def line(name: str, values: list[float]) -> tuple[float, float]:
    p50, p99 = percentile(values, 50), percentile(values, 99)
    print(f"  {name:<52} p50 {ms(p50):>10}   p99 {ms(p99):>10}   (n={len(values)})")
    return p50, p99


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as home:
        settings = load_settings(
            database_url=f"sqlite+aiosqlite:///{Path(home) / 'chathub.db'}",
            chathub_workspace=Path(home) / "workspace",
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
        auth = SocketAuth(token=None, signins=None, throttle=LoginThrottle())
        limits = SocketLimits(frames_per_second=1e6, burst=1_000_000)
        webchat = WebChat(hub, auth, AnyConversation(), limits=limits)
        completions = CompletionsApi(
            hub, engine.store.db, lambda: talkable_agents(engine.agents), token=None
        )
        app = create_app(webchat=webchat, completions=completions)
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        base = f"http://127.0.0.1:{port}"
        try:
            print(f"first streamed token, zero-latency model, {args.messages} messages each:")
            v1 = line(
                "/v1/chat/completions stream (httpx)", await v1_first_token(base, args.messages)
            )
            ws = line(
                "web chat message → first text_delta",
                await webchat_first_delta(f"ws://127.0.0.1:{port}/ws/chat", args.messages),
            )
            line("/v1 through the openai package", await openai_first_token(base, args.messages))
            print(
                f"  /v1 ÷ web chat: p50 {v1[0] / ws[0]:.2f}×, p99 {v1[1] / ws[1]:.2f}× (bar ≤ 1.5×)"
            )
        finally:
            server.should_exit = True
            await task
            await webchat.close()
            await hub.close()
            await engine.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    asyncio.run(main(parser.parse_args()))
