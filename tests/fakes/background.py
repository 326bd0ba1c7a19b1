"""Serve a Starlette app with uvicorn on 127.0.0.1 in a thread with its own event loop.

The fakes use it so synchronous tests, async tests and subprocesses can all talk to them
over real HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable

import uvicorn
from starlette.applications import Starlette

__all__ = ["BackgroundServer"]

#: How long a stop waits, at most, for responses in flight to be written.
SHUTDOWN_GRACE_S = 0.1


class _Server(uvicorn.Server):
    """uvicorn's server, stopped at once: ``stop`` wakes its main loop (uvicorn's polls
    ``should_exit`` every 0.1 s), and shutdown waits for the responses in flight, not a
    fixed 0.1 s (the two cost ~0.2 s a stop: every test with a fake Telegram paid it)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def exit_now(self) -> None:
        """From any thread: ``should_exit``, and the main loop notices it now."""
        self.should_exit = True
        self.force_exit = True  # no wait for idle keep-alive connections of clients still open
        loop = self._loop
        if loop is not None:
            # RuntimeError: the loop is closed, the server has stopped already.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake.set)

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        counter = 0
        while not await self.on_tick(counter):  # on_tick also refreshes the Date header
            counter = (counter + 10) % 864000  # a tick a second, as uvicorn's 10th
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 1.0)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # closes idle ones; one mid-response closes after it
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        # uvicorn offers no event for a connection's end: poll, briefly.
        while self.server_state.connections and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


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
        self._server: _Server | None = None
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
        self._server = _Server(config)
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
        self._server.exit_now()
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
