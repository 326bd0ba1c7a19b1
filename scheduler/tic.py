"""The tic: every ``TIC_INTERVAL_SECONDS`` the watcher agent reads a batch of new events.

Each tick takes the unprocessed events (leased to it in the same transaction; marked
processed once its turn answered and its notices are stored in the home chat, given back
when it failed) and
gives them to the ``tic`` system agent in an ephemeral session that can ask nobody
(``auto_deny_approvals``) and runs only with the ``notify`` interface tool to speak.
Quiet by default: no events, no session; nothing worth saying, no message; the same
event type and summary within 24 hours is not delivered twice (recorded in the commit
that stores the notice in the chat).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from engine.core import Engine
from engine.hub import ChatHub, Notification
from engine.session import Failed, Final, TurnResult
from engine.tools import BuiltinTool, ToolCategory, ToolContext, ToolError, object_schema
from scheduler.events import TAKE_LEASE, Event, EventStore, fingerprint, record_notice

__all__ = ["MAX_AWAY_TRIES", "RENEW_EVERY_S", "NotifyTool", "Tic", "TickReport"]

log = logging.getLogger(__name__)

#: Tics an event may fail (a crash, a model that fails on it) before it is dropped.
MAX_TRIES = 3
#: Tics whose every model was away (unreachable, busy) an event may sit out before it is
#: dropped: a whole outage of a few hours, but not for ever (a 429 that answers this
#: request every time, a quota it is too big for, would hold the oldest events, which
#: every tic takes first, and nothing newer would ever be read).
MAX_AWAY_TRIES = 12

#: An event's share of a tic's prompt: a bigger one is cut (its payload may be 256 KB,
#: and a batch over the model's window failed every tic and was dropped whole).
EVENT_CHARS = 4_000

#: A tic's events together: those past it wait for the next tic, not counted as failed.
BATCH_CHARS = 40_000

#: How often a tic's turn renews the lease of the events it took: a turn may outlast it.
RENEW_EVERY_S = TAKE_LEASE.total_seconds() / 3

#: The tic may read the workspace (memory, notification rules) and nothing else.
TIC_RUN_CONTEXT = {"allow_fs_reads": ["memory/*"], "allow_fs_writes": [], "read_only": True}


class NotifyTool(BuiltinTool):
    """``notify{event_type, summary, refs?}``: tell the user something (via the home chat)."""

    name = "notify"
    description = (
        "Tell the user about something worth knowing now. `summary` is a neutral, "
        "third-person statement of fact with the details that matter; the conversational "
        "agent words the message. The same event type and summary is sent once a day."
    )
    category = ToolCategory.INTROSPECTION

    def __init__(
        self,
        hub: ChatHub,
        events: EventStore,
        source: str,
        window: timedelta,
        waiting: set[str] | None = None,
    ) -> None:
        self.hub = hub
        self.events = events
        self.source = source
        self.window = window
        #: Notifications sent through it (a tic that told someone has read its events).
        self.sent = 0
        #: Per notification sent: True once stored in the chat, False when given back.
        self.notices: list[asyncio.Future[bool]] = []
        #: Fingerprints of notifications handed to the hub, not yet stored nor given back
        #: (shared by the tics of a process: their record is written only once stored).
        self.waiting = waiting if waiting is not None else set()
        self.parameters = object_schema(
            {
                "event_type": {"type": "string", "description": "The kind, e.g. mail_from_boss."},
                "summary": {
                    "type": "string",
                    "description": "What happened, in one or two sentences.",
                },
                "refs": {"type": "object", "description": "Ids or links (optional)."},
            },
            ["event_type", "summary"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        event_type, summary = args["event_type"].strip(), args["summary"].strip()
        if not event_type or not summary:
            raise ToolError("notify: event_type and summary must not be empty")
        if len(summary) > 4000:
            raise ToolError("notify: summary over 4000 characters; say it shorter")
        digest = fingerprint(event_type, summary)
        if digest in self.waiting:
            return "not sent: the same notification is already on its way to the user"
        if await self.events.told_within(digest, self.window):
            return "not sent: the same notification went out within the last 24 hours"
        # Its dedupe record commits with the notice in the chat (until 2026-12-07 it was
        # written here, and a notice lost in a restart was refused for a day; found by
        # review); meanwhile this process refuses it as on its way.
        self.waiting.add(digest)
        told: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def settle(stored: bool) -> Callable[[], Awaitable[None]]:
            async def hook() -> None:
                self.waiting.discard(digest)
                if not told.done():
                    told.set_result(stored)

            return hook

        self.hub.notify(
            Notification(
                self.source,
                event_type,
                summary,
                refs=args.get("refs") or {},
                delivered_in=partial(record_notice, digest=digest, window=self.window),
                on_delivered=settle(True),
                on_undelivered=settle(False),
            )
        )
        self.notices.append(told)
        self.sent += 1
        return "sent"


@dataclass(frozen=True, slots=True)
class TickReport:
    events: int
    session_id: int | None


class Tic:
    def __init__(
        self,
        engine: Engine,
        hub: ChatHub,
        *,
        batch: int = 50,
        dedupe_window: timedelta = timedelta(hours=24),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.engine = engine
        self._sleep = sleep
        self.hub = hub
        self.events = EventStore(engine.store.db)
        self.batch = batch
        self.dedupe_window = dedupe_window
        #: Failed tics per event taken again (this process's; a restart starts over), and
        #: those whose every model was away.
        self._failures: dict[int, int] = {}
        self._away: dict[int, int] = {}
        #: Fingerprints of this process's notices on their way to the home chat.
        self._waiting: set[str] = set()
        #: Tics whose events wait for their notices to be stored.
        self._told: set[asyncio.Task[None]] = set()

    async def tick(self) -> TickReport:
        taken = await self.events.take(self.batch)
        if not taken:
            return TickReport(0, None)
        shown = _within_budget([_shown(event.to_json()) for event in taken])
        events, later = taken[: len(shown)], [event.id for event in taken[len(shown) :]]
        if later:
            await self.events.give_back(later)
        agent = "tic" if self.engine.agents.get("tic") else "main"
        handler = await self.engine.new_session(
            "tic",
            agent_id=agent,
            is_interactive=False,
            is_ephemeral=True,
            auto_deny_approvals=True,
            run_context=TIC_RUN_CONTEXT,
            context_label="Tic",
        )
        notify = NotifyTool(self.hub, self.events, "tic", self.dedupe_window, self._waiting)
        prompt = "New events:\n" + json.dumps(shown, ensure_ascii=False, indent=1)
        # The tic watches on the owner's behalf: it knows them as their home chat's turns do.
        profile = (
            await self.hub.visiting.turn_context(self.hub.home, None) if self.hub.home else None
        )
        outcome: TurnResult | None = None
        # Until 2026-12-06 a turn longer than the lease let another tic read them again.
        ids = [event.id for event in events]
        keeper = asyncio.create_task(self._keep(ids))
        handed_over = False
        try:
            try:
                outcome = await handler.handle_message(
                    prompt,
                    is_synthetic=True,
                    interface_tools=[notify],
                    extra_system_dynamic=profile,
                )
            except Exception:
                log.exception("tic session %s failed", handler.session.id)
            # A tic that told someone has read its events, though it failed after: given
            # back, they were told again in other words (found by review).
            read = isinstance(outcome, Final) or notify.sent > 0
            away = not read and isinstance(outcome, Failed) and outcome.away
            if read and notify.notices:
                # Its events stay leased until its notices are stored in the home chat:
                # until 2026-12-07 they were marked read while the notices waited in
                # memory for a busy chat, and a restart lost both (found by review).
                task = asyncio.create_task(self._once_told(ids, events, notify.notices, keeper))
                self._told.add(task)
                task.add_done_callback(self._told.discard)
                handed_over = True
        finally:
            if not handed_over:
                keeper.cancel()
                await asyncio.gather(keeper, return_exceptions=True)
        if not handed_over:
            await self._finish(ids, events, read, away)
        return TickReport(len(events), handler.session.id)

    async def close(self) -> None:
        """Stop waiting for notices: their events' lease runs out, and a later tic (this
        service's next start) reads them again."""
        for task in list(self._told):
            task.cancel()
        await asyncio.gather(*self._told, return_exceptions=True)
        self._waiting.clear()  # the hub that held them is gone with them

    async def _once_told(
        self,
        ids: list[int],
        events: list[Event],
        notices: list[asyncio.Future[bool]],
        keeper: asyncio.Task[None],
    ) -> None:
        """The events read once every notice of their tic is stored; given back (counted
        as a failed tic) when one was not: the next tic reads them and tells it again (a
        notice stored meanwhile is refused as told). A notice neither stored nor given
        back within the dedupe window gives them back too."""
        try:
            try:
                async with asyncio.timeout(self.dedupe_window.total_seconds()):
                    stored = await asyncio.gather(*notices)
            except TimeoutError:
                log.warning("the tic's notices were not stored within %s", self.dedupe_window)
                stored = [False]
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        try:
            await self._finish(ids, events, all(stored), False)
        except Exception:  # the lease runs out: a later tic reads them again
            log.exception("settling the events of a tic that told someone failed")

    async def _finish(self, ids: list[int], events: list[Event], read: bool, away: bool) -> None:
        given_up = await self._settle(ids, read, away=away)
        if given_up:
            self._tell_dropped([event for event in events if event.id in given_up], away)

    def _tell_dropped(self, dropped: list[Event], away: bool) -> None:
        """The home chat learns which events were dropped unread (until 2026-12-07 only
        the log did: a night's mail, its model down, was gone without a word; found by
        review)."""
        kinds = Counter(f"{event.type} from {event.source}" for event in dropped)
        listed = ", ".join(f"{n} {kind}" if n > 1 else kind for kind, n in kinds.items())
        why = "no model could be reached" if away else "reading them failed"
        self.hub.notify(
            Notification(
                source="tic",
                event_type="events_dropped",
                summary=(
                    f"{len(dropped)} incoming event(s) were dropped unread after "
                    f"{MAX_AWAY_TRIES if away else MAX_TRIES} tries ({why}): {listed}."
                ),
                refs={"event_ids": [event.id for event in dropped]},
            )
        )

    async def _keep(self, ids: list[int]) -> None:
        """The events' lease renewed while the turn reads them."""
        while True:
            await self._sleep(RENEW_EVERY_S)
            try:
                await self.events.renew(ids)
            except Exception:  # the database away: the next renewal tries again
                log.warning("renewing the lease of the tic's events failed", exc_info=True)

    async def _settle(self, ids: list[int], read: bool, *, away: bool = False) -> set[int]:
        """Read events are done; those of a tic that failed (a crash, a model failing on
        them) are read again by the next one, up to ``MAX_TRIES`` tics (until 2026-12-06
        they were marked before the agent read them, and a failed tic lost them; found by
        review), and of one whose every model was away up to ``MAX_AWAY_TRIES`` (until
        2026-12-07 three such tics, 45 minutes of an outage, dropped them unread): an event
        that fails every tic is not tried for ever."""
        counts, limit = (self._away, MAX_AWAY_TRIES) if away else (self._failures, MAX_TRIES)
        for event_id in ids:
            counts[event_id] = 0 if read else counts.get(event_id, 0) + 1
        given_up = [i for i in ids if counts[i] >= limit]
        if given_up:
            log.warning("%d event(s) failed %d tics; dropped: %s", len(given_up), limit, given_up)
        finished = ids if read else given_up
        for event_id in finished:
            self._failures.pop(event_id, None)
            self._away.pop(event_id, None)
        if finished:
            await self.events.done(finished)
        if not read and len(finished) < len(ids):
            await self.events.give_back([i for i in ids if i not in set(finished)])
        return set(given_up)


def _shown(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` as the tic's prompt shows it: its payload cut to ``EVENT_CHARS`` when the
    event is bigger, and saying so."""
    size = len(json.dumps(event, ensure_ascii=False))
    if size <= EVENT_CHARS:
        return event
    payload = json.dumps(event["payload"], ensure_ascii=False)
    room = max(EVENT_CHARS - (size - len(payload)), 200)
    return {
        **event,
        "payload": payload[:room],
        "cut": f"the payload was {len(payload)} characters; only its first {room} are shown",
    }


def _within_budget(shown: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first events whose prompt fits ``BATCH_CHARS`` (always the first one)."""
    kept: list[dict[str, Any]] = []
    used = 0
    for event in shown:
        used += len(json.dumps(event, ensure_ascii=False))
        if kept and used > BATCH_CHARS:
            break
        kept.append(event)
    return kept
