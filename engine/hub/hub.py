"""``ChatHub``: every platform adapter talks to one hub.

One live session per source; one durable FIFO inbox and at most one consumer task per
source; messages that arrive during a turn steer it; every turn's events on one
broadcast; background notifications delivered into the home chat through the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

from engine.approval.broker import SHORT_BYPASS_SECONDS, BypassRequest
from engine.approval.deciders import Decider
from engine.bus.broadcast import Broadcast, Lagged, Subscription
from engine.bus.system import SessionCancelled
from engine.config import HubConfig
from engine.core import Decided, Engine
from engine.failpoints import failpoint
from engine.hub.inbox import SourceInbox, Unit
from engine.hub.notifications import NotificationBatcher
from engine.hub.protocols import AnswerHook, FailureHook, MonotonicClock, Sleep
from engine.hub.types import (
    DecisionMade,
    FailureNotice,
    HubError,
    HubEvent,
    NewSession,
    Notification,
    SendOptions,
    validate_source,
)
from engine.session.compaction import CompactionResult
from engine.session.events import Error, TurnEvent
from engine.session.handler import ChatSessionHandler
from engine.session.outcomes import Final, TurnResult
from engine.session.protocols import EmitFn, RecordsAnswers
from engine.store.history import AlsoWithKey, AlsoWithRow
from engine.store.queue import consume
from engine.store.views import SessionUsage
from engine.tools.base import Tool

__all__ = ["AUTO_MODEL", "ChatHub", "SourceDefaults", "SourceEvents"]

log = logging.getLogger(__name__)

AUTO_MODEL = "auto"
HOME_KEY = "home_source"
EVENT_CAPACITY = 512
_H = TypeVar("_H")


@dataclass(frozen=True, slots=True)
class SourceDefaults:
    """What an adapter adds to every turn of its sources (``register``)."""

    interface_tools: Sequence[Tool] = ()
    extra_system_static: str | None = None
    extra_system_dynamic: str | None = None
    tail_reminder: str | None = None


@dataclass(eq=False)
class _Source:
    name: str
    session_id: int
    inbox: SourceInbox = field(default_factory=SourceInbox)
    handler: ChatSessionHandler | None = None
    consumer: asyncio.Task[None] | None = None
    turn: asyncio.Task[Any] | None = None
    resume_first: bool = False
    last_active: float = 0.0


class SourceEvents:
    """A subscription to the hub's events of one source (or all): ``HubEvent`` or ``Lagged``."""

    def __init__(self, subscription: Subscription[HubEvent], source: str | None) -> None:
        self._subscription = subscription
        self._source = source

    async def recv(self) -> HubEvent:
        """The next event of the source; raises ``Lagged`` once after falling behind."""
        while True:
            event = await self._subscription.recv()
            if self._source is None or event.source == self._source:
                return event

    def close(self) -> None:
        self._subscription.close()

    def __aiter__(self) -> SourceEvents:
        return self

    async def __anext__(self) -> HubEvent | Lagged:
        try:
            return await self.recv()
        except Lagged as lagged:
            return lagged
        except Exception as exc:  # BusClosed
            raise StopAsyncIteration from exc


#: What the user sees when a turn raised; the id is in the log line with the traceback.
CRASH_NOTICE = "Sorry, your message could not be processed (error {}). Please try again."


def _run_all(conn: Connection, units: Sequence[Callable[[Connection], None]]) -> None:
    for unit in units:
        unit(conn)


def _hook_for(hooks: Sequence[tuple[str, _H]], source: str) -> _H | None:
    """The hook of the longest registered prefix of ``source`` (the list is sorted so)."""
    return next((hook for prefix, hook in hooks if source.startswith(prefix)), None)


def _guarded(hook: FailureHook, source: str, notice: str) -> AlsoWithKey | None:
    try:
        return hook(source, notice)
    except Exception:  # the failure is recorded regardless; the notice goes out live
        log.exception("failure hook for %s failed", source)
        return None


