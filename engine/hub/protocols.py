"""The hub's seams: what a platform adapter (and a test) plugs into ``ChatHub``.

A platform registers its hooks for the sources it serves (``ChatHub.on_answer`` /
``on_failure``), so its delivery record commits in the same transaction as what it
delivers; tests pass a fake clock and sleep. Implementations are plain functions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from engine.store.history import AlsoWithKey, AlsoWithRow

__all__ = [
    "AnswerHook",
    "FailureHook",
    "MonotonicClock",
    "Publish",
    "Sleep",
    "StandingGrant",
    "TurnContext",
]


class AnswerHook(Protocol):
    """Work for the transaction storing ``source``'s root answer ``content`` (its outbox row)."""

    def __call__(self, source: str, content: str, /) -> AlsoWithRow | None: ...


class FailureHook(Protocol):
    """Work for the transaction that ends ``source``'s failed turn (the ``notice``'s row)."""

    def __call__(self, source: str, notice: str, /) -> AlsoWithKey | None: ...


class MonotonicClock(Protocol):
    """Seconds from an arbitrary origin that never go back (``time.monotonic``)."""

    def __call__(self) -> float: ...


class Sleep(Protocol):
    """Waits ``seconds`` (``asyncio.sleep``; a fake one in tests)."""

    def __call__(self, seconds: float, /) -> Awaitable[None]: ...


class Publish(Protocol):
    """Puts ``event`` of ``source``'s session on the hub's broadcast (``HubEvents.publish``)."""

    def __call__(self, source: str, session_id: int | None, event: Any, /) -> None: ...


class TurnContext(Protocol):
    """Dynamic system content for one turn of ``source`` whose message carries ``metadata``
    (``None`` when a turn is resumed): long-term memory's profile. Called as each turn
    starts; ``None`` adds nothing."""

    def __call__(
        self, source: str, metadata: Mapping[str, Any] | None, /
    ) -> Awaitable[str | None]: ...


class StandingGrant(Protocol):
    """ "🔄 Session" on a card another session raised in a chat (a job's run): let that
    session's owner (the job) call the tool of ``tool_call_id`` from now on, without asking."""

    def __call__(self, session_id: int, tool_call_id: int, /) -> Awaitable[None]: ...
