"""The engine and its hub, for the platform layer's scenarios that need a real one, and
``until`` for what another process (a second one over the same database) does."""

import asyncio
from collections.abc import Callable
from typing import Any

from tests.engine.hub.conftest import (  # noqa: F401 (fixtures)
    app_config,
    engine,
    hub,
    hub_config,
    manual_sleep,
    model,
)


async def until(check: Callable[[], object]) -> None:
    """Wait up to 5 s for ``check()`` to hold."""
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


async def stop_watching(watches: list[asyncio.Task[None]], notifiers: list[Any]) -> None:
    """The fleet's watchers of a test cancelled, and their notifiers (shared ones once)
    closed."""
    for watch in watches:
        watch.cancel()
    await asyncio.gather(*watches, return_exceptions=True)
    for notifier in dict.fromkeys(notifiers):
        await notifier.close()
