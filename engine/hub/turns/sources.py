"""``SourceRegistry``: the sources live in memory, each with its session, inbox and tasks.

A source's state is created on first use (its session too, in one transaction) and
dropped again when idle; everything it holds is in the database, so the next message
reloads it. Handlers are held only here (``Engine`` keeps a weak map).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.core import Engine
from engine.hub.protocols import MonotonicClock, Sleep
from engine.hub.turns.inbox import SourceInbox
from engine.session.handler import ChatSessionHandler

__all__ = ["SourceRegistry", "SourceState"]


@dataclass(eq=False)
class SourceState:
    """One live source: its active session, its inbox, its consumer and running turn."""

    name: str
    session_id: int
    inbox: SourceInbox = field(default_factory=SourceInbox)
    handler: ChatSessionHandler | None = None
    consumer: asyncio.Task[None] | None = None
    #: The task running the source's turn (its consumer's), while one runs.
    turn: asyncio.Task[Any] | None = None
    #: Recovery found this source's session cut mid-turn: its consumer resumes it first.
    resume_first: bool = False
    #: Work from outside the queue holding the source here (a result delivered, a /new):
    #: a fleet does not let the source go meanwhile.
    held: int = 0
    last_active: float = 0.0
    #: A fleet's: the lease epoch this state was claimed under (``None``: not claimed).
    epoch: int | None = None
    #: A fleet's: an earlier tenure's state, replaced when the source was taken anew while
    #: its turn still ran or waited here; it acts on nothing more (``SourceRegistry.retire``).
    retired: bool = False

    @property
    def is_idle(self) -> bool:
        """No consumer, no turn, nothing queued, held or to resume: a message would start
        a turn."""
        return (
            self.consumer is None
            and self.turn is None
            and not self.has_waiting_work
            and not self.held
        )

    @property
    def has_waiting_work(self) -> bool:
        """A message queued here, or a cut turn to resume first."""
        return bool(len(self.inbox)) or self.resume_first

    @property
    def is_processing(self) -> bool:
        busy_turn = self.turn is not None and not self.turn.done()
        return busy_turn or (self.handler is not None and self.handler.is_processing)

    def tasks(self) -> Iterator[asyncio.Task[Any]]:
        # The running turn's task is its consumer's, unless a caller ran it apart.
        yield from dict.fromkeys(task for task in (self.consumer, self.turn) if task is not None)


class SourceRegistry:
    """The live sources by name; creates them with their session and opens their handler."""

    __slots__ = ("_clock", "_creating", "_engine", "_retired", "_sources")

    def __init__(self, engine: Engine, clock: MonotonicClock) -> None:
        self._engine = engine
        self._clock = clock
        self._sources: dict[str, SourceState] = {}
        self._creating = asyncio.Lock()
        #: Retired states whose consumer or turn has not ended yet (``close`` cancels them).
        self._retired: list[SourceState] = []

    def __len__(self) -> int:
        return len(self._sources)

    def get(self, source: str) -> SourceState | None:
        """The live state of ``source`` (``None``: not in memory; nothing is created)."""
        return self._sources.get(source)

    def within(self, source: str) -> list[SourceState]:
        """The live states of ``source`` and of its threads (``source:…``)."""
        return [
            state
            for name, state in self._sources.items()
            if name == source or name.startswith(f"{source}:")
        ]

    async def current_session(self, source: str) -> int | None:
        """The session ``source`` talks to now, if it has one (nothing is created)."""
        state = self._sources.get(source)
        if state is not None:
            return state.session_id
        return await self._engine.store.sessions.active_for_source(source)

    async def state(self, source: str, *, agent_id: str | None = None) -> SourceState:
        """The live state of ``source``, created with its session when it has none."""
        state = self._sources.get(source)
        if state is not None:
            return state
        async with self._creating:  # two first messages must not make two sessions
            state = self._sources.get(source)
            if state is None:
                session = await self._engine.store.sessions.for_source(
                    source, agent_id=agent_id or "main"
                )
                state = SourceState(source, session.id, last_active=self._clock())
                self._sources[source] = state
        return state

    async def handler(self, state: SourceState) -> ChatSessionHandler:
        """The handler of the source's current session, with the source's pinned model."""
        handler = state.handler
        if handler is None or handler.session.id != state.session_id:
            handler = await self._engine.open_session(state.session_id)
            model = await self._engine.store.sessions.source_model(state.name)
            if model is not None and model in self._engine.models.names:
                handler.preferred_model = model
            state.handler = handler
        return handler

    def forget(self, source: str) -> None:
        """Drop ``source``'s state unless it has work here (the next use reads it again)."""
        state = self._sources.get(source)
        if state is not None and state.is_idle and not state.is_processing:
            del self._sources[source]

    def retire(self, state: SourceState) -> None:
        """``state`` belongs to an earlier tenure of its source (a fleet took the source
        anew while its turn still ran or waited here): out of the registry, its queued
        work dropped (the rows stay), acting on nothing more; the next use of the source
        reads a fresh state (its current session) from the database."""
        state.retired = True
        state.resume_first = False
        state.inbox.clear()
        state.inbox.seen.clear()
        if self._sources.get(state.name) is state:
            del self._sources[state.name]
        self._retired = [s for s in self._retired if not _ended(s)] + [state]

    def tasks(self) -> Iterator[asyncio.Task[Any]]:
        """Every source's consumer and turn task, retired ones' too (``ChatHub.close``
        cancels them)."""
        for state in [*self._sources.values(), *self._retired]:
            yield from state.tasks()

    def evict_idle(self, idle_s: float, now: float | None = None) -> int:
        """Drop sources with no queued message, no turn and no activity for ``idle_s``."""
        now = self._clock() if now is None else now
        idle = [
            name
            for name, state in self._sources.items()
            if state.consumer is None
            and len(state.inbox) == 0
            and not state.is_processing
            and now - state.last_active >= idle_s
        ]
        for name in idle:
            del self._sources[name]
        return len(idle)

    async def sweep(self, idle_s: float, sleep: Sleep) -> None:
        """Evict idle sources every ``idle_s / 4`` (at least every second), forever."""
        interval = max(idle_s / 4, 1.0)
        while True:
            await sleep(interval)
            self.evict_idle(idle_s)


def _ended(state: SourceState) -> bool:
    return all(task.done() for task in state.tasks())
