"""Cancelling a session from elsewhere (an API, the scheduler) arrives on the system bus."""

from __future__ import annotations

import contextlib
from typing import Any

from engine.bus.broadcast import Subscription
from engine.bus.system import SessionCancelled
from engine.core import Engine

__all__ = ["watch_cancellations"]


async def watch_cancellations(engine: Engine, subscription: Subscription[Any]) -> None:
    """Cancel each ``SessionCancelled`` session's turn with its approvals and questions."""
    with contextlib.closing(subscription):
        async for event in subscription:
            if isinstance(event, SessionCancelled):
                engine.cancel_session(event.session_id)
