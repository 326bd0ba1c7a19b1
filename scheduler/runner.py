"""Run one claimed job run, store its outcome, then tell the user.

A run executes in a new ephemeral, non-interactive session (source ``cron``, the job's
agent, its grants as the run context, context label ``CronJob: <title>``; an async task
shares its parent's scratchpad), with the profile of the user the job serves. What its
grants allow runs; a call outside them asks in the job's chat (``asking.RunCards``) and
waits up to the job's limit. A run taken again after a crash resumes its session: a call
that waits for a decision asks with its old card, one that was running is reported to the
model as cut short, never run again.
The lease is renewed while the run works; losing it stops the run. The result is stored
before any delivery; delivery is recorded separately.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from engine.approval import OPERATOR
from engine.bus import JobCompleted
from engine.core import Engine
from engine.hub import REJECT, ChatHub, Notification
from engine.session import ChatSessionHandler, Final, TurnResult, background_error
from engine.store import SENDER_KEY, VISITS_KEY, InboxError, utcnow
from scheduler.asking import CARD_STOPPED, RunCards
from scheduler.grants import JobGrants
from scheduler.store import STOPPED, AlreadyTold, Job, JobStore, Run, mark_delivered_in

__all__ = [
    "JOB_LABEL",
    "OPERATOR_PLATFORMS",
    "TASK_COMPLETED_TOOL",
    "ChatBack",
    "ChatCheck",
    "JobRunner",
    "OwnerCheck",
]

#: A run's session is labelled ``CronJob: <title>`` (the inbox shows it; a card names the
#: job from it).
JOB_LABEL = "CronJob: "
#: Front ends whose every conversation is their operator's: a job made there serves the
#: operator (``web:owner``), and no message there names a sender.
OPERATOR_PLATFORMS = ("web", "console")

log = logging.getLogger(__name__)


class Ran(NamedTuple):
    """How a run ended: its status, result and error as recorded; ``pauses``: its job is
    paused once the run is recorded (the user it acts for lost access)."""

    status: str
    result: str | None
    error: str | None
    pauses: bool = False


TASK_COMPLETED_TOOL = "task_completed"
TASK_COMPLETED_REASONING = (
    "A background task I started has finished. Let me read its result and tell the user."
)


#: Whether the user a job acts for (``telegram:42``) may use the bot now; ``None``: it
#: cannot be told here (their platform is not running in this service).
OwnerCheck = Callable[[str], Awaitable[bool | None]]


#: Why a chat (``telegram:42``) takes nothing more from the bot (the platform refused a
#: delivery there for good: blocked, removed, deleted), or ``None``.
ChatCheck = Callable[[str], Awaitable[str | None]]
#: A person says a chat takes the bot's messages again (they resumed a job there).
ChatBack = Callable[[str], Awaitable[None]]


async def _everyone_allowed(_owner_id: str) -> bool:
    return True


async def _never_gone(_source: str) -> None:
    return None


class JobRunner:
    def __init__(
        self,
        engine: Engine,
        hub: ChatHub,
        store: JobStore,
        *,
        owner: str,
        lease: timedelta = timedelta(seconds=60),
        clock: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        approval_wait: timedelta = timedelta(minutes=30),
        owner_allowed: OwnerCheck | None = None,
        chat_gone: ChatCheck | None = None,
    ) -> None:
        """``approval_wait``: how long a run waits for a decision (a job may say otherwise);
        ``owner_allowed``: the front ends' access, asked before a job acts for its owner;
        ``chat_gone``: the platforms' word on whether the job's chat still takes messages."""
        self.engine = engine
        self.hub = hub
        self.store = store
        self.owner = owner
        self.lease = lease
        self._clock = clock
        self._sleep = sleep
        self.approval_wait = approval_wait
        self.owner_allowed = owner_allowed or _everyone_allowed
        self.chat_gone = chat_gone or _never_gone
        #: Runs this process is executing or delivering (the sweep leaves them alone).
        self.busy: set[int] = set()
        #: Runs that left ``busy`` since the dispatcher's last sweep began (see ``sweepable``).
        self._released: set[int] = set()

    async def execute(self, run: Run, job: Job | None = None) -> Run | None:
        """Run a claimed run to its stored outcome, then deliver it.

        ``job``: the run's job as read when the run was claimed (saves a read); whether it
        was deleted since is checked again when the run starts.
        """
        self.busy.add(run.id)
        handed_over = False  # deliver() owns the busy mark from then on
        try:
            if job is None:
                job = await self.store.get(run.job_id)
            if job is None or job.deleted_at is not None:
                await self.store.finish(run.id, self.owner, status="failed", error="job deleted")
                await self.store.mark_delivered([run.id], "none")
                return None
            ran = await self._run_session(job, run)
            if ran is None:
                return None
            finished = await self.store.finish(
                run.id,
                self.owner,
                status=ran.status,
                result=ran.result,
                error=ran.error,
                run=run,
                deliver_until=self._clock() + self.lease,
            )
            if finished is None:
                log.warning("run %s lost its lease before finishing; not delivered here", run.id)
                return None
            if ran.pauses:
                # Paused once its run is recorded, so the chat is told once, not at every
                # fire (until 2026-12-07 a minutely job said "no longer allowed" every
                # minute; found by review).
                await self.store.set_enabled(job.id, False, None)
            self.engine.system_bus.publish(JobCompleted(job.id, run.id, ran.status))
            handed_over = True
            await self.deliver([finished], claimed=True, jobs={job.id: job})
            return finished
        finally:
            if not handed_over:
                self._release([run.id])

    def _release(self, run_ids: list[int]) -> None:
        self.busy.difference_update(run_ids)
        self._released.update(run_ids)

    async def sweepable(self, read: Callable[[], Awaitable[list[Run]]]) -> list[Run]:
        """The runs ``read`` lists that nobody in this process is delivering.

        ``read`` (the undelivered runs) sees the database as it was at some instant while
        it ran; a run whose delivery this process recorded meanwhile still shows there as
        undelivered, and is no longer busy when the read returns. Every run that was busy
        at any time during the read is left out: the next sweep sees its real state.
        """
        self._released.clear()
        runs = await read()
        return [run for run in runs if run.id not in self.busy and run.id not in self._released]

    async def _run_session(self, job: Job, run: Run) -> Ran | None:
        """The run's outcome, or None when it must not run (lease lost, job deleted)."""
        # The job as it is now, not as the step read it: a run may wait in the queue, and
        # its grants be revoked meanwhile (found by review). ``start`` checks once more.
        job = await self.store.get(job.id) or job
        refused = await self._refusal(job)
        if refused is not None:
            return refused
        handler = await self._resumable(run, job) or await self._new_session(job)
        resuming = handler.session.id == run.session_id
        # One transaction records the session and checks the run is still ours and its job
        # still there (a claimed run may have waited in the dispatcher's queue).
        now = self._clock()
        held_until = now + self.lease
        started = await self.store.start(
            run.id, self.owner, handler.session.id, lease=(now, held_until)
        )
        if started == "lost":
            log.warning("run %s lost its lease before it started; not run here", run.id)
            return None
        if started in ("deleted", "stopped"):
            error = "job deleted" if started == "deleted" else STOPPED
            await self.store.finish(run.id, self.owner, status="failed", error=error)
            await self.store.mark_delivered([run.id], "none")
            return None
        cards = self._cards(job)
        keeper = asyncio.create_task(self._keep_lease(run.id, handler.cancel, held_until))
        outcome: TurnResult | None = None
        crashed: str | None = None
        try:
            outcome = await self._turn(job, handler, cards, resuming)
        except asyncio.CancelledError:
            # The process is stopping, not the run: it is taken again after the restart and
            # asks with the same cards, so they stay open.
            if cards is not None:
                cards.leave_open()
            raise
        except Exception:  # a bug in a run must not kill the dispatcher
            # The chat reads a sentence, the log the details (until 2026-12-06 the
            # exception's class and text reached the chat, SQL included; found by review).
            error = secrets.token_hex(3)
            log.exception("run %s of job %s crashed (error %s)", run.id, job.id, error)
            crashed = f"the run stopped on an internal error (error {error})"
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        if cards is not None:
            await cards.close()
        if crashed is not None:
            return Ran("failed", None, crashed)
        if isinstance(outcome, Final):
            return Ran("done", outcome.content, None)
        return Ran("failed", None, background_error(outcome) or "the run ended without an answer")

    async def _refusal(self, job: Job) -> Ran | None:
        """The run, failed, when the job may not run now (its owner lost access, or their
        platform is not here, or its directory is gone), and the job paused: the chat is
        told once, not at every fire (until 2026-12-07 only a lost access paused it, and a
        */5 job with its directory gone told its chat every five minutes; found by
        review). Resuming it in /jobs checks again."""
        allowed = True if job.owner_id is None else await self.owner_allowed(job.owner_id)
        why: str | None = None
        if allowed is None:  # said "no longer allowed", which was not so (found by review)
            platform = (job.owner_id or "").partition(":")[0]
            why = (
                f"{platform} is not running in this service, so the user it acts for "
                f"({job.owner_id}) could not be checked; {_paused(job, 'once it runs again')}"
            )
        elif not allowed:
            why = (
                f"the user it acts for ({job.owner_id}) is no longer allowed to use this "
                f"bot, so {_paused(job, 'once they are again')}"
            )
        else:
            directory = JobGrants.of(job.run_context).working_directory
            chat = self.chat_of(job)
            if directory is not None and not (self.engine.workspace.root / directory).is_dir():
                why = (
                    f"its working directory {directory} is no longer there, so "
                    f"{_paused(job, 'once it is back')}"
                )
            elif chat is not None and (gone := await self.chat_gone(chat)) is not None:
                # Until 2026-12-07 a job of a chat that had blocked the bot ran at every
                # fire (its tools, the model's tokens) and its answer was refused each time.
                why = (
                    f"its chat ({chat}) no longer takes the bot's messages ({gone}), so "
                    f"{_paused(job, 'once the bot can write there again')}"
                )
        return None if why is None else Ran("failed", None, f"it did not run: {why}", pauses=True)

    async def _resumable(self, run: Run, job: Job) -> ChatSessionHandler | None:
        """The session of an earlier attempt of the run (a crash, a stop, a lost lease cut
        it): the run goes on from where it was. A call that waits for a decision asks
        again with its old card; one that was running is told to the model as cut short,
        not run again (the engine's rule). It started over, and ran again the commands
        and sends of the attempt before (found by review). An async task shares its
        parent's scratchpad again (until 2026-12-07 a task taken up after a restart had an
        empty one of its own; found by review)."""
        if run.session_id is None:
            return None
        return await self.engine.open_session(run.session_id, scratchpad_of=_scratchpad_of(job))

    async def _new_session(self, job: Job) -> ChatSessionHandler:
        handler = await self.engine.new_session(
            "cron",
            agent_id=job.agent_id if self.engine.agents.get(job.agent_id) else "main",
            is_interactive=False,
            is_ephemeral=True,
            run_context=job.run_context,
            context_label=f"{JOB_LABEL}{job.title}",
            auto_deny_approvals=self.chat_of(job) is None,
            scratchpad_of=_scratchpad_of(job),
        )
        servers = JobGrants.of(job.run_context).mcp_servers
        if servers and self.engine.mcp is not None:
            await self.engine.mcp.grant(handler.session.id, None, servers)
        return handler

    async def _turn(
        self, job: Job, handler: ChatSessionHandler, cards: RunCards | None, resuming: bool
    ) -> TurnResult | None:
        """The run's turn: the job's prompt as its owner's message, with their profile."""
        chat = self.chat_of(job) or self.hub.home
        metadata = _sender(job)
        profile = await self.hub.visiting.turn_context(chat, metadata)
        # The job's own zone, beside the service's date line: a 07:00 Tokyo briefing on a
        # UTC service was told it was 22:00 the day before, and briefed on the wrong day
        # (until 2026-12-07; found by review).
        zone = (
            f"This task runs in {job.timezone}: it is {_local(self._clock(), job.timezone)} there."
        )
        profile = f"{profile}\n\n{zone}" if profile else zone
        if resuming:
            resumed = await handler.resume_turn(extra_system_dynamic=profile, emit=cards)
            if resumed is not None:
                return resumed
            said = await self._answered(handler.session.id)
            if said is not None:  # the attempt before had answered: that is the result
                return said
        # The run's memory is its chat's (its search, its person's facts): until 2026-12-07
        # every run searched and saved under the one source "cron", so one person's job
        # found another's, and /forget_me and /memory off missed them (found by review).
        visits = {VISITS_KEY: chat} if chat else {}
        return await handler.handle_message(
            job.prompt,
            metadata={**(metadata or {}), **visits} or None,
            extra_system_dynamic=profile,
            emit=cards,
        )

    async def _answered(self, session_id: int) -> Final | None:
        """The answer an earlier attempt's session ends with, if it does."""
        history = self.engine.store.history
        root = await self.engine.store.sessions.root_frame(session_id)
        last = await history.last_message(root.id)
        if last is None or last.role != "assistant" or not last.content:
            return None
        return Final(last.content, last.id, last.input_tokens, last.output_tokens, False, ())

    def chat_of(self, job: Job) -> str | None:
        """Where the run's calls ask: the job's chat, else the home chat (``None``: nowhere,
        and its session rejects what would need a human)."""
        if job.kind not in ("cron", "async"):
            return None
        return job.origin_source or self.hub.home or None

    async def close_calls_left(self, runs: Sequence[Run]) -> None:
        """Runs ended without their worker (a deleted job's, one asked to stop, one
        abandoned): the calls their sessions wait on are rejected and their cards closed
        as stopped. Until 2026-12-07 a job deleted while its run's card waited in a
        stopped process left the card and the call open for good, and ✅ still took it
        (found by review)."""
        for run in runs:
            if run.session_id is None:
                continue
            try:
                job = await self.store.get(run.job_id)
                chat = None if job is None else self.chat_of(job)
                for item in await self.hub.pending_approvals(run.session_id):
                    await self._close_left(chat, item.tool_call_id, run)
            except Exception:
                log.exception("closing the calls left by run %s of job %s", run.id, run.job_id)

    async def _close_left(self, chat: str | None, call_id: int, run: Run) -> None:
        note = f"The job's run ended ({run.error or run.status}) before this was decided."
        try:
            await self.hub.decide(call_id, REJECT, decider=OPERATOR, note=note, source=None)
        except InboxError:
            return  # decided meanwhile
        if chat is not None:
            await self.hub.visiting.close(chat, call_id, CARD_STOPPED)

    def _cards(self, job: Job) -> RunCards | None:
        chat = self.chat_of(job)
        if chat is None:
            return None
        wait = timedelta(seconds=job.approval_wait_s) if job.approval_wait_s else self.approval_wait
        return RunCards(
            self.hub,
            self.engine.store.inbox,
            chat=chat,
            title=job.title,
            wait=wait,
            sleep=self._sleep,
        )

    async def _keep_lease(
        self, run_id: int, stop: Callable[[], None], held_until: datetime
    ) -> None:
        """Renew the run's lease every third of it. A renewal that fails (the database
        away a moment) is tried again at the next: until 2026-12-06 one ended the renewals
        for good, and another worker took the run over while it still ran (found by
        review). Once the lease has run out unrenewed, the run stops: it is no longer ours.
        ``held_until``: the lease as the run's start renewed it."""
        interval = max(self.lease.total_seconds() / 3, 0.05)
        while True:
            await self._sleep(interval)
            expires_at = self._clock() + self.lease
            try:
                kept = await self.store.heartbeat(run_id, self.owner, expires_at)
            except Exception:
                if self._clock() < held_until:
                    log.warning("renewing the lease of run %s failed", run_id, exc_info=True)
                    continue
                log.exception("run %s could not renew its lease in time; stopping it", run_id)
                kept = False
            if not kept:
                log.warning("run %s lost its lease; stopping it", run_id)
                stop()
                return
            held_until = expires_at

    async def deliver(
        self, runs: list[Run], *, claimed: bool = False, jobs: dict[int, Job] | None = None
    ) -> None:
        """Tell the user: a result, a failure, an abandoned run, missed fires (grouped).

        A run is marked busy before the first await and stays busy until its notification
        is stored in the chat, so no other step delivers it meanwhile. ``claimed``: the
        caller already holds these runs (the runner that just finished them). ``jobs``:
        the runs' jobs, already read (the runner's own run; saves a read per run).
        """
        known = dict(jobs or {})

        async def job_of(job_id: int) -> Job | None:
            if job_id not in known:
                found = await self.store.get(job_id)
                if found is None:
                    return None
                known[job_id] = found
            return known[job_id]

        mine = []
        for run in runs:
            if run.id in self.busy and not claimed:
                continue
            self.busy.add(run.id)
            mine.append(run)
        notified: set[int] = set()
        missed: dict[int, list[Run]] = defaultdict(list)
        try:
            for run in mine:
                if run.delivery_status != "pending":
                    continue  # settled already (its job was deleted while it ran)
                job = await job_of(run.job_id)
                if job is None or job.deleted_at is not None:
                    await self.store.mark_delivered([run.id], "none")  # nobody to tell now
                elif run.status == "missed":
                    missed[run.job_id].append(run)
                elif job.kind == "async" and await self._parent_is_live(job):
                    try:
                        await self._return_to_parent(job, run)
                    except Exception:  # the next sweep tries again; the others go on
                        log.exception("bringing back the result of task %s failed", job.id)
                else:
                    await self._notify(job, [run], _summary(job, run), _event_type(run))
                    notified.add(run.id)
            for job_id, group in missed.items():
                job = await job_of(job_id)
                assert job is not None
                first, last = group[0].scheduled_for, group[-1].scheduled_for
                summary = (
                    f"Scheduled job '{job.title}' missed {sum(run.fires for run in group)} "
                    f"run(s) between {_local(first, job.timezone)} and "
                    f"{_local(last, job.timezone)} while chathub was not running."
                )
                await self._notify(job, group, summary, "job_missed")
                notified.update(run.id for run in group)
        finally:
            # What is not on its way to a chat is settled; the rest leaves busy when stored.
            self._release([run.id for run in mine if run.id not in notified])

    async def _told_in(self, job: Job) -> str | None:
        """Where a job's notice is read: its chat, or the home chat when its chat cannot
        be reached (its platform not running here, the chat refusing the bot): until
        2026-12-07 a job paused for that very reason said so in that chat, read by no one
        (found by review)."""
        chat = job.origin_source
        if chat is not None and self.hub.home and await self.chat_gone(chat) is not None:
            return self.hub.home
        return chat

    async def _notify(self, job: Job, runs: list[Run], summary: str, event_type: str) -> None:
        ids = [run.id for run in runs]
        target = await self._told_in(job)

        async def delivered() -> None:
            self._release(ids)  # marked in the commit that stored it

        async def answered(message_id: int) -> None:
            await self.store.set_delivered_messages(ids, [message_id])

        async def undelivered() -> None:
            self._release(ids)  # the next sweep tells it (its delivery lease is ours)

        self.hub.notify(
            Notification(
                source="scheduler",
                event_type=event_type,
                summary=summary,
                refs={"job_id": job.id, "run_ids": ids, "title": job.title},
                target=target,
                delivered_in=partial(mark_delivered_in, run_ids=ids),
                on_delivered=delivered,
                on_answered=answered,
                on_undelivered=undelivered,
            )
        )

    async def _parent_is_live(self, job: Job) -> bool:
        """Whether an async task's result goes back into the conversation that asked for
        it: that one is still its chat's (after ``/new`` the result was injected into the
        old one, and nothing reached the chat; found by review). Else the chat is told."""
        if job.parent_session_id is None:
            return False
        if job.origin_source is None:
            return True  # no chat: the conversation itself is where it is read
        return await self.hub.is_current(job.origin_source, job.parent_session_id)

    async def _return_to_parent(self, job: Job, run: Run) -> None:
        """An async task's result enters its parent conversation as ``task_completed``."""
        payload = json.dumps(
            {
                "task_id": job.id,
                "title": job.title,
                "status": run.status,
                "result": run.result,
                "error": run.error,
            },
            ensure_ascii=False,
        )
        assert job.parent_session_id is not None
        try:
            await self.hub.inject(
                job.parent_session_id,
                TASK_COMPLETED_TOOL,
                payload,
                TASK_COMPLETED_REASONING,
                also=partial(mark_delivered_in, run_ids=[run.id]),
            )
        except AlreadyTold:  # another worker's injection stored it first
            log.info("the result of task %s was brought back already", job.id)


