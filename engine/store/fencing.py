"""Fencing: every transaction of a piece of work first checks that this process still owns it.

In a fleet (several processes on one PostgreSQL), a source's turns run in the process that
holds the source's lease. A process that lost the lease (it was paused past its expiry, or
cut off from the database) may still be in the middle of a turn; whatever that turn writes
next must not commit, or the new owner and the old one would both answer. So the turn's
task carries a ``Fence`` in a context variable (tasks it starts inherit it), and the
database runs the fence as the first statement of each of the task's transactions: it
raises ``Fenced`` unless the lease is still held at the epoch the work started under, and
the whole transaction rolls back.

With no fence set (one process, SQLite, background work) nothing changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from sqlalchemy.engine import Connection

__all__ = ["Fence", "Fenced", "current_fence", "fenced"]

#: Raises ``Fenced`` inside a transaction unless this process still owns the work.
Fence = Callable[[Connection], None]

_FENCE: ContextVar[Fence | None] = ContextVar("chathub_fence", default=None)


class Fenced(Exception):
    """This process no longer owns the work (its lease expired or changed hands): the
    transaction was rolled back, and the new owner carries the work on."""


def current_fence() -> Fence | None:
    return _FENCE.get()


@contextlib.contextmanager
def fenced(fence: Fence | None) -> Iterator[None]:
    """Within this block (and in tasks created in it), transactions run ``fence`` first."""
    token = _FENCE.set(fence)
    try:
        yield
    finally:
        _FENCE.reset(token)