class _Bridge:
    """A turn's events onto the hub's bus, tagged with the source; knows its adapter's hooks."""

    __slots__ = ("_failure_hook", "_hook", "_hub", "_recorded", "_session_id", "_source")

    def __init__(
        self,
        hub: ChatHub,
        source: str,
        session_id: int,
        hook: AnswerHook | None,
        failure_hook: FailureHook | None,
    ) -> None:
        self._hub, self._source, self._session_id, self._hook = hub, source, session_id, hook
        self._failure_hook = failure_hook
        self._recorded: tuple[str, str] | None = None  # (notice, key) stored for delivery

    def __call__(self, event: TurnEvent) -> None:
        recorded = self._recorded
        if recorded is not None and isinstance(event, Error) and event.message == recorded[0]:
            # The failure's notice was stored with its failed mark: the adapter sends that.
            self._recorded = None
            event = FailureNotice(event.message, recorded[1])
        self._hub._publish(self._source, self._session_id, event)

    def answer_unit(self, content: str) -> AlsoWithRow | None:
        return self._hook(self._source, content) if self._hook is not None else None

    def failure_unit(self, notice: str) -> AlsoWithKey | None:
        unit = self._failure_hook(self._source, notice) if self._failure_hook else None
        if unit is None:
            return None

        def record(conn: Connection, key: str) -> None:
            unit(conn, key)
            self._recorded = (notice, key)

        return record


