"""An HTTP server that answers a byte now and then: each read is quick, the answer never
ends in time (what a per-read timeout does not bound)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["dripping_server"]


@contextlib.asynccontextmanager
async def dripping_server(every_s: float = 0.05, drips: int = 500) -> AsyncIterator[str]:
    """Its base URL (``http://127.0.0.1:<port>``) while it runs."""

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = (
            f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {drips}\r\n\r\n"
        )
        writer.write(head.encode())
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            for _ in range(drips):
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(every_s)
        writer.close()

    server = await asyncio.start_server(drip, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
