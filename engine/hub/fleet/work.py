"""``FleetWork``: the hub's work shared by several processes on one PostgreSQL database.

Every accepted message is a row in ``queued_messages`` first (in a fleet there is no
"redeliverable without a queue row": another process may have to read it). Then:

* the process that holds the source's lease (``SourceOwnership``), or claims it now that
  nobody does, pushes the row into the source's inbox and its consumer runs the turn;
* otherwise the row waits for its owner, which is told over ``chathub_work`` (a NOTIFY)
  and pulls the source's rows it has not seen, in queue order;
* every ``scan_interval_s`` each process also looks for work nobody holds: queue rows and
  sessions cut mid-turn of sources whose lease is free or expired (an owner killed with
  ``kill -9``). It claims such a source and resumes it the way a restart would: the
  interrupted turn first, then the queued messages.

A source whose consumer finds its inbox empty is let go (its lease released), so the next
message's process takes it: work spreads, and moves only when an owner dies or sheds it.
A lost lease (renewal failed) stops the source here at once: its inbox is dropped from
memory (the rows stay for the new owner) and the running turn's next transaction fails
behind its fence. ``/stop`` for a source worked elsewhere is sent over ``chathub_stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.core import Engine
from engine.hub.fleet.ownership import SOURCE_LEASE_PREFIX, SourceOwnership, pick
from engine.hub.fleet.relay import EventRelay
from engine.hub.placement import Start, StopHere
from engine.hub.protocols import Sleep
from engine.hub.turns.inbox import queue_message
from engine.hub.turns.sources import SourceRegistry, SourceState
from engine.hub.types import SendOptions
from engine.store.fencing import Fence, Fenced, fenced
from engine.store.leases import live_leases
from engine.store.notify import Notice, Notifier, Resync
from engine.store.schema import queued_messages, sources

__all__ = ["DECISION_CHANNEL", "STOP_CHANNEL", "WORK_CHANNEL", "FleetWork"]

log = logging.getLogger(__name__)

WORK_CHANNEL = "chathub_work"
STOP_CHANNEL = "chathub_stop"
DECISION_CHANNEL = "chathub_decision"


def _never_ours(_conn: Any) -> None:
    raise Fenced("this process does not hold the source's lease")


def _not_started(state: SourceState) -> None:
    raise RuntimeError(f"the fleet's work for {state.name} came before the hub started")


class FleetWork:
    """The fleet's ``Placement``: claims, pulls, scans and lets go of sources (see the
    module's docstring)."""

    #: A decision resumes its turn where the source runs (``decided``), not in place.
    resumes_in_place = False

    def __init__(
        self,
        engine: Engine,
        sources: SourceRegistry,
        ownership: SourceOwnership,
        notifier: Notifier | None,
        sleep: Sleep,
        relay: EventRelay | None = None,
    ) -> None:
        self._engine = engine
        self._sources = sources
        self._start: Start = _not_started  # the hub's, from ``start`` on
        self._running: asyncio.Task[None] | None = None
        self.ownership = ownership
        self._notifier = notifier
        self._sleep = sleep
        self._relay = relay  # started with the membership, closed before the leases go
        #: Sources this process claimed from an owner that had not let them go (metrics).
        self.takeovers = 0
        self._unowned_before: set[str] = set()
        # One claim at a time per source: two at once (a notice's pull and a scan) could
        # each take the source anew and each make it a fresh state, whose consumers would
        # then run one queued row twice.
        self._claiming: dict[str, asyncio.Lock] = {}
        self._pulling: dict[str, asyncio.Lock] = {}
        self._keeping: asyncio.Task[None] | None = None

    def owns(self, source: str) -> bool:
        return self.ownership.owns(source)

    async def current(self, source: str) -> SourceState:
        if self.ownership.owns(source):
            return await self._sources.state(source)
        # What this process kept of a chat it let go may be an older session's: a tap
        # after /new given elsewhere was refused as another session's call (found by
        # review on 2026-12-06).
        self._sources.forget(source)
        state = await self._sources.state(source)
        if state.is_idle:  # read from the database just now
            return state
        # An earlier tenure's turn still runs or waits here: the chat's current session
        # gets a state of its own, not kept (retiring this one would close its waits).
        session_id = await self._engine.store.sessions.active_for_source(source)
        if session_id is None or session_id == state.session_id:
            return state
        return SourceState(source, session_id, last_active=state.last_active)

    def fence(self, source: str) -> Fence | None:
        return self.ownership.fence(source)

    def turn_fence(self, source: str) -> Fence:
        """The lease's fence: a turn's every transaction fails once the lease is gone."""
        return self.ownership.fence(source) or _never_ours

    async def cut(self, state: SourceState) -> bool:
        """Whether the source's session was left mid-turn (by any process)."""
        return bool(await self._engine.store.sessions.interrupted(state.session_id))

    # -- messages --------------------------------------------------------------------------

    async def accept(
        self,
        source: str,
        text: str,
        options: SendOptions,
        also: Callable[[Connection], None] | None,
        redelivered_if_lost: bool = False,
        start: Start | None = None,
    ) -> int:
        """Queue a message, a row always (another process may be the one to run it); run it
        here if the source is ours (claimed now when free), else tell its owner. The queue
        row's id."""
        owned = self.ownership.owns(source)
        chosen = None if owned else pick(source, self.ownership.members)
        if owned or chosen == self.ownership.owner:
            # Claimed (renewed) before the row is written: a lease this process still
            # thought it held may have moved meanwhile (a /new given elsewhere), and the
            # row went to the old session, then dropped as its session's (until
            # 2026-12-07; found by review).
            owned = await self.claim(source)
        if not owned:
            self._sources.forget(source)  # its session as the database has it now
            kept = self._sources.get(source)
            if kept is not None and _busy(kept):
                # An earlier tenure's turn still winds down or waits here, and another
                # process works the chat now: the message is for the chat's current
                # session, not that turn's (it was queued for the old one, and dropped,
                # after a /new given elsewhere; found by review).
                self._retire(kept)
        state = await self._sources.state(source, agent_id=options.agent_id)
        row = await queue_message(self._engine.store, source, state.session_id, text, options, also)
        if owned and self.ownership.owns(source):
            # Through the queue, not straight into the inbox: rows other processes queued
            # for this source before it became ours come first (the chat's order).
            await self.pull(source, start)
        else:  # its owner, or the member it goes to, pulls it (any scan, if nobody does)
            await self._tell(WORK_CHANNEL, source, to=chosen)
        return row.id

    async def claim(self, source: str) -> bool:
        """Hold ``source``; a source taken anew is read again from the database (another
        process may have moved it to a new session meanwhile)."""
        # Kept per source once made (a small object each): removing one while a claim
        # waits on it would let a third claim run beside the waiting one.
        async with self._claiming.setdefault(source, asyncio.Lock()):
            return await self._claim(source)

    async def _claim(self, source: str) -> bool:
        held, before = self.ownership.owns(source), self.ownership.epoch(source)
        if not await self.ownership.claim(source):
            return False
        epoch = self.ownership.epoch(source)
        # Held still, as far as this process knew, but at a new epoch: another process
        # held it meanwhile (this one paused before its renewal noticed) and answered
        # what this one had in hand. Taken anew: until 2026-12-07 that was kept, and
        # the next turn ran those messages again (found by review).
        if held and epoch == before:
            state = self._sources.get(source)
            if state is not None and state.epoch is None:  # made while held
                state.epoch = epoch
        else:
            self._sources.forget(source)
            self._retire_earlier_tenure(source, epoch)
            # A turn the last owner left cut goes first, as after a restart: a new turn
            # would take its unanswered message for an orphan and drop it. That owner may
            # be this process, its consumer still winding down from the fenced turn.
            state = await self._sources.state(source)
            state.epoch = epoch
            if not state.is_processing and await self._engine.store.sessions.interrupted(
                state.session_id
            ):
                state.resume_first = True
        return True

    def _retire_earlier_tenure(self, source: str, epoch: int | None) -> None:
        """The source taken anew while a turn of an earlier tenure still runs or waits
        here (another process held it meanwhile: the epoch moved): that state is retired
        and a fresh one, of the source's current session, takes its messages. Its turn's
        waits for a human end (closed, not cancelled: the calls stay pending, so the
        session stays cut and whoever holds the chat asks again), which frees the
        session's handler. Until 2026-12-06 the old state was kept: a turn that waited
        for a decision given elsewhere never ended here and the chat went silent when
        this process took it again, and a message after a /new given elsewhere was
        queued for the old session and dropped (both found by review). The same epoch:
        nobody held it meanwhile, and the old turn's fence still holds; it goes on."""
        old = self._sources.get(source)
        if old is not None and old.epoch != epoch and _busy(old):
            self._retire(old)

    def _retire(self, state: SourceState) -> None:
        self._sources.retire(state)
        self._engine.approvals.close_session(state.session_id)

    async def stop(self, source: str, stop_here: StopHere) -> int:
        """The rows are everyone's and the turn may run elsewhere: both go."""
        dropped = await self._engine.store.queue.drop(source)
        await self.stop_elsewhere(source)
        state = self._sources.get(source)
        if state is not None:
            dropped = max(dropped, len(await stop_here(state)))
        return dropped

    @contextlib.asynccontextmanager
    async def holding(self, source: str) -> AsyncIterator[None]:
        """Held (waiting for its owner to let it go, or die) and behind its fence; let go
        after, as no consumer ran here to do it (the next result fired in another
        process would wait for it until this one dies)."""
        fence = await self.hold(source)
        # Counted as the source's work: its consumer, ending meanwhile, must not let it go
        # (this work's transactions would be fenced out).
        state = self._sources.get(source) or await self._sources.state(source)
        state.held += 1
        try:
            with fenced(fence):
                yield
        finally:
            state.held -= 1
            # Also after a failure (an injection told first elsewhere, the database): the
            # chat was kept by a process doing nothing until its user wrote (until
            # 2026-12-06; found by review).
            await self.idle(state)
            if state.has_waiting_work and state.consumer is None and self.owns(source):
                # A turn the chat's dead owner left cut (marked as the claim took it):
                # its consumer resumes it now. Nothing did, and the chat stayed held with
                # nothing running (until 2026-12-06; found by review).
                self._start(state)

    async def hold(self, source: str) -> Fence:
        """Wait until ``source`` is ours (its owner lets it go when idle, or dies); its
        fence. For work that reaches a chat from outside its queue (cron results,
        background tasks)."""
        while not await self.claim(source):
            await self._sleep(self.ownership.config.scan_interval_s)
        fence = self.ownership.fence(source)
        assert fence is not None
        return fence

    async def pull(self, source: str, start: Start | None = None) -> int:
        """Take ``source``'s queued rows not seen here into its inbox, if the source is
        ours (claimed now when free); how many. ``start``: the consumer's, when the caller
        has it (a message accepted here, before the hub's start gave it)."""
        if not await self.claim(source):
            return 0
        # One pull of a source at a time: a read that came back late, after another pull
        # had dropped a consumed row from ``seen``, pushed that row again, and its message
        # was stored and answered twice (until 2026-12-07; found by review).
        async with self._pulling.setdefault(source, asyncio.Lock()):
            state = await self._sources.state(source)
            rows = await self._engine.store.queue.pending(source)
            pulled = 0
            for row in rows:
                if row.id in state.inbox.seen:
                    continue
                if row.session_id != state.session_id:
                    await self._engine.store.queue.remove(row.id)  # its session was replaced
                    continue
                options = SendOptions.from_row(row.is_synthetic, row.metadata, row.options)
                state.inbox.seen.add(row.id)
                state.inbox.push(row.content, options, row.id)
                pulled += 1
            # A row no longer pending was consumed: it cannot come back, so it need not be
            # kept.
            state.inbox.seen &= {row.id for row in rows}
        if pulled:
            (start or self._start)(state)
        return pulled

    async def decided(self, source: str, tool_call_id: int, *, in_chat: bool = True) -> None:
        """A decision recorded here for a call whose turn does not wait in this process:
        resume the turn here if the source is ours (claimed now when free), else tell
        its owner, whose waiting turn then reads the decision. A call of a session no
        chat owns (``in_chat`` off) wakes whichever process waits for it."""
        if not in_chat:
            await self.decided_anywhere(source, tool_call_id)
            return
        if await self.claim(source):
            state = await self._sources.state(source)
            if not state.is_processing:
                state.resume_first = True
                self._start(state)
            return
        await self._tell(DECISION_CHANNEL, source, call=tool_call_id)

    async def decided_anywhere(self, source: str, tool_call_id: int) -> None:
        """A decision on a call of a session no chat owns (a job's run) wakes whichever
        process waits for it; none resumes it."""
        await self._tell(DECISION_CHANNEL, source, call=tool_call_id, anywhere=True)

    async def stop_session(self, session_id: int) -> None:
        """Stop a session no chat owns (a job's run) on whichever process runs it."""
        await self._tell(STOP_CHANNEL, "", session=session_id)

    async def worked_elsewhere(self, source: str) -> bool:
        """Whether another live process holds ``source`` (its turn may run there)."""
        if self.ownership.owns(source):
            return False
        return await self.ownership.holder(source) is not None

    async def stop_elsewhere(self, source: str) -> None:
        """``/stop`` of a source this process does not work: its owner stops the turn."""
        if not self.ownership.owns(source):
            await self._tell(STOP_CHANNEL, source)

    # -- ownership -------------------------------------------------------------------------

    def fenced_out(self, state: SourceState) -> None:
        """A turn of the source was fenced: its lease was gone by then, whatever the last
        renewal saw. Its queued work here is dropped (the rows stay), and a later claim
        (a scan, a message) takes it anew and resumes the cut turn first. A retired
        state's turn forgets nothing: the tenure it ran under is gone already, and the
        current one is not its to forget (until 2026-12-06 it was forgotten). Nor is a
        holding of another epoch: the source taken anew while this turn was being stopped,
        before the claim retired it, lost its new lease here, and the message that took it
        was never answered (a race seen under load on 2026-12-06)."""
        if state.retired:
            return
        held = self.ownership.epoch(state.name)
        if state.epoch is not None and held is not None and held != state.epoch:
            return
        self.ownership.forget(state.name)
        self.lost([state.name])

    def lost(self, sources: Iterable[str]) -> None:
        """Leases that slipped away: stop taking those sources' messages here at once."""
        for source in sources:
            state = self._sources.get(source)
            if state is not None:
                state.inbox.clear()  # in memory only: the rows are the new owner's
                state.inbox.seen.clear()

    async def idle(self, state: SourceState) -> None:
        """The source's consumer found nothing more: let it go, unless a row came in (a
        retired state's consumer lets nothing go: the source's current tenure is not its)."""
        if state.retired or not self.ownership.owns(state.name) or not _quiet(state):
            return
        if await self.pull(state.name):
            return
        if _quiet(state):
            await self.ownership.release(state.name)

    async def scan(self) -> int:
        """Claim and resume the sources with work nobody holds; how many were taken."""
        await self.ownership.refresh_members()
        interrupted = set(await self._engine.interrupted_sessions())
        unowned = await self._engine.store.db.run(_unowned_work, interrupted)
        waited, self._unowned_before = self._unowned_before, set(unowned)
        taken = 0
        for source in unowned:
            # Its member's to take; anyone's once it has waited a whole scan for it.
            if (
                pick(source, self.ownership.members) != self.ownership.owner
                and source not in waited
            ):
                continue
            if not await self.claim(source):
                continue
            taken += 1
            state = await self._sources.state(source)  # claim set it to resume, if cut
            if await self.pull(source) == 0 and state.resume_first:
                self._start(state)
            elif state.is_idle:
                await self.ownership.release(source)  # it was only a stale row
        if taken:
            self.takeovers += taken
            log.info("took over %d source(s) with work nobody held", taken)
        return taken

    # -- running -----------------------------------------------------------------------------

    async def start(self, start: Start) -> None:
        """Join, take what nobody holds, then scan and listen (``run``) until closed."""
        self._start = start
        await self.join()
        await self.scan()
        self._running = asyncio.create_task(self.run(), name="fleet:run")

    async def join(self) -> None:
        """Become a member and start renewing (the hub's start, before its first scan: a
        first scan that takes over many sources must not outlast the membership)."""
        if self._relay is not None:
            await self._relay.start()
        await self.ownership.join()
        await self.ownership.refresh_members()
        if self._keeping is None:
            self._keeping = asyncio.create_task(self.ownership.keep(self.lost), name="fleet:renew")

    async def run(self) -> None:
        """Scan and listen until cancelled (the hub runs it as a task, after ``join``)."""
        async with contextlib.AsyncExitStack() as stack:
            tasks = [asyncio.create_task(self._scan_forever(), name="fleet:scan")]
            if self._notifier is not None:
                stream = self._notifier.subscribe([WORK_CHANNEL, STOP_CHANNEL, DECISION_CHANNEL])
                stack.callback(stream.close)
                await stream.ready()
                tasks.append(asyncio.create_task(self._listen(stream), name="fleet:notices"))
            try:
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        if self._running is not None:
            self._running.cancel()
            await asyncio.gather(self._running, return_exceptions=True)
            self._running = None
        if self._relay is not None:
            await self._relay.close()  # the stopped turns' last events go out first
        if self._keeping is not None:
            self._keeping.cancel()
            await asyncio.gather(self._keeping, return_exceptions=True)
            self._keeping = None
        await self.ownership.release_all()
        await self.ownership.leave()

    async def _scan_forever(self) -> None:
        while True:
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scanning for unowned work failed; trying again")
            await self._sleep(self.ownership.config.scan_interval_s)

    async def _listen(self, stream: Any) -> None:
        async for item in stream:
            try:
                await self._on_notice(item)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("handling a fleet notice failed")

    async def _on_notice(self, item: Notice | Resync) -> None:
        if isinstance(item, Resync):
            # A decision told while the listener was away: its turn waited for good,
            # holding the chat (until 2026-12-07; found by review). First: a failure of
            # the scan below must not skip it.
            for call in self._engine.approvals.waiting():
                await self._engine.deliver_decided(call)
            await self.scan()  # notices may have been missed: the tables tell
            for source in self.ownership.owned():
                await self.pull(source)
            return
        source = item.payload.get("source")
        if not isinstance(source, str):
            return
        if item.channel == WORK_CHANNEL:
            to = item.payload.get("to")
            if self.ownership.owns(source) or to == self.ownership.owner:
                await self.pull(source)
        elif item.channel == STOP_CHANNEL and isinstance(item.payload.get("session"), int):
            self._engine.cancel_session(item.payload["session"])
        elif item.channel == DECISION_CHANNEL and item.payload.get("anywhere") is True:
            call = item.payload.get("call")
            if isinstance(call, int):
                await self._engine.deliver_decided(call)
        elif item.channel == DECISION_CHANNEL and self.ownership.owns(source):
            call = item.payload.get("call")
            if isinstance(call, int) and not await self._engine.deliver_decided(call):
                await self.decided(source, call)  # its turn does not wait here: resume it
        elif item.channel == STOP_CHANNEL and self.ownership.owns(source):
            state = self._sources.get(source)
            if state is not None:
                state.inbox.clear()
                if state.handler is not None:
                    state.handler.cancel()

    async def _tell(self, channel: str, source: str, **extra: str | int | bool) -> None:
        """``extra``: ``to`` (a process), ``call`` (a tool call), ``anywhere`` (whoever
        waits for the call), ``session`` (a session no chat owns)."""
        if self._notifier is None:
            return  # the owner's next scan or pull finds it
        payload: dict[str, Any] = {"source": source, **extra}
        try:
            await self._notifier.publish(channel, payload)
        except Exception:
            log.warning("telling the fleet about %s failed; the next scan finds it", source)


def _quiet(state: SourceState) -> bool:
    """Nothing queued, running, held or to resume (its consumer may be the one asking)."""
    return state.turn is None and not state.held and not state.has_waiting_work


def _unowned_work(conn: Connection, interrupted: set[int]) -> list[str]:
    """Sources with queued rows or a session cut mid-turn whose lease is free or expired."""
    live = {
        lease.name[len(SOURCE_LEASE_PREFIX) :] for lease in live_leases(conn, SOURCE_LEASE_PREFIX)
    }
    # Only the cut sessions' rows: the table holds every chat ever seen, read every scan.
    cut = set(
        conn.execute(
            sa.select(sources.c.source).where(sources.c.session_id.in_(sorted(interrupted)))
        ).scalars()
    )
    queued = set(conn.execute(sa.select(queued_messages.c.source).distinct()).scalars())
    return sorted((queued | cut) - live)


def _busy(state: SourceState) -> bool:
    """A consumer or a turn of the source runs (or waits) here."""
    return state.consumer is not None or state.is_processing
