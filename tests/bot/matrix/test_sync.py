"""The sync loop's own steps, without a homeserver: how long it waits after a failure."""

from __future__ import annotations

from typing import Any

import pytest
from nio.responses import SyncError

from bot.matrix.people import MatrixMe
from bot.matrix.sending import Rooms
from bot.matrix.sync import SyncLoop


class _Stopped(Exception):
    """Ends the loop after the wait it chose."""


class _Limited:
    """A homeserver whose every /sync answers 429 with a wait of 7 s."""

    async def sync(self, **_: Any) -> SyncError:
        return SyncError("Too Many Requests", "M_LIMIT_EXCEEDED", 7000)


class _Settings:
    async def get(self, key: str) -> str:
        return "s1"


async def test_a_limited_sync_waits_what_the_homeserver_asked() -> None:
    """It came back after its own half a second, into the same limit (found by review)."""
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)
        raise _Stopped

    loop = SyncLoop(
        _Limited(),  # type: ignore[arg-type]
        MatrixMe(user_id="@bot:hs"),
        Rooms(),
        _Settings(),  # type: ignore[arg-type]
        take=lambda events: None,  # type: ignore[arg-type,return-value]
        sleep=sleep,
    )
    with pytest.raises(_Stopped):
        await loop.run()
    assert waited == [7.0]
