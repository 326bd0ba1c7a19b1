"""``Placement``: which process runs a source's work, a role chosen once when the hub is built.

One process alone (``LocalPlacement``) runs every source: a message goes straight to its
source's inbox, a decision resumes its turn right here, and at start what a crash left is
recovered. In a fleet (``FleetWork``, ``engine/hub/fleet/work.py``) the process holding a
source's lease runs it: every message is a queue row first, turns run behind the lease's
fence, an idle source is let go, and the rest of the fleet is told over notices. The hub's
collaborators (the consumer, the intake, the decisions, background delivery) ask the role
and never which one it is; neither role starts a consumer by itself: the hub gives it the
way (``Start``) when it starts it.

Like APScheduler 4's data store and event broker: named roles with a local and a shared
implementation, the same calls made on both.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

from sqlalchemy.engine import Connection

from engine.core import Engine
from engine.hub.turns.inbox import Unit, queue_message
from engine.hub.turns.sources import SourceRegistry, SourceState
from engine.hub.types import SendOptions
from engine.store.fencing import Fence

__all__ = ["LocalPlacement", "Placement", "Start", "StopHere"]

log = logging.getLogger(__name__)

#: Starts a source's consumer unless one runs (``InboxConsumer.ensure``).
Start = Callable[[SourceState], None]
#: Drops a source's queued work here and stops its turn; the units dropped.
StopHere = Callable[[SourceState], Awaitable[Sequence[Unit]]]


class Placement(Protocol):
    """Where a source's work runs (see the module's docstring)."""

    #: Whether a decision resumes its turn in the engine right where it was recorded (one
    #: process), or the role resumes it where the source runs (``decided``).
    resumes_in_place: bool

    async def start(self, start: Start) -> None:
        """At the hub's start: what waits is taken up (recovered, or scanned for)."""
        ...

    async def close(self) -> None: ...

    def owns(self, source: str) -> bool:
        """Whether this process runs ``source``'s work now."""
        ...

    async def current(self, source: str) -> SourceState:
        """``source``'s state for what reaches it from outside its queue (a decision, an
        answer, a control): read again from the database when another process may have
        moved the source to a new session since this one last held it."""
        ...

    def turn_fence(self, source: str) -> Fence | None:
        """What every transaction of a turn of ``source`` checks first (``None``: nothing)."""
        ...

    async def cut(self, state: SourceState) -> bool:
        """Whether the source's session was left mid-turn by another process."""
        ...

    async def accept(
        self,
        source: str,
        text: str,
        options: SendOptions,
        also: Callable[[Connection], None] | None,
        redelivered_if_lost: bool,
        start: Start,
    ) -> int | None:
        """Queue a checked message where it runs; its queue row (``None``: an idle source
        took a redeliverable message without one)."""
        ...

    async def stop(self, source: str, stop_here: StopHere) -> int:
        """``/stop``: the queued messages dropped and the turn stopped, wherever it runs;
        how many messages were dropped."""
        ...

    async def idle(self, state: SourceState) -> None:
        """The source's work here is done for now."""
        ...

    def fenced_out(self, state: SourceState) -> None:
        """A turn of the source was stopped by its fence: the source is not this process's
        now (whoever takes it next resumes the cut turn first)."""
        ...

    def holding(self, source: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Work that reaches ``source`` from outside its queue (a notification, a result)
        runs inside: while it runs here and nowhere else."""
        ...

    async def decided(self, source: str, tool_call_id: int, *, in_chat: bool) -> None:
        """A decision no turn here waited for (``resumes_in_place`` off): it reaches the
        turn that waits for it; ``in_chat`` off: a call of a session no chat owns."""
        ...

    async def stop_session(self, session_id: int) -> None:
        """Stop a session whose turn does not run here (a job's run elsewhere)."""
        ...

    async def worked_elsewhere(self, source: str) -> bool:
        """Whether another process runs ``source`` now."""
        ...


class LocalPlacement:
    """Every source runs in this process."""

    resumes_in_place = True

    def __init__(
        self,
        engine: Engine,
        sources: SourceRegistry,
        recover: Callable[[Start], Awaitable[None]],
    ) -> None:
        """``recover``: what a crash left, taken up at start (``Recovery.run``)."""
        self._engine = engine
        self._sources = sources
        self._recover = recover

    async def start(self, start: Start) -> None:
        await self._recover(start)

    async def close(self) -> None:
        return None

    def owns(self, source: str) -> bool:
        return True

    async def current(self, source: str) -> SourceState:
        return await self._sources.state(source)

    def turn_fence(self, source: str) -> Fence | None:
        return None

    async def cut(self, state: SourceState) -> bool:
        return False  # a restart's recovery marked what a crash cut (``resume_first``)

    async def accept(
        self,
        source: str,
        text: str,
        options: SendOptions,
        also: Callable[[Connection], None] | None,
        redelivered_if_lost: bool,
        start: Start,
    ) -> int | None:
        state = await self._sources.state(source, agent_id=options.agent_id)
        if redelivered_if_lost and also is not None and state.is_idle:
            state.inbox.push(text, options, None, also)  # no await since the check
            start(state)
            return None
        store = self._engine.store
        row = await queue_message(store, source, state.session_id, text, options, also)
        state.inbox.push(text, options, row.id)
        start(state)
        return row.id

    async def stop(self, source: str, stop_here: StopHere) -> int:
        state = self._sources.get(source)
        return 0 if state is None else len(await stop_here(state))

    async def idle(self, state: SourceState) -> None:
        return None

    def fenced_out(self, state: SourceState) -> None:
        return None  # no fence here

    @contextlib.asynccontextmanager
    async def holding(self, source: str) -> AsyncIterator[None]:
        yield

    async def decided(self, source: str, tool_call_id: int, *, in_chat: bool) -> None:
        return None  # resumed in place by the engine

    async def stop_session(self, session_id: int) -> None:
        return None  # not running here: running nowhere

    async def worked_elsewhere(self, source: str) -> bool:
        return False
