"""An in-process ``/v1`` over a real engine and hub on a SQLite file, served by uvicorn on
127.0.0.1 beside the JSON API (whose inbox decides the calls that wait), with the fake
OpenAI-compatible model; the client is the official ``openai`` package."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from bot.completions import CompletionsApi, ExchangeLimits, talkable_agents
from bot.http.api import ApiRoutes
from bot.http.app import create_app
from bot.http.operations import Operations
from bot.http.signins import LoginThrottle
from engine.core import Engine
from engine.hub import ChatHub

TOKEN = "completions-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
GUARD_S = 20.0  # against a hang, never a timing assertion


@dataclass
class V1Server:
    port: int
    hub: ChatHub
    engine: Engine
    api: CompletionsApi

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, key: str = TOKEN, **kwargs: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.base}/v1", api_key=key, max_retries=0, timeout=GUARD_S, **kwargs
        )

    def http(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base, headers=BEARER, timeout=GUARD_S, **kwargs)


@pytest.fixture
async def make_v1(engine: Engine, hub: ChatHub) -> AsyncIterator[Callable[..., Any]]:
    servers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def start(*, token: str | None = TOKEN, limits: ExchangeLimits | None = None) -> V1Server:
        throttle = LoginThrottle()
        api = CompletionsApi(
            hub,
            engine.store.db,
            lambda: talkable_agents(engine.agents),
            token=token,
            throttle=throttle,
            limits=limits,
        )
        routes = ApiRoutes(Operations(engine, hub), token=token, throttle=throttle)
        app = create_app(api=routes, completions=api)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
            if task.done():
                task.result()
        servers.append((server, task))
        return V1Server(port, hub, engine, api)

    yield start
    for server, task in servers:
        server.should_exit = server.force_exit = True
        await task


@pytest.fixture
async def v1(make_v1: Callable[..., Any]) -> V1Server:
    return await make_v1()


def user_messages(request: dict[str, Any]) -> list[str]:
    """The user messages a model request carried, in order."""
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def until(check: Callable[[], Awaitable[Any]], within_s: float = GUARD_S) -> Any:
    """Poll ``check`` (state another task changes) until it is truthy."""
    for _ in range(int(within_s / 0.02)):
        if value := await check():
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {within_s} s")
