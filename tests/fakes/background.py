"""Serve a Starlette app with uvicorn on 127.0.0.1 in a thread with its own event loop.

The fakes use it so synchronous tests, async tests and subprocesses can all talk to them
over real HTTP.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

import uvicorn
from starlette.applications import Starlette

__all__ = ["BackgroundServer"]


class BackgroundServer:
    """``on_loop(loop)`` runs inside the server's loop before it serves, ``on_loop(None)``
    after it stopped (the fakes create their loop-bound events there)."""

    def __init__(
        self,
        app: Starlette,
        name: str,
        on_loop: Callable[[asyncio.AbstractEventLoop | None], None] = lambda _loop: None,
    ) -> None:
        self._app = app
        self._name = name
        self._on_loop = on_loop
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit this; without it every keep-alive request waits ~40 ms
        # (Nagle against delayed ACKs: uvicorn writes headers and body separately).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))  # the OS picks a free port; no race with other tests
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self._app, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._serve(sock)), name=self._name, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self._name} did not start")
            time.sleep(0.005)

    def stop(self) -> None:
        """Shut down; safe to call twice."""
        if self._thread is None or self._server is None:
            return
        self._server.should_exit = True
        # Skip uvicorn's wait for idle keep-alive connections of clients still open.
        self._server.force_exit = True
        self._thread.join(timeout=10)
        self._thread = None
        self._server = None

    async def _serve(self, sock: socket.socket) -> None:
        self._on_loop(asyncio.get_running_loop())
        assert self._server is not None
        try:
            await self._server.serve(sockets=[sock])
        finally:
            self._on_loop(None)