class ChatHub:
    def __init__(
        self,
        engine: Engine,
        config: HubConfig | None = None,
        *,
        default_home: str = "console",
        recover_prefix: str = "",
        clock: MonotonicClock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """``recover_prefix``: at start, only the sources starting with it are resumed and
        their queued messages taken (``chathub chat`` takes only ``console``'s, leaving
        the chats to the service)."""
        self.engine = engine
        self._recover_prefix = recover_prefix
        self.config = config or HubConfig()
        self._default_home = validate_source(default_home)
        self._home: str | None = None
        self._clock = clock
        self._sleep = sleep
        self._sources: dict[str, _Source] = {}
        self._creating = asyncio.Lock()
        self._defaults: list[tuple[str, SourceDefaults]] = []
        self._answer_hooks: list[tuple[str, AnswerHook]] = []
        self._failure_hooks: list[tuple[str, FailureHook]] = []
        self._events: Broadcast[HubEvent] = Broadcast(EVENT_CAPACITY)
        self._batcher = NotificationBatcher(self._deliver, self.config.notify_window_s, sleep)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Resume what a crash interrupted, re-queue accepted messages, start the services."""
        self._home = await self.engine.store.settings.get(HOME_KEY)
        self._spawn(self._batcher.run())
        self._spawn(self._sweep())
        self._spawn(self._watch_system_bus(self.engine.system_bus.subscribe()))
        await self._recover()

    async def close(self) -> None:
        """Stop the tasks. Turns in flight stay as they are and are resumed at next start."""
        self._closing = True
        tasks = [*self._tasks]
        for state in self._sources.values():
            tasks.extend(t for t in (state.consumer, state.turn) if t is not None)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._events.close()

    def register(self, prefix: str, defaults: SourceDefaults) -> None:
        """Defaults for every source starting with ``prefix`` (longest prefix wins)."""
        self._defaults.append((prefix, defaults))
        self._defaults.sort(key=lambda item: len(item[0]), reverse=True)

    def on_answer(self, prefix: str, hook: AnswerHook) -> None:
        """``hook(source, content)`` may return work for the transaction storing an answer.

        For the sources starting with ``prefix`` (an adapter's own): the root answer of
        each turn and the hook's rows commit together, before ``Done`` is published.
        """
        self._answer_hooks.append((prefix, hook))
        self._answer_hooks.sort(key=lambda item: len(item[0]), reverse=True)

    def on_failure(self, prefix: str, hook: FailureHook) -> None:
        """``hook(source, notice)`` may return work for the transaction that ends a failed turn.

        For the sources starting with ``prefix``: when a turn fails (every model failed, or
        it raised), its unanswered messages are marked failed and the hook's rows (the
        notice's delivery record, given the failure's key) commit together. The ``Error``
        published next is then a ``FailureNotice`` carrying that key.
        """
        self._failure_hooks.append((prefix, hook))
        self._failure_hooks.sort(key=lambda item: len(item[0]), reverse=True)

    def events(self, source: str | None = None, *, capacity: int | None = None) -> SourceEvents:
        """Subscribe to the events of ``source`` (all sources when ``None``)."""
        return SourceEvents(self._events.subscribe(capacity), source)

    # -- messages ------------------------------------------------------------------------

    async def send_message(
        self,
        source: str,
        text: str,
        options: SendOptions | None = None,
        *,
        also: Callable[[Connection], None] | None = None,
        redelivered_if_lost: bool = False,
    ) -> int | None:
        """Accept a message: stored durably, then queued; returns its queue id.

        It seeds a turn of its own, or is injected into the running one at its next round
        boundary. Turn errors reach the source as ``Error`` events, not as exceptions here.
        ``also`` runs in the transaction that stores the message (adapter bookkeeping).

        ``redelivered_if_lost``: the caller keeps its own durable record of the message
        until ``also`` marks it handled (a stored Telegram update) and would hand it over
        again after a crash. Then a message for an idle source skips the queue row: it is
        stored once, as the turn's user row, together with ``also`` (``None`` is returned).
        """
        options = options or SendOptions()
        validate_source(source)
        self._check_text(text, options)
        state = await self._state(source, agent_id=options.agent_id)
        if redelivered_if_lost and also is not None and self._idle(state):
            state.inbox.push(text, options, None, also)  # no await since the check
            self._ensure_consumer(state)
            return None
        row = await self.engine.store.queue.push(
            source,
            state.session_id,
            text,
            is_synthetic=options.is_synthetic,
            metadata=options.metadata,
            options=options.to_json(),
            also=also,
        )
        state.inbox.push(text, options, row.id)
        self._ensure_consumer(state)
        return row.id

    async def cancel(self, source: str) -> int:
        """``/stop``: drop the queued messages, stop the turn; how many messages were dropped."""
        validate_source(source)
        state = self._sources.get(source)
        if state is None:
            return 0
        dropped = state.inbox.clear()
        if state.handler is not None:
            state.handler.cancel()
        await self._drop(source, dropped)
        return len(dropped)

    async def _drop(self, source: str, units: Sequence[Unit]) -> None:
        """Forget dropped messages durably: queue rows removed, callers' records settled."""
        await self.engine.store.queue.drop(source)
        await self._settle(units)

    async def _settle(self, units: Sequence[Unit]) -> None:
        """Run the ``also`` of dropped messages that have no queue row (only those carry one:
        a queued message's ``also`` ran with its queue row)."""
        settle = [unit.also for unit in units if unit.also is not None]
        if settle:
            await self.engine.store.db.run(_run_all, settle)

    def _idle(self, state: _Source) -> bool:
        return (
            state.consumer is None
            and state.turn is None
            and not len(state.inbox)
            and not state.resume_first
        )

    async def clear(self, source: str) -> int:
        """``/new``, ``/clear``: a fresh session; the queued messages and the turn are dropped."""
        validate_source(source)
        state = await self._state(source)
        dropped = state.inbox.clear()
        if state.handler is not None:
            state.handler.cancel()
        await self._drop(source, dropped)
        previous = state.session_id
        fresh = await self.engine.store.sessions.for_source(source, fresh=True)
        state.session_id, state.handler = fresh.id, None
        self._publish(source, fresh.id, NewSession(fresh.id, previous))
        return fresh.id

    async def inject(
        self,
        session_id: int,
        tool_name: str,
        payload: str,
        reasoning: str,
        *,
        on_stored: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Bring a background result into a session's conversation (e.g. an async task's
        ``task_completed``) and resume it; its events go to the session's source."""
        sessions = self.engine.store.sessions
        session = await sessions.get(session_id)
        live = (
            session is not None and await sessions.active_for_source(session.source) == session_id
        )
        state = await self._state(session.source) if live and session is not None else None
        if state is not None and state.session_id == session_id:
            handler = await self._handler(state)
            emit: EmitFn | None = self._bridge(state)
        else:
            handler, emit = await self.engine.open_session(session_id), None
        await handler.inject_tool_result(
            tool_name, payload, reasoning=reasoning, emit=emit, on_stored=on_stored
        )

    async def resume(self, source: str) -> TurnResult | None:
        """Continue the source's interrupted turn (``None``: nothing was interrupted)."""
        state = await self._state(validate_source(source))
        return await self._resume(state)

    def is_processing(self, source: str) -> bool:
        state = self._sources.get(source)
        if state is None:
            return False
        busy_turn = state.turn is not None and not state.turn.done()
        return busy_turn or (state.handler is not None and state.handler.is_processing)

    # -- human decisions -----------------------------------------------------------------

    async def approve(
        self,
        source: str,
        tool_call_id: int,
        *,
        bypass_secs: float | None = None,
        bypass_scope: str | None = None,
        bypass_value: str | None = None,
        decider: Decider,
        by: str | None = None,
    ) -> Decided:
        """Approve a call of the source's session (refused for another session's call, and
        ``NotPermitted`` when ``decider`` may not decide it).

        ``by`` names a decider away from the chat; the source's adapters are told, so a card
        shown there closes with that name.
        """
        state = await self._state(validate_source(source))
        bypass = None
        if bypass_scope is not None or bypass_secs is not None:
            bypass = BypassRequest(bypass_scope or "all", bypass_value, bypass_secs)
        decided = await self.engine.approve(
            tool_call_id,
            bypass,
            decider=decider,
            session_id=state.session_id,
            emit=self._bridge(state),
        )
        if by is not None:
            outcome = "approve"
            if bypass_scope is not None and bypass_secs is None:
                outcome = "bypass_session"
            elif bypass_secs == SHORT_BYPASS_SECONDS:
                outcome = "bypass_15m"
            self._publish(source, state.session_id, DecisionMade(tool_call_id, outcome, by))
        return decided

    async def reject(
        self,
        source: str,
        tool_call_id: int,
        note: str = "",
        *,
        decider: Decider,
        by: str | None = None,
    ) -> Decided:
        state = await self._state(validate_source(source))
        decided = await self.engine.reject(
            tool_call_id,
            note,
            decider=decider,
            session_id=state.session_id,
            emit=self._bridge(state),
        )
        if by is not None:
            self._publish(source, state.session_id, DecisionMade(tool_call_id, "reject", by, note))
        return decided

    async def decision_refusal(self, tool_call_id: int, decider: Decider) -> str | None:
        """Why ``decider`` may not decide the call now (``None``: they may, or it is closed);
        for a surface to answer at once. The decision is checked again when recorded."""
        return await self.engine.approvals.refusal(tool_call_id, decider)

    async def who_may_decide(self, tool_call_id: int) -> str:
        """The line an approval card shows about who may decide it (``APPROVERS``)."""
        return await self.engine.approvals.who_may_decide(tool_call_id)

    async def session_id(self, source: str) -> int:
        """The session ``source`` talks to now (created when it has none yet)."""
        return (await self._state(validate_source(source))).session_id

    async def is_current(self, source: str, session_id: int) -> bool:
        """Whether ``session_id`` is the session ``source`` talks to now (nothing is created)."""
        state = self._sources.get(source)
        if state is not None:
            return state.session_id == session_id
        return await self.engine.store.sessions.active_for_source(source) == session_id

    async def resolve_question(self, source: str, request_id: int, answer: str) -> Decided:
        state = await self._state(validate_source(source))
        self._check_text(answer, SendOptions())
        return await self.engine.resolve_question(
            request_id, answer, session_id=state.session_id, emit=self._bridge(state)
        )

    # -- notifications -------------------------------------------------------------------

    def notify(self, notification: Notification) -> None:
        """Queue a notification; bursts are delivered together to the target (or home)."""
        self._batcher.push(notification)

    @property
    def home(self) -> str:
        return self._home or self._default_home

    async def set_home(self, source: str) -> None:
        validate_source(source)
        await self.engine.store.settings.set(HOME_KEY, source)
        self._home = source

    # -- session settings ----------------------------------------------------------------

    async def context_info(self, source: str) -> SessionUsage:
        """Token use of the last answer (how full the context is) and the session's totals."""
        state = await self._state(validate_source(source))
        return await self.engine.store.views.usage(state.session_id)

    async def cost_info(self, source: str) -> SessionUsage:
        """The session's spend, sub-agents included."""
        return await self.context_info(source)

    async def force_compact(self, source: str) -> CompactionResult | None:
        """``/compact``: summarise the conversation now; ``None`` when there is too little.

        ``CompactionError`` when compaction is not enabled or the summary failed.
        """
        handler = await self._handler(await self._state(validate_source(source)))
        return await handler.force_compact()

    async def reset_tools(self, source: str) -> int:
        """``/resettools``: revoke the tool groups the session activated."""
        state = await self._state(validate_source(source))
        return await self.engine.store.sessions.reset_tool_grants(state.session_id)

    def list_models(self) -> list[str]:
        return list(self.engine.models.names)

    async def selected_model(self, source: str) -> str:
        state = await self._state(validate_source(source))
        return await self.engine.store.sessions.source_model(state.name) or AUTO_MODEL

    async def select_model(self, source: str, model: str) -> str:
        """Pin the source to a configured model, or ``auto`` (the configured order)."""
        state = await self._state(validate_source(source))
        names = self.list_models()
        chosen = None if model == AUTO_MODEL else model
        if chosen is not None and chosen not in names:
            raise HubError(f"model: {model!r} is not configured; choose one of {names} or 'auto'")
        await self.engine.store.sessions.set_source_model(source, chosen)
        if state.handler is not None:
            state.handler.preferred_model = chosen or state.handler.agent.model
        return model

    # -- eviction ------------------------------------------------------------------------

    def evict_idle(self, now: float | None = None) -> int:
        """Drop sources idle for ``idle_evict_s`` from memory (their state is stored)."""
        now = self._clock() if now is None else now
        idle = [
            name
            for name, state in self._sources.items()
            if state.consumer is None
            and len(state.inbox) == 0
            and not self.is_processing(name)
            and now - state.last_active >= self.config.idle_evict_s
        ]
        for name in idle:
            del self._sources[name]
        return len(idle)

    @property
    def live_sources(self) -> int:
        return len(self._sources)

    # -- internals -----------------------------------------------------------------------

    def _check_text(self, text: str, options: SendOptions) -> None:
        if not isinstance(text, str):
            raise HubError("text: must be a string")
        limit = self.config.max_message_chars
        if len(text) > limit:
            raise HubError(
                f"message is {len(text)} characters long; the limit is {limit}. "
                "Send it as a file instead."
            )
        if not text.strip() and not (options.metadata or {}).get("attachments"):
            raise HubError("message is empty")

    async def _state(self, source: str, *, agent_id: str | None = None) -> _Source:
        state = self._sources.get(source)
        if state is not None:
            return state
        async with self._creating:
            state = self._sources.get(source)
            if state is None:
                session = await self.engine.store.sessions.for_source(
                    source, agent_id=agent_id or "main"
                )
                state = _Source(source, session.id, last_active=self._clock())
                self._sources[source] = state
        return state

    async def _handler(self, state: _Source) -> ChatSessionHandler:
        handler = state.handler
        if handler is None or handler.session.id != state.session_id:
            handler = await self.engine.open_session(state.session_id)
            model = await self.engine.store.sessions.source_model(state.name)
            if model is not None and model in self.list_models():
                handler.preferred_model = model
            state.handler = handler
        return handler

    def _defaults_for(self, source: str) -> SourceDefaults:
        for prefix, defaults in self._defaults:
            if source.startswith(prefix):
                return defaults
        return SourceDefaults()

    def _bridge(self, state: _Source) -> RecordsAnswers:
        hook = _hook_for(self._answer_hooks, state.name)
        return _Bridge(self, state.name, state.session_id, hook, self._failure_hook(state.name))

    def _failure_hook(self, source: str) -> FailureHook | None:
        return _hook_for(self._failure_hooks, source)

    def _publish(self, source: str, session_id: int | None, event: Any) -> None:
        if not self._events.closed:
            self._events.publish(HubEvent(source, session_id, event))

    def _ensure_consumer(self, state: _Source) -> None:
        if state.consumer is None and not self._closing:
            state.consumer = asyncio.create_task(self._consume(state), name=f"hub:{state.name}")

    async def _consume(self, state: _Source) -> None:
        """The source's only consumer: one turn at a time, in arrival order."""
        try:
            if state.resume_first:
                state.resume_first = False
                await self._run_turn(state, None, self._resume(state))
            if self.config.debounce_s > 0:
                await self._sleep(self.config.debounce_s)  # take a burst as one queue
            while (unit := state.inbox.take()) is not None:
                await self._dispatch(state, unit)
        finally:
            state.consumer = None
            state.last_active = self._clock()
            if len(state.inbox) and not self._closing:
                self._ensure_consumer(state)  # pushed while this one was finishing

    async def _dispatch(self, state: _Source, unit: Unit) -> None:
        handler = await self._handler(state)
        if not state.inbox.is_current(unit):
            await self._settle([unit])
            return  # a /stop came while this unit was being prepared: it is dropped
        options = unit.options
        defaults = self._defaults_for(state.name)
        turn = handler.handle_message(
            unit.text,
            is_synthetic=options.is_synthetic,
            metadata=options.metadata,
            extra_system_static=options.extra_system_static or defaults.extra_system_static,
            extra_system_dynamic=options.extra_system_dynamic or defaults.extra_system_dynamic,
            tail_reminder=defaults.tail_reminder,
            interface_tools=tuple(options.interface_tools) or tuple(defaults.interface_tools),
            pending_input=None if options.is_synthetic else state.inbox,
            emit=self._bridge(state),
            consumes=unit.queued_id,
            also=unit.also,
        )
        await self._run_turn(state, unit, turn)

    async def _run_turn(
        self, state: _Source, unit: Unit | None, turn: Coroutine[Any, Any, Any]
    ) -> None:
        """Run a turn in its own task: whatever it raises, the consumer goes on."""
        task = asyncio.create_task(turn)
        state.turn = task
        session_id = state.session_id  # a /clear during the turn moves the source on
        try:
            await task
        except asyncio.CancelledError:
            if self._closing:
                raise
        except Exception:
            # The user gets one plain sentence; the traceback goes to the log under its id.
            error_id = uuid.uuid4().hex[:6]
            log.exception(
                "turn of %s failed (error %s); the consumer goes on", state.name, error_id
            )
            event = await self._end_failed(state, session_id, unit, CRASH_NOTICE.format(error_id))
            self._publish(state.name, session_id, event)
        finally:
            state.turn = None
            state.last_active = self._clock()

    async def _end_failed(
        self, state: _Source, session_id: int, unit: Unit | None, notice: str
    ) -> Error:
        """Record a turn that raised as ended, in one commit with the notice's delivery.

        Its unanswered messages are marked failed (recovery never runs them again), a
        message it never stored leaves the queue or has the caller's record settled (it is
        not handed over again), and the adapter's ``on_failure`` rows are written. The
        returned event is what to publish: ``FailureNotice`` when the notice was recorded.
        """
        hook = self._failure_hook(state.name)
        notice_unit = _guarded(hook, state.name, notice) if hook is not None else None
        recorded: list[str] = []

        def also(conn: Connection, key: str) -> None:
            if unit is not None and unit.queued_id is not None:
                consume(conn, unit.queued_id)  # not stored yet: dropped, never silently
            if unit is not None and unit.also is not None:
                unit.also(conn)
            if notice_unit is not None:
                notice_unit(conn, key)
                recorded.append(key)

        try:
            frame = await self.engine.store.sessions.root_frame(session_id)
            await self.engine.store.history.fail_unanswered(frame.id, also=also)
        except Exception:  # the database failed too: the notice still goes out, live
            log.exception("could not record the failed turn of %s", state.name)
            return Error(notice)
        failpoint("after_failed_turn")
        return FailureNotice(notice, recorded[0]) if recorded else Error(notice)

    async def _resume(self, state: _Source) -> TurnResult | None:
        handler = await self._handler(state)
        defaults = self._defaults_for(state.name)
        return await handler.resume_turn(
            extra_system_static=defaults.extra_system_static,
            extra_system_dynamic=defaults.extra_system_dynamic,
            tail_reminder=defaults.tail_reminder,
            interface_tools=tuple(defaults.interface_tools),
            emit=self._bridge(state),
        )

    async def _recover(self) -> None:
        """At start: interrupted turns are resumed first, then the queued messages, in order."""
        store = self.engine.store
        sources = await store.sessions.all_sources()
        by_session = {session_id: source for source, session_id in sources.items()}
        touched: dict[str, _Source] = {}
        for session_id in await self.engine.interrupted_sessions():
            source = by_session.get(session_id)
            if source is None:
                log.warning("session %s was interrupted but no source uses it", session_id)
                continue
            if not source.startswith(self._recover_prefix):
                continue
            state = touched[source] = await self._state(source)
            state.resume_first = True
        for row in await store.queue.pending():
            if not row.source.startswith(self._recover_prefix):
                continue
            if sources.get(row.source) != row.session_id:
                await store.queue.remove(row.id)  # queued for a session since replaced
                continue
            state = touched[row.source] = await self._state(row.source)
            options = SendOptions.from_row(row.is_synthetic, row.metadata, row.options)
            state.inbox.push(row.content, options, row.id)
        for state in touched.values():
            self._ensure_consumer(state)
        if touched:
            log.info("recovered %d source(s) with interrupted or queued work", len(touched))

    async def _deliver(self, batch: list[Notification]) -> None:
        by_target: dict[str, list[Notification]] = defaultdict(list)
        sessions = self.engine.store.sessions
        targets = {n.target for n in batch if n.target is not None}
        known = {t for t in targets if await sessions.active_for_source(t) is not None}
        for notification in batch:
            target = notification.target or self.home
            if notification.target is not None and target not in known:
                log.warning(
                    "notification for unknown target %r delivered to the home source %r",
                    notification.target,
                    self.home,
                )
                target = self.home
            by_target[target].append(notification)
        for target, items in by_target.items():
            state = await self._state(target)
            self._spawn(self._deliver_to(state, items))

    async def _deliver_to(self, state: _Source, items: list[Notification]) -> None:
        handler = await self._handler(state)
        defaults = self._defaults_for(state.name)
        payload = json.dumps([n.to_json() for n in items], ensure_ascii=False)

        async def stored() -> None:
            for item in items:
                if item.on_delivered is not None:
                    await item.on_delivered()

        try:
            result = await handler.deliver_notifications(
                payload,
                interface_tools=tuple(defaults.interface_tools),
                emit=self._bridge(state),
                on_stored=stored,
            )
            if isinstance(result, Final):
                for item in items:
                    if item.on_answered is not None:
                        await item.on_answered(result.message_id)
        except Exception:
            log.exception("notification turn for %s failed", state.name)
        state.last_active = self._clock()

    async def _sweep(self) -> None:
        interval = max(self.config.idle_evict_s / 4, 1.0)
        while True:
            await self._sleep(interval)
            self.evict_idle()

    async def _watch_system_bus(self, subscription: Subscription[Any]) -> None:
        """Cancelling a session from elsewhere (an API, the scheduler) arrives here."""
        with contextlib.closing(subscription):
            async for event in subscription:
                if isinstance(event, SessionCancelled):
                    self.engine.cancel_session(event.session_id)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
