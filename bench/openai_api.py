"""The OpenAI-compatible API's measured bar (issue 39), printed.

The service's parts in this process (engine over SQLite in a temporary directory, ChatHub,
the HTTP app with the web chat and ``/v1``, uvicorn on 127.0.0.1) with a zero-latency model
that streams its answer at once and ``AllowAll``.

* ``/v1/chat/completions`` with ``stream: true`` → the first chunk with text, one named
  conversation, ``--messages`` requests one after another (each sent once the previous
  answer's ``[DONE]`` came; each request carries only its new message): p50 / p99.
* the web chat on the same machine and service: ``message`` → first ``text_delta`` over
  one socket, interleaved with the requests above (one each in turn, so both see the same
  load): p50 / p99; and the ratio (the bar: ≤ 1.5×).
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
from typing import Any

import httpx
import openai
import uvicorn
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.webchat import instant_service, ms, percentile, recv_until
from bot.completions import CompletionsApi, talkable_agents
from bot.http.app import create_app
from bot.http.signins import LoginThrottle
from bot.webchat.auth import SocketAuth
from bot.webchat.conversations import AnyConversation
from bot.webchat.limits import SocketLimits
from bot.webchat.transport import WebChat

WARMUP = 5


async def webchat_once(ws: Any, i: int) -> float:
    sent = time.perf_counter()
    await ws.send(json.dumps({"type": "message", "text": f"message {i}"}))
    first = await recv_until(ws, "text_delta")
    await recv_until(ws, "done")
    return first - sent


async def v1_once(http: httpx.AsyncClient, i: int) -> float:
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
            if first is None and line.startswith("data: {") and _has_text(line):
                first = time.perf_counter()
    assert first is not None, "no text streamed"
    return first - sent


class RawClient:
    """HTTP/1.1 over one kept-alive socket, chunked answers read line by line: the least
    a client can do, so what is measured is the service (the websockets client is as lean)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def first_text(self, i: int) -> float:
        body = json.dumps(
            {
                "model": "main",
                "user": "bench-raw",
                "stream": True,
                "messages": [{"role": "user", "content": f"message {i}"}],
            }
        ).encode()
        sent = time.perf_counter()
        self._writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        first = None
        await self._reader.readuntil(b"\r\n\r\n")  # the head
        while True:
            size = int((await self._reader.readline()).strip(), 16)
            data = await self._reader.readexactly(size + 2)
            if size == 0:
                break
            for line in data.split(b"\n"):
                if first is None and line.startswith(b"data: {") and _has_text(line.decode()):
                    first = time.perf_counter()
        assert first is not None, "no text streamed"
        return first - sent

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


def _has_text(line: str) -> bool:
    return bool(json.loads(line[6:])["choices"][0]["delta"].get("content"))


async def side_by_side(
    base: str, port: int, url: str, messages: int
) -> tuple[list[float], list[float], list[float]]:
    """A /v1 request through a lean client, one through httpx, then a web chat message,
    and so on: all under the same load."""
    raw: list[float] = []
    v1: list[float] = []
    web: list[float] = []
    lean = await RawClient.open(port)
    async with (
        httpx.AsyncClient(base_url=base, timeout=30) as http,
        connect(f"{url}?conversation=bench") as ws,
    ):
        await recv_until(ws, "turn_running")
        for i in range(messages + WARMUP):
            took = await lean.first_text(i), await v1_once(http, i), await webchat_once(ws, i)
            if i >= WARMUP:
                raw.append(took[0])
                v1.append(took[1])
                web.append(took[2])
    await lean.close()
    return raw, v1, web


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
        engine, hub = await instant_service(Path(home))
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
        while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to wait on)
            await asyncio.sleep(0.01)
        base = f"http://127.0.0.1:{port}"
        try:
            print(f"first streamed token, zero-latency model, {args.messages} messages each:")
            raw_times, v1_times, web_times = await side_by_side(
                base, port, f"ws://127.0.0.1:{port}/ws/chat", args.messages
            )
            raw = line("/v1/chat/completions stream (a lean HTTP client)", raw_times)
            line("/v1/chat/completions stream (httpx)", v1_times)
            ws = line("web chat message → first text_delta (interleaved)", web_times)
            print(
                f"  /v1 (lean client) ÷ web chat: p50 {raw[0] / ws[0]:.2f}×, "
                f"p99 {raw[1] / ws[1]:.2f}× (bar ≤ 1.5×)"
            )
            line("/v1 through the openai package", await openai_first_token(base, args.messages))
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
