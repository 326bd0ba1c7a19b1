"""``InboxConsumer``: per source one consumer task, one turn at a time, in arrival order.

The consumer exists while a source has work: created when a message arrives, gone when
its inbox is empty. Whatever a turn raises ends that turn only (``FailedTurns`` records
it) and the consumer goes on; a cancellation (the hub closing) ends the consumer.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine
from typing import Any

from engine.config import HubConfig
from engine.hub.adapters import AdapterRegistry
from engine.hub.placement import Placement
from engine.hub.protocols import MonotonicClock, Publish, Sleep
from engine.hub.turns.failures import CRASH_NOTICE, FailedTurns
from engine.hub.turns.inbox import Unit, settle
from engine.hub.turns.sources import SourceRegistry, SourceState
from engine.session.outcomes import TurnResult
from engine.store.db import Database
from engine.store.fencing import Fenced, fenced

__all__ = ["InboxConsumer"]

log = logging.getLogger(__name__)


class InboxConsumer:
    """Starts a source's consumer when work arrives and runs its turns until the inbox is empty."""

    __slots__ = (
        "_adapters",
        "_clock",
        "_closing",
        "_config",
        "_db",
        "_failed",
        "_placement",
        "_publish",
        "_sleep",
        "_sources",
    )

    def __init__(
        self,
        sources: SourceRegistry,
        adapters: AdapterRegistry,
        failed: FailedTurns,
        placement: Placement,
        db: Database,
        publish: Publish,
        config: HubConfig,
        clock: MonotonicClock,
        sleep: Sleep,
    ) -> None:
        self._sources = sources
        self._adapters = adapters
        self._failed = failed
        self._placement = placement
        self._db = db
        self._publish = publish
        self._config = config
        self._clock = clock
        self._sleep = sleep
        self._closing = False

    def stop(self) -> None:
        """The hub is closing: no new consumers, and a cancelled turn ends its consumer too
        (any other cancellation is a /stop of that turn only)."""
        self._closing = True

    def ensure(self, state: SourceState) -> None:
        """Start the source's consumer unless it runs (or the hub is closing)."""
        if state.consumer is None and not self._closing:
            state.consumer = asyncio.create_task(self._consume(state), name=f"hub:{state.name}")

    async def resume(self, state: SourceState) -> TurnResult | None:
        """Continue the source's interrupted turn (``None``: nothing was interrupted)."""
        handler = await self._sources.handler(state)
        defaults = self._adapters.defaults_for(state.name)
        dynamic = await self._adapters.dynamic(state.name, None, defaults.extra_system_dynamic)
        bridge = self._adapters.bridge(state.name, state.session_id)
        return await handler.resume_turn(
            extra_system_static=defaults.extra_system_static,
            extra_system_dynamic=dynamic,
            tail_reminder=defaults.tail_reminder,
            interface_tools=tuple(defaults.interface_tools),
            emit=bridge,
            records=bridge,
        )

    async def _consume(self, state: SourceState) -> None:
        """The source's only consumer: one turn at a time, in arrival order."""
        try:
            await self._work(state)
        finally:
            state.consumer = None
            state.last_active = self._clock()
            if self._works(state) and state.has_waiting_work and not self._closing:
                self.ensure(state)  # pushed (or decided) while this one was finishing

    async def _work(self, state: SourceState) -> None:
        # A turn may have been cut by another process of a fleet (or by this one, while
        # its lease was lost): resume it before a new turn would drop its message.
        if not state.resume_first and await self._placement.cut(state):
            state.resume_first = True
        await self._resume_if_cut(state)
        if self._config.debounce_s > 0:
            await self._sleep(self._config.debounce_s)  # take a burst as one queue
        while True:
            try:
                while True:
                    if not await self._resume_if_cut(state):
                        state.inbox.clear()  # the source runs elsewhere now (rows stay)
                        break
                    unit = state.inbox.take()
                    if unit is None:
                        break
                    await self._dispatch(state, unit)
            finally:
                if not self._closing:  # a fleet lets the source go, unless a row came in
                    await self._placement.idle(state)
            if not state.has_waiting_work or not self._works(state):
                return

    def _works(self, state: SourceState) -> bool:
        """Whether ``state``'s source is this process's to work, under this state (a
        retired one's tenure is over, though the source may be held again)."""
        return not state.retired and self._placement.owns(state.name)

    async def _resume_if_cut(self, state: SourceState) -> bool:
        """The cut turn first, when there is one (found at the start, or marked since: a
        decision for it, a turn fenced out and the source taken again); whether the
        source is still this process's to work."""
        if not self._works(state):
            return False
        if state.resume_first:
            state.resume_first = False
            await self._run_turn(state, None, self.resume(state))
        return True

    async def _dispatch(self, state: SourceState, unit: Unit) -> None:
        # Prepared inside the turn's guard: a failure there (the database, the agent's
        # lookup) is the turn's, told and recorded; until 2026-12-07 it killed the
        # consumer and the message waited for a restart (found by review).
        state.inbox.in_hand = unit  # an edit may still reach it until it is stored
        try:
            await self._run_turn(state, unit, self._turn(state, unit))
        finally:
            if state.inbox.in_hand is unit:
                state.inbox.in_hand = None
            if state.inbox.taken_back is unit:
                state.inbox.taken_back = None

    async def _turn(self, state: SourceState, unit: Unit) -> None:
        handler = await self._sources.handler(state)
        options = unit.options
        defaults = self._adapters.defaults_for(state.name)
        dynamic = await self._adapters.dynamic(
            state.name,
            options.metadata,
            options.extra_system_dynamic or defaults.extra_system_dynamic,
        )
        bridge = self._adapters.bridge(state.name, state.session_id)

        async def admitted() -> bool:
            # A /stop while this unit was prepared, or while it waited for the session (a
            # notification's turn held it), or its sender deleted it: it is dropped. Until the evening of 2026-12-07 only the first.
            if state.inbox.is_current(unit):
                return True
            await settle(self._db, [unit])
            return False

        def revised() -> str | None:
            """Its words as corrected while it waited (read once the session is free)."""
            state.inbox.in_hand = None  # stored now: an edit from here on is too late
            return unit.words

        await handler.handle_message(
            unit.text,
            is_synthetic=options.is_synthetic,
            metadata=options.metadata,
            extra_system_static=options.extra_system_static or defaults.extra_system_static,
            extra_system_dynamic=dynamic,
            tail_reminder=defaults.tail_reminder,
            interface_tools=tuple(options.interface_tools) or tuple(defaults.interface_tools),
            pending_input=None if options.is_synthetic else state.inbox,
            emit=bridge,
            records=bridge,
            consumes=unit.queued_id,
            also=unit.also,
            admitted=admitted,
            revised=revised,
        )

    async def _run_turn(
        self, state: SourceState, unit: Unit | None, turn: Coroutine[Any, Any, Any]
    ) -> None:
        """Run a turn in the consumer's task (a task per turn would cost two loop
        iterations): whatever it raises ends that turn only, and the consumer goes on."""
        state.turn = asyncio.current_task()
        session_id = state.session_id  # a /clear during the turn moves the source on
        # In a fleet every transaction of the turn checks the lease first, and so does the
        # record of its failure (the new owner may be resuming it already).
        fence = self._placement.turn_fence(state.name)
        try:
            try:
                with fenced(fence):
                    await turn
            except Fenced:
                raise
            except Exception:
                # The user gets one plain sentence; the traceback goes to the log by its id.
                error_id = uuid.uuid4().hex[:6]
                log.exception(
                    "turn of %s failed (error %s); the consumer goes on", state.name, error_id
                )
                notice = CRASH_NOTICE.format(error_id)
                with fenced(fence):
                    event = await self._failed.record(state.name, session_id, unit, notice)
                self._publish(state.name, session_id, event)
        except Fenced as exc:  # nothing of it committed since: the new owner resumes it
            log.warning("turn of %s stopped: %s", state.name, exc)
            self._placement.fenced_out(state)  # its lease was gone: the source is not ours
        finally:
            state.turn = None
            state.last_active = self._clock()