def _scratchpad_of(job: Job) -> int | None:
    """The session whose scratchpad a run shares: an async task's parent's."""
    return job.parent_session_id if job.kind == "async" else None


def _sender(job: Job) -> dict[str, object] | None:
    """The prompt's metadata naming the user the job serves, as a chat message names its
    sender: their profile comes with it, and with ``APPROVERS=requester+owner`` they may
    decide their job's cards. ``None`` for the operator's front ends (no sender there)."""
    if job.owner_id is None or ":" not in job.owner_id:
        return None
    platform, user = job.owner_id.split(":", 1)
    if job.origin_source is not None and not job.origin_source.startswith(f"{platform}:"):
        return None
    if platform in OPERATOR_PLATFORMS:
        return None
    return {SENDER_KEY: {"id": user}}


def _event_type(run: Run) -> str:
    return {"done": "job_result", "abandoned": "job_abandoned"}.get(run.status, "job_failed")


def _summary(job: Job, run: Run) -> str:
    what = (
        f"Background task '{job.title}'" if job.kind == "async" else f"Scheduled job '{job.title}'"
    )
    if run.status == "done":
        return f"{what} finished. Its result:\n\n{run.result or ''}"
    if run.status == "abandoned":
        return f"{what} was abandoned: {run.error}"
    return f"{what} failed: {run.error}"


def _local(moment: datetime, zone: str) -> str:
    """A fire's time as its job's chat reads it (in UTC the agent repeated "07:00" for a
    Rome 08:00 job; found by review)."""
    try:
        local = moment.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        return moment.isoformat()
    return f"{local:%a %d %b %Y %H:%M} ({zone})"


def _paused(job: Job, until: str) -> str:
    """What a refused run says of its job: a recurring one is paused (resumed in /jobs
    when it can run again); a one-off that did not run is over."""
    if job.single_run:
        return "it will not run (a one-off: schedule it again when it can)"
    return f"it is paused (resume it in /jobs {until})"
