"""The system event bus: infrastructure lifecycle events, separate from chat turns.

To add an event: define a frozen dataclass below, add it to the ``SystemEvent``
union and ``__all__``, publish it from its producer, and let consumers that care
add a ``case``. Consumers must ignore variants they do not know (``case _: pass``)
so new variants never break them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from engine.bus.broadcast import DEFAULT_CAPACITY, Broadcast

__all__ = [
    "JobCompleted",
    "ProviderRegistered",
    "ProviderUnregistered",
    "SessionCancelled",
    "SystemEvent",
    "SystemEventBus",
]


@dataclass(frozen=True, slots=True)
class ProviderRegistered:
    """An API provider became available; model registries may reload."""

    provider: str


@dataclass(frozen=True, slots=True)
class ProviderUnregistered:
    """An API provider went away."""

    provider: str


@dataclass(frozen=True, slots=True)
class SessionCancelled:
    """The running turn of a session was cancelled."""

    session_id: int


@dataclass(frozen=True, slots=True)
class JobCompleted:
    """A scheduled job run finished (``status`` as stored for the run)."""

    job_id: int
    run_id: int
    status: str


SystemEvent: TypeAlias = ProviderRegistered | ProviderUnregistered | SessionCancelled | JobCompleted


class SystemEventBus(Broadcast[SystemEvent]):
    """Broadcast of :data:`SystemEvent`; ``publish(event)`` never blocks."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        super().__init__(capacity)
