"""A TCP port that takes no connection: its accept queue is full, so the kernel drops
every SYN and a client's connect times out (``httpx.ConnectTimeout``), as with a model
host that is switched off or behind a VPN that is down."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator


@contextlib.contextmanager
def blackhole() -> Iterator[str]:
    """The base URL (``http://127.0.0.1:<port>/v1``) of a host that never answers a SYN."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):  # fill the accept queue (backlog 0 takes one, the kernel a spare)
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    # Let the kernel finish the fillers' handshakes: until then a new SYN may still be
    # taken. A settling delay of the kernel, not of the code under test.
    time.sleep(0.2)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for filler in fillers:
            filler.close()
        server.close()
