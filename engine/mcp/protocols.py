"""The seams of ``engine.mcp``: what the composition root plugs into the manager."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["NotificationSink"]


class NotificationSink(Protocol):
    """Where a server's notifications go (the scheduler's events, read by the tic)."""

    async def add(self, source: str, type_: str, payload: Any) -> int: ...
