"""``ChatHub``: every platform adapter talks to one hub.

One live session per source; one durable FIFO inbox and at most one consumer task per
source; messages that arrive during a turn steer it; every turn's events on one
broadcast; background notifications delivered into the home chat through the agent.

The hub is the public surface; each concern is a collaborator of its own (one file each):
``SourceRegistry`` (live sources), ``MessageIntake`` (accept, /stop, /new),
``InboxConsumer`` (turns in order), ``FailedTurns``, ``Recovery`` (at start),
``AdapterRegistry`` (what adapters registered), ``HubEvents``, ``BackgroundDelivery``
(notifications, injected results), ``Decisions`` and ``SessionControls``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from engine.approval.deciders import Decider
from engine.config import HubConfig
from engine.core import Decided, Engine
from engine.hub.adapters import AdapterRegistry, SourceDefaults
from engine.hub.background.delivery import BackgroundDelivery
from engine.hub.background.home import HomeSource
from engine.hub.background.notifications import NotificationBatcher
from engine.hub.background.visiting import Visitors
from engine.hub.controls import SessionControls
from engine.hub.decisions import Decisions
from engine.hub.events import HubEvents, SourceEvents
from engine.hub.fleet.ownership import FleetConfig, SourceOwnership
from engine.hub.fleet.relay import EventRelay
from engine.hub.fleet.work import FleetWork
from engine.hub.placement import LocalPlacement, Placement
from engine.hub.protocols import (
    AnswerHook,
    FailureHook,
    MonotonicClock,
    Publish,
    Sleep,
    TurnContext,
)
from engine.hub.tasks import BackgroundTasks
from engine.hub.turns.consumer import InboxConsumer
from engine.hub.turns.failures import FailedTurns
from engine.hub.turns.intake import MessageIntake
from engine.hub.turns.recovery import Recovery
from engine.hub.turns.sources import SourceRegistry
from engine.hub.types import Choice, Notification, SendOptions, validate_source
from engine.session.context.compaction import CompactionResult
from engine.session.outcomes import TurnResult
from engine.store.inbox import InboxItem
from engine.store.leases import Leases
from engine.store.notify import Notifier
from engine.store.queue import QueuedRow
from engine.store.views import SessionUsage
from engine.tools.preview import ApprovalPreview

__all__ = ["ChatHub"]


class ChatHub:
    """The hub's public surface: each method checks its source and hands the work to the
    collaborator that owns it; the constructor wires them, each given what it uses."""

    def __init__(
        self,
        engine: Engine,
        config: HubConfig | None = None,
        *,
        default_home: str = "console",
        recover_prefix: str = "",
        clock: MonotonicClock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        fleet: FleetConfig | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        """``recover_prefix``: at start, only the sources starting with it are resumed and
        their queued messages taken (``chathub chat`` takes only ``console``'s, leaving
        the chats to the service). ``fleet``: one of several processes on one PostgreSQL
        database (``engine/hub/fleet/work.py``), told of each other's work by ``notifier``."""
        self.engine = engine
        self.config = config = config or HubConfig()
        self._sleep = sleep
        store = engine.store
        self._home = HomeSource(store.settings, default_home, notifier if fleet else None)
        self._tasks = BackgroundTasks()
        self._events = HubEvents()
        #: In a fleet, events also go to (and come from) the other processes (``relay.py``).
        self.relay = EventRelay(notifier, self._events) if fleet and notifier else None
        publish: Publish = self.relay.publish if self.relay else self._events.publish
        self._adapters = AdapterRegistry(publish)
        self._sources = SourceRegistry(engine, clock)
        failed = FailedTurns(store, self._adapters)
        #: In a fleet: the sources this process works, and how work moves between processes.
        self.fleet: FleetWork | None = None
        # Where each source's work runs: the role is chosen here, once; every collaborator
        # makes the same calls on either.
        self.placement: Placement
        if fleet is not None:
            ownership = SourceOwnership(Leases(store.db), fleet, sleep=sleep)
            self.fleet = self.placement = FleetWork(
                engine, self._sources, ownership, notifier, sleep, self.relay
            )
        else:
            recovery = Recovery(engine, self._sources, recover_prefix)
            self.placement = LocalPlacement(engine, self._sources, recovery.run)
        placement = self.placement
        self._consumer = InboxConsumer(
            self._sources,
            self._adapters,
            failed,
            placement,
            store.db,
            publish,
            config,
            clock,
            sleep,
        )
        self._intake = MessageIntake(
            store, self._sources, self._consumer, placement, publish, config
        )
        self._background = BackgroundDelivery(
            engine, self._sources, self._adapters, self._home, self._tasks, placement, clock
        )
        self._batcher = NotificationBatcher(self._background.deliver, config.notify_window_s, sleep)
        self._started = asyncio.Event()
        self._decisions = Decisions(
            engine, self._sources, self._adapters, placement, publish, config
        )
        self._controls = SessionControls(engine, self._sources, placement)
        #: Sessions no chat owns (a scheduled job's run) serving a chat's user, asking there.
        self.visiting = Visitors(engine, self._sources, self._adapters, self._decisions)

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Resume what a crash interrupted, re-queue accepted messages, start the services."""
        await self._home.load()
        self._spawn(self._home.watch())
        self._spawn(self._batcher.run())
        self._spawn(self._sources.sweep(self.config.idle_evict_s, self._sleep))
        # One process recovers everything a crash left; a fleet's scan takes, source by
        # source, what no live process holds (a dead one's turns and queued messages).
        await self.placement.start(self._consumer.ensure)
        self._started.set()

    async def until_started(self) -> None:
        """Until ``start`` recovered what a stop left: a front end takes no message before
        (one stored while the hub recovered was queued twice and answered twice until
        2026-12-06, found by review)."""
        await self._started.wait()

    async def close(self) -> None:
        """Stop the tasks. Turns in flight stay as they are and are resumed at next start."""
        self._consumer.stop()
        tasks = [*self._tasks.running(), *self._sources.tasks()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.placement.close()  # a fleet lets the sources go: the others take them
        self._events.close()

    def register(self, prefix: str, defaults: SourceDefaults) -> None:
        """Defaults for every source starting with ``prefix`` (longest prefix wins)."""
        self._adapters.register(prefix, defaults)

    def add_turn_context(self, context: TurnContext) -> None:
        """``context(source, metadata)`` adds dynamic system content to every turn (after
        the cache-stable prefix), fetched as the turn starts."""
        self._adapters.add_context(context)

    def on_answer(self, prefix: str, hook: AnswerHook) -> None:
        """``hook(source, content)`` may return work for the transaction storing an answer.

        For the sources starting with ``prefix`` (an adapter's own): the root answer of
        each turn and the hook's rows commit together, before ``Done`` is published.
        """
        self._adapters.on_answer(prefix, hook)

    def on_failure(self, prefix: str, hook: FailureHook) -> None:
        """``hook(source, notice)`` may return work for the transaction that ends a failed
        turn of a source starting with ``prefix`` (every model failed, or it raised): its
        unanswered messages are marked failed and the hook's rows (the notice's delivery
        record, given the failure's key) commit together. The ``Error`` published next is
        then a ``FailureNotice`` carrying that key."""
        self._adapters.on_failure(prefix, hook)

    def events(
        self, source: str | None = None, *, capacity: int | None = None, remote: bool = False
    ) -> SourceEvents:
        """Subscribe to the events of ``source`` (all sources when ``None``). ``remote``: in
        a fleet, other processes' turns' too (``HubEvent.remote``; a gap: ``RemoteLagged``),
        for viewers only: a subscriber that delivers them would send their answers again."""
        return self._events.subscribe(source, capacity, remote=remote)

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
        return await self._intake.accept(source, text, options, also, redelivered_if_lost)

    async def amend(
        self,
        source: str,
        key: str,
        value: Any,
        text: str,
        *,
        by: str | None = None,
        threads: bool = False,
    ) -> bool:
        """A person's correction of their message that still waits for its turn (the one
        whose metadata has ``key`` = ``value``: the platform's id of it): the turn reads
        it as corrected. False: it was read already, or never waited (an idle chat's
        message is read at once). ``by``: only a message this person sent; ``threads``:
        one in a thread of ``source`` too."""
        source = validate_source(source)
        return await self._intake.amend(source, key, value, text, by, threads)

    async def withdraw(
        self, source: str, key: str, value: Any, *, by: str | None = None, threads: bool = False
    ) -> bool:
        """A person's message that still waits for its turn taken back (they deleted it):
        it is not read. False: it was read already, or never waited. ``key``, ``value``,
        ``by`` and ``threads`` as in ``amend``."""
        source = validate_source(source)
        return await self._intake.withdraw(source, key, value, by, threads)

    async def cancel(self, source: str) -> int:
        """``/stop``: drop the queued messages, stop the turn; how many messages were dropped."""
        return await self._intake.stop(validate_source(source))

    async def clear(self, source: str, *, also: Callable[[Connection], None] | None = None) -> int:
        """``/new``, ``/clear``: a fresh session; the queued messages and the turn are dropped.
        ``also`` commits with the fresh session (the command's event marked handled)."""
        return await self._intake.clear(validate_source(source), also)

    async def inject(
        self,
        session_id: int,
        tool_name: str,
        payload: str,
        reasoning: str,
        *,
        also: Callable[[Connection], None] | None = None,
    ) -> None:
        """Bring a background result into a session's conversation (e.g. an async task's
        ``task_completed``) and resume it; its events go to the session's source. ``also``
        commits with it (the sender's record of the delivery)."""
        await self._background.inject(session_id, tool_name, payload, reasoning, also=also)

    async def resume(self, source: str) -> TurnResult | None:
        """Continue the source's interrupted turn where the source runs: here, holding it
        (in a fleet once its owner let it go: a resume beside the owner's running turn
        ran the turn twice). ``None``: nothing was interrupted."""
        source = validate_source(source)
        async with self.placement.holding(source):
            state = await self._sources.state(source)
            return await self._consumer.resume(state)

    def is_processing(self, source: str) -> bool:
        state = self._sources.get(source)
        return state is not None and state.is_processing

    def has_work(self, source: str) -> bool:
        """A turn runs here for ``source``, or its messages wait here for one."""
        state = self._sources.get(source)
        return state is not None and not state.is_idle

    async def is_busy(self, source: str) -> bool:
        """``is_processing``, or (in a fleet) another process holds the source."""
        if self.is_processing(source):
            return True
        return await self.placement.worked_elsewhere(source)

    # -- human decisions -----------------------------------------------------------------

    async def decide(
        self,
        tool_call_id: int,
        choice: Choice,
        *,
        decider: Decider,
        note: str = "",
        by: str | None = None,
        source: str | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> Decided:
        """The one door for a human's decision on a gated call, from every surface.

        ``source``: the chat it comes from (a card's button, a reply to the card): a call
        of another chat is refused (``InboxError`` ``other_session``). Without it (the web
        inbox, the API, an operator) the chat is found from the call's own row. ``note``:
        a rejection's reason; ``by`` names a decider away from the chat, whose cards
        there close with it; ``also`` commits with the decision (a reason's message
        marked handled). ``NotPermitted`` when ``decider`` may not decide it."""
        return await self._decisions.decide(
            tool_call_id, choice, decider=decider, note=note, by=by, source=source, also=also
        )

    async def answer(
        self,
        request_id: int,
        answer: str,
        *,
        source: str | None = None,
        also: Callable[[Connection], None] | None = None,
        by: str | None = None,
    ) -> Decided:
        """The one door for an answer to the agent's question (``source`` and ``by`` as
        for ``decide``; ``also`` commits with the answer: the message that gave it marked
        handled)."""
        return await self._decisions.answer(request_id, answer, source=source, also=also, by=by)

    async def decision_refusal(self, tool_call_id: int, decider: Decider) -> str | None:
        """Why ``decider`` may not decide the call now (``None``: they may, or it is closed);
        for a surface to answer at once. The decision is checked again when recorded."""
        return await self.engine.approvals.refusal(tool_call_id, decider)

    async def answer_refusal(self, question_id: int, decider: Decider) -> str | None:
        """Why ``decider`` may not answer the agent's question (``None``: they may); a
        message refused is a message (``APPROVERS``, the broker's ``answer_refusal``)."""
        return await self.engine.approvals.answer_refusal(question_id, decider)

    async def who_may_decide(self, tool_call_id: int) -> str:
        """The line an approval card shows about who may decide it (``APPROVERS``)."""
        return await self.engine.approvals.who_may_decide(tool_call_id)

    async def session_id(self, source: str) -> int:
        """The session ``source`` talks to now (created when it has none yet)."""
        return (await self.placement.current(validate_source(source))).session_id

    async def cancel_session(self, session_id: int) -> None:
        """The one door for stopping a session from outside its chat (a job's run, the
        API): its turn ends with its approvals and questions, here or on the process of
        the fleet that runs it. Nothing happens to a session no process runs."""
        if not self.engine.cancel_session(session_id):
            await self.placement.stop_session(session_id)

    async def current_session(self, source: str) -> int | None:
        """The session ``source`` talks to now, if it has one (nothing is created)."""
        return await self._sources.current_session(source)

    async def pending_approvals(
        self, session_id: int | None = None, *, shown_in: str | None = None
    ) -> list[InboxItem]:
        """Calls waiting for a decision: a session's, or those asking in ``shown_in``."""
        return await self.engine.pending_approvals(session_id, shown_in=shown_in)

    async def preview(self, item: InboxItem) -> ApprovalPreview | None:
        """What waiting call ``item`` would do, as its card showed it when asked."""
        return await self.engine.preview_pending(item)

    async def pending_questions(self, session_id: int | None = None) -> list[InboxItem]:
        return await self.engine.pending_questions(session_id)

    async def waiting_messages(self, source: str) -> list[QueuedRow]:
        """The people's messages ``source`` took that wait for their turn, oldest first."""
        rows = await self.engine.store.queue.pending(validate_source(source))
        return [row for row in rows if not row.is_synthetic]

    def leave_waiting(self, session_id: int) -> int:
        """The session's turn stops waiting for its decisions and answers (its surface
        went away): the calls stay pending, asked again when the session resumes."""
        return self.engine.approvals.close_session(session_id)

    @property
    def workspace_root(self) -> Path:
        """The directory the agent's file tools work in (uploads land under it)."""
        return self.engine.workspace.root

    async def is_current(self, source: str, session_id: int) -> bool:
        """Whether ``session_id`` is the session ``source`` talks to now (nothing is created)."""
        return await self.current_session(source) == session_id

    # -- notifications -------------------------------------------------------------------

    def notify(self, notification: Notification) -> None:
        """Queue a notification; bursts are delivered together to the target (or home)."""
        self._batcher.push(notification)

    @property
    def home(self) -> str:
        return self._home.source

    def use_default_home(self, source: str) -> None:
        """Where notifications go while no home was chosen (``/sethome`` still wins): a
        front end that found its owner's chat after start (Discord's DM with the owner)."""
        self._home.use_default(source)

    async def set_home(self, source: str) -> None:
        await self._home.set(source)

    # -- session settings ----------------------------------------------------------------

    async def context_info(self, source: str) -> SessionUsage:
        """Token use of the last answer (how full the context is) and the session's totals."""
        return await self._controls.usage(validate_source(source))

    async def cost_info(self, source: str) -> SessionUsage:
        """The session's spend, sub-agents included."""
        return await self.context_info(source)

    async def force_compact(self, source: str) -> CompactionResult | None:
        """``/compact``: summarise the conversation now; ``None`` when there is too little.
        ``CompactionError`` when compaction is not enabled or the summary failed."""
        return await self._controls.force_compact(validate_source(source))

    async def reset_tools(self, source: str) -> int:
        """``/resettools``: revoke the tool groups the session activated."""
        return await self._controls.reset_tools(validate_source(source))

    def list_models(self) -> list[str]:
        return self._controls.list_models()

    async def selected_model(self, source: str) -> str:
        return await self._controls.selected_model(validate_source(source))

    async def select_model(self, source: str, model: str) -> str:
        """Pin the source to a configured model, or ``auto`` (the configured order)."""
        return await self._controls.select_model(validate_source(source), model)

    # -- eviction ------------------------------------------------------------------------

    def evict_idle(self, now: float | None = None) -> int:
        """Drop sources idle for ``idle_evict_s`` from memory (their state is stored)."""
        return self._sources.evict_idle(self.config.idle_evict_s, now)

    @property
    def live_sources(self) -> int:
        return len(self._sources)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self._tasks.spawn(work)
