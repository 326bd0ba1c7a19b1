"""The web chat over a real socket: uvicorn on 127.0.0.1 (a free port) in the test's loop,
the ``websockets`` client, a real engine and hub, the fake model over HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from websockets.asyncio.client import ClientConnection, connect

from bot.http.app import create_app
from bot.http.operations import Operations
from bot.http.signins import LoginThrottle, SignIns
from bot.http.web import WebInbox
from bot.platform.voice_notes import VoiceNotes
from bot.settings import load_settings
from bot.webchat.auth import SocketAuth
from bot.webchat.conversations import AnyConversation, ConversationDirectory
from bot.webchat.limits import MAX_FRAME_BYTES, SocketLimits
from bot.webchat.page import ChatPage
from bot.webchat.routes import ConversationRoutes
from bot.webchat.store import ConversationStore
from bot.webchat.transport import WebChat
from bot.webchat.uploads import MAX_UPLOAD_BYTES, Uploads
from engine.core import Engine
from engine.hub import ChatHub
from tests.fakes.openai_server import FakeOpenAIServer
from voice import Transcriber, Transcription

TOKEN = "webchat-test-token-0123456789"
#: A guard against a hang, never a timing assertion.
RECV_TIMEOUT_S = 15.0


class StepClock:
    """The rate limiter's clock: still unless a test moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Client:
    """One socket, frames as dicts."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.seen: list[dict[str, Any]] = []

    async def send(self, **frame: Any) -> None:
        await self.connection.send(json.dumps(frame))

    async def recv(self) -> dict[str, Any]:
        try:
            raw = await asyncio.wait_for(self.connection.recv(), RECV_TIMEOUT_S)
        except TimeoutError:
            raise AssertionError(f"no frame; seen so far: {self.seen}") from None
        frame = json.loads(raw)
        self.seen.append(frame)
        return frame

    async def until(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        """Frames up to and including the first of ``kind`` (with ``match``'s fields)."""
        frames = []
        while True:
            frame = await self.recv()
            frames.append(frame)
            if frame["type"] == kind and all(frame.get(k) == v for k, v in match.items()):
                return frames

    async def opened(self) -> list[dict[str, Any]]:
        """``hello`` and ``turn_running``, the first two frames of every socket."""
        return [await self.recv(), await self.recv()]

    async def close(self) -> None:
        await self.connection.close()


class ChatServer:
    def __init__(self, port: int, hub: ChatHub, webchat: WebChat, signins: SignIns) -> None:
        self.port = port
        self.hub = hub
        self.webchat = webchat
        self.signins = signins
        self.url = f"ws://127.0.0.1:{port}/ws/chat"
        self.http = f"http://127.0.0.1:{port}"

    def connect(
        self,
        conversation: str = "c1",
        *,
        auth: bool = True,
        headers: dict[str, str] | None = None,
        max_size: int | None = 4 * MAX_FRAME_BYTES,
    ) -> Any:
        sent = {"Authorization": f"Bearer {TOKEN}"} if auth else {}
        sent.update(headers or {})
        return connect(
            f"{self.url}?conversation={conversation}",
            additional_headers=sent,
            max_size=max_size,
            open_timeout=RECV_TIMEOUT_S,
        )

    async def client(self, conversation: str = "c1", **kwargs: Any) -> Client:
        client = Client(await self.connect(conversation, **kwargs))
        await client.opened()
        return client


@pytest.fixture
def rate_clock() -> StepClock:
    return StepClock()


@pytest.fixture
async def voice_notes(
    tmp_path: Path, engine: Engine, fake_openai: FakeOpenAIServer
) -> AsyncIterator[Callable[..., VoiceNotes]]:
    """``VoiceNotes`` as ``chathub serve`` builds them (``bot/serve.py``), transcribing at
    the fake server (``transcribe=False``: no transcription set up)."""
    async with httpx.AsyncClient() as client:

        def build(
            *, transcribe: bool = True, max_bytes: int = 20 * 1024 * 1024, max_seconds: int = 600
        ) -> VoiceNotes:
            settings = load_settings(
                database_url=f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}",
                llm_base_url=fake_openai.base_url,
                llm_model="fake-model",
                transcribe_model="whisper-1" if transcribe else None,
                transcribe_base_url=fake_openai.base_url if transcribe else None,
                _env_file=None,
            )
            return VoiceNotes(
                Transcription(settings),
                Transcriber(client, timeout_s=settings.transcribe_timeout_seconds),
                engine.workspace.root,
                max_bytes=max_bytes,
                max_seconds=max_seconds,
            )

        yield build


@pytest.fixture
async def make_server(
    engine: Engine, hub: ChatHub, rate_clock: StepClock
) -> AsyncIterator[Callable[..., Any]]:
    servers: list[tuple[uvicorn.Server, asyncio.Task[None], WebChat]] = []

    async def start(
        limits: SocketLimits | None = None,
        *,
        stored: bool = False,
        page: bool = False,
        token: str | None = TOKEN,
        upload_limit: int = MAX_UPLOAD_BYTES,
        voice: VoiceNotes | None = None,
    ) -> ChatServer:
        """``stored``: conversations from the database (created over HTTP first), with
        their HTTP routes; otherwise any well-formed id is a conversation. ``page``: the
        chat page and the inbox (its sign-in) too. ``upload_limit``: bytes per file.
        ``voice``: how voice notes are heard (``test_voice.py``'s ``voice_notes``)."""
        uploads = Uploads(engine.workspace.root, max_bytes=upload_limit)
        signins = SignIns(engine.store.db, token=token or TOKEN)
        throttle = LoginThrottle()
        auth = SocketAuth(token=token, signins=signins if token else None, throttle=throttle)
        conversations: ConversationDirectory = AnyConversation()
        pages: list[Any] = []
        if stored or page:
            store = ConversationStore(engine.store.db)
            conversations = store
            pages = ConversationRoutes(store, hub, auth, uploads=uploads, voice=voice).routes()
        inbox = None
        if page:
            pages += ChatPage(auth).routes()
            operations = Operations(engine, hub)
            inbox = WebInbox(
                operations, token=token, signins=signins if token else None, throttle=throttle
            )
        webchat = WebChat(
            hub,
            auth,
            conversations,
            limits=limits,
            clock=rate_clock,
            pages=pages,
            uploads=uploads,
            voice=voice,
        )
        app = create_app(webchat=webchat, web=inbox)
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so (a
        # plain socket() would leave Nagle on and every reply 40 ms late).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", ws_max_size=2 * MAX_FRAME_BYTES, lifespan="off"
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
            if task.done():
                task.result()
        servers.append((server, task, webchat))
        return ChatServer(port, hub, webchat, signins)

    yield start
    for server, task, webchat in servers:
        server.should_exit = server.force_exit = True
        await task
        await webchat.close()


@pytest.fixture
async def server(make_server: Callable[..., Any]) -> ChatServer:
    return await make_server()
