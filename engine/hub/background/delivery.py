"""``BackgroundDelivery``: background work reaches a conversation through the agent.

Notifications bypass the inbox: under the session's turn lock one commit stores a
synthetic assistant message with a completed ``read_notification`` call (the batch as
JSON), and the session is resumed so the agent writes the user-facing message. A
background result (an async task's ``task_completed``) is injected the same way.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable

from sqlalchemy.engine import Connection

from engine.core import Engine
from engine.hub.adapters import AdapterRegistry
from engine.hub.background.home import HomeSource
from engine.hub.placement import Placement
from engine.hub.protocols import MonotonicClock
from engine.hub.tasks import BackgroundTasks
from engine.hub.turns.bridge import TurnBridge
from engine.hub.turns.sources import SourceRegistry, SourceState
from engine.hub.types import NoticeWithdrawn, Notification
from engine.session.outcomes import Final

__all__ = ["BackgroundDelivery"]

log = logging.getLogger(__name__)


class BackgroundDelivery:
    """Delivers notification batches to their targets (or home) and injects tool results."""

    __slots__ = ("_adapters", "_clock", "_engine", "_home", "_placement", "_sources", "_tasks")

    def __init__(
        self,
        engine: Engine,
        sources: SourceRegistry,
        adapters: AdapterRegistry,
        home: HomeSource,
        tasks: BackgroundTasks,
        placement: Placement,
        clock: MonotonicClock,
    ) -> None:
        self._engine = engine
        self._sources = sources
        self._adapters = adapters
        self._home = home
        self._tasks = tasks
        self._placement = placement
        self._clock = clock

    async def deliver(self, batch: list[Notification]) -> None:
        """Group a batch by target (unknown targets go home) and deliver each group."""
        try:
            groups = await self._by_target(batch)
        except Exception:
            log.exception("finding the targets of %d notification(s) failed", len(batch))
            await _undelivered(batch)
            return
        for target, items in groups.items():
            self._tasks.spawn(self._deliver_to(target, items))

    async def _by_target(self, batch: list[Notification]) -> dict[str, list[Notification]]:
        sessions = self._engine.store.sessions
        targets = {n.target for n in batch if n.target is not None}
        known = {t for t in targets if await sessions.active_for_source(t) is not None}
        home = self._home.source
        by_target: dict[str, list[Notification]] = defaultdict(list)
        for notification in batch:
            target = notification.target or home
            if notification.target is not None and target not in known:
                log.warning(
                    "notification for unknown target %r delivered to the home source %r",
                    notification.target,
                    home,
                )
                target = home
            by_target[target].append(notification)
        return by_target

    async def _deliver_to(self, target: str, items: list[Notification]) -> None:
        stored = False

        async def on_stored() -> None:
            nonlocal stored
            stored = True
            for item in items:
                if item.on_delivered is not None:
                    await item.on_delivered()

        # In a fleet the chat's owner may be another process: it waits for it. A failure
        # ends inside the hold, so the chat is let go as after any delivery.
        async with self._placement.holding(target):
            try:
                await self._deliver_here(await self._sources.state(target), items, on_stored)
            except NoticeWithdrawn as told:  # another worker told it first: nothing lost
                log.info("a notification for %s was withdrawn: %s", target, told)
            except Exception:
                log.exception("notification turn for %s failed", target)
        if not stored:
            await _undelivered(items)

    async def _deliver_here(
        self,
        state: SourceState,
        items: list[Notification],
        on_stored: Callable[[], Awaitable[None]],
    ) -> None:
        handler = await self._sources.handler(state)
        defaults = self._adapters.defaults_for(state.name)
        payload = json.dumps([n.to_json() for n in items], ensure_ascii=False)
        try:
            bridge = self._adapters.bridge(state.name, state.session_id)
            result = await handler.deliver_notifications(
                payload,
                interface_tools=tuple(defaults.interface_tools),
                emit=bridge,
                records=bridge,
                also=_delivered_in(items),
                on_stored=on_stored,
            )
            if isinstance(result, Final):
                for item in items:
                    if item.on_answered is not None:
                        await item.on_answered(result.message_id)
        finally:
            state.last_active = self._clock()

    async def inject(
        self,
        session_id: int,
        tool_name: str,
        payload: str,
        reasoning: str,
        *,
        also: Callable[[Connection], None] | None = None,
    ) -> None:
        """Bring a background result into a session's conversation and resume it; its events
        go to the session's source when that source still talks to it (else nowhere).
        ``also`` commits with it."""
        sessions = self._engine.store.sessions
        session = await sessions.get(session_id)
        if session is None:  # no chat to hold: the engine says the session is unknown
            await self._inject_here(session_id, tool_name, payload, reasoning, also)
            return
        async with self._placement.holding(session.source):
            await self._inject_here(session_id, tool_name, payload, reasoning, also)

    async def _inject_here(
        self,
        session_id: int,
        tool_name: str,
        payload: str,
        reasoning: str,
        also: Callable[[Connection], None] | None,
    ) -> None:
        sessions = self._engine.store.sessions
        session = await sessions.get(session_id)
        live = (
            session is not None and await sessions.active_for_source(session.source) == session_id
        )
        state = await self._sources.state(session.source) if live and session is not None else None
        if state is not None and state.session_id == session_id:
            handler = await self._sources.handler(state)
            bridge: TurnBridge | None = self._adapters.bridge(state.name, state.session_id)
        else:
            handler, bridge = await self._engine.open_session(session_id), None
        await handler.inject_tool_result(
            tool_name,
            payload,
            reasoning=reasoning,
            emit=bridge,
            records=bridge,
            also=also,
        )


def _delivered_in(items: list[Notification]) -> Callable[[Connection], None] | None:
    """The senders' records of the delivery, for the transaction that stores it."""
    parts = [item.delivered_in for item in items if item.delivered_in is not None]
    if not parts:
        return None

    def record(conn: Connection) -> None:
        for part in parts:
            part(conn)

    return record


async def _undelivered(items: list[Notification]) -> None:
    """Give notifications that were never stored back to their senders."""
    for item in items:
        if item.on_undelivered is None:
            continue
        try:
            await item.on_undelivered()
        except Exception:
            log.exception("giving back an undelivered notification failed")
