"""Dispatcher, runner and service end to end: a real engine, hub and in-process model.

The clock is fake: a test moves it past a job's ``next_run_at`` and calls
``dispatcher.step()`` then ``dispatcher.drain()``. The hub's 200 ms notification window is
a ``ManualSleep`` the test releases.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from engine.bus.system import JobCompleted
from engine.config import AppConfig, HubConfig
from engine.core import Engine
from engine.hub import ChatHub, Notification
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import text, tool_call
from engine.session import handler as handler_module
from engine.session.events import Done
from engine.session.handler import ChatSessionHandler
from engine.session.turn.gate import AllowAll
from scheduler.dispatcher import WAKE_ID
from scheduler.runner import TASK_COMPLETED_TOOL
from scheduler.service import Scheduler, SchedulerError, SchedulerLimits
from scheduler.store import MAX_MISSED_ROWS, NewJob, Run
from tests.clock import FakeClock
from tests.engine.hub.conftest import EchoModel, ManualSleep, last_user_text, wait_done
from tests.engine.session.helpers import BlockingTool
from tests.scheduler.conftest import ORIGIN

LEASE = timedelta(seconds=60)


async def next_job_completed(subscription: Any) -> JobCompleted:
    async def find() -> JobCompleted:
        while True:
            event = await subscription.recv()
            if isinstance(event, JobCompleted):
                return event

    return await asyncio.wait_for(find(), 5)


async def cron_sessions(engine: Engine) -> list[dict[str, Any]]:
    return (await engine.store.views.list_sessions(source="cron"))["items"]


def notified_runs(notifications: list[Notification]) -> list[int]:
    return [run_id for n in notifications for run_id in n.refs.get("run_ids", [])]


async def due_run(scheduler: Scheduler, clock: FakeClock, title: str = "Morning digest") -> Run:
    """A daily 08:00 job whose fire has come: its run is created (not claimed)."""
    job = await scheduler.create_cron(ORIGIN, title, "0 8 * * *", f"{title}: go")
    clock.now = job.next_run_at + timedelta(seconds=5)
    [run] = (await scheduler.store.materialize(clock(), scheduler.next_fire)).runs
    return run


async def deliver_notifications(hub: ChatHub, manual_sleep: ManualSleep, events: Any) -> Done:
    await manual_sleep.release(hub.config.notify_window_s)
    seen = await wait_done(events)
    return seen[-1].event


async def research_task(scheduler: Scheduler, clock: FakeClock, origin: int) -> None:
    """An async task of ORIGIN's conversation ``origin``, due now."""
    await scheduler.store.create(
        NewJob(
            kind="async",
            title="Research",
            prompt="find",
            timezone="UTC",
            origin_source=ORIGIN,
            parent_session_id=origin,
            single_run=True,
            next_run_at=clock(),
        )
    )


# -- a cron job fires -----------------------------------------------------------------------------


async def test_a_cron_job_runs_in_a_cron_session_and_its_result_reaches_the_chat(
    engine: Engine,
    hub: ChatHub,
    scheduler: Scheduler,
    clock: FakeClock,
    model: EchoModel,
    manual_sleep: ManualSleep,
    origin: int,
) -> None:
    job = await scheduler.create_cron(ORIGIN, "Morning digest", "0 8 * * *", "summarise the news")
    assert job.next_run_at == datetime(2026, 1, 1, 8, tzinfo=UTC)
    model.add(text("Nothing happened overnight."), text("Your digest: all quiet."))
    bus = engine.system_bus.subscribe()
    events = hub.events(ORIGIN)

    clock.advance(timedelta(hours=7, minutes=59))
    assert (await scheduler.dispatcher.step()).created == 0  # not yet
    clock.advance(timedelta(minutes=1, seconds=3))
    report = await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()

    assert (report.created, report.started, report.missed) == (1, 1, 0)
    [session] = await cron_sessions(engine)
    assert session["context_label"] == "CronJob: Morning digest"
    assert (session["is_ephemeral"], session["is_interactive"]) == (True, False)
    assert last_user_text(model.requests[0][0]) == "summarise the news"
    [run] = await scheduler.store.runs(job.id)
    assert (run.status, run.result, run.attempt) == ("done", "Nothing happened overnight.", 1)
    assert run.session_id == session["id"]
    assert await next_job_completed(bus) == JobCompleted(job.id, run.id, "done")
    assert (await scheduler.store.get(job.id)).next_run_at == datetime(2026, 1, 2, 8, tzinfo=UTC)

    done = await deliver_notifications(hub, manual_sleep, events)

    assert done.content == "Your digest: all quiet."
    [notice] = json.loads(next(m["content"] for m in model.requests[-1][0] if m["role"] == "tool"))
    assert notice["event_type"] == "job_result"
    assert "Nothing happened overnight." in notice["summary"]
    assert notice["refs"]["run_ids"] == [run.id]
    assert (await scheduler.store.run(run.id)).delivery_status == "delivered"
    assert len(model.requests) == 2
    assert (await scheduler.dispatcher.step()).delivered == 0


async def test_a_stored_result_is_delivered_after_a_restart_without_running_again(
    engine: Engine,
    hub: ChatHub,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    manual_sleep: ManualSleep,
    origin: int,
) -> None:
    """Crash after ``finish`` and before the delivery: only the delivery is redone, by
    another worker once the dead one's delivery lease has expired (before that, it could
    be delivering: a second delivery would tell the user twice)."""
    before = make_scheduler(owner="worker-a")
    run = await due_run(before, clock)
    [claimed] = await before.store.claim("worker-a", clock(), LEASE, 1)
    assert await before.store.finish(
        claimed.id, "worker-a", status="done", result="42 items", deliver_until=clock() + LEASE
    )
    # ... the process dies here.
    model.add(text("Your digest is ready: 42 items."))
    events = hub.events(ORIGIN)

    after = make_scheduler(owner="worker-b")
    early = await after.dispatcher.step()
    assert early.delivered == 0  # worker-a might still be delivering it
    clock.advance(LEASE + timedelta(seconds=1))
    report = await after.dispatcher.step()
    await after.dispatcher.drain()

    assert (report.started, report.delivered) == (0, 1)
    done = await deliver_notifications(hub, manual_sleep, events)
    assert done.content == "Your digest is ready: 42 items."
    assert len(model.requests) == 1  # only the notification turn: the job did not run again
    assert await cron_sessions(engine) == []
    stored = await after.store.run(run.id)
    assert (stored.status, stored.result, stored.attempt) == ("done", "42 items", 1)
    assert stored.delivery_status == "delivered"


async def test_a_run_whose_worker_died_is_reclaimed_retried_and_delivered_once(
    engine: Engine,
    hub: ChatHub,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    manual_sleep: ManualSleep,
    notified: list[Notification],
    origin: int,
) -> None:
    """kill -9 during a run: the lease expires, another worker runs it again."""
    dead = make_scheduler(owner="worker-a")
    run = await due_run(dead, clock)
    [claimed] = await dead.store.claim("worker-a", clock(), LEASE, 1)
    assert claimed.attempt == 1
    model.add(text("Second try worked."), text("Here is your digest."))
    events = hub.events(ORIGIN)

    alive = make_scheduler(owner="worker-b")
    clock.advance(LEASE / 2)
    assert (await alive.dispatcher.step()).started == 0  # the lease still holds
    clock.advance(LEASE)
    report = await alive.dispatcher.step()
    await alive.dispatcher.drain()

    assert report.started == 1
    stored = await alive.store.run(run.id)
    assert (stored.status, stored.attempt, stored.lease_owner) == ("done", 2, "worker-b")
    assert stored.result == "Second try worked."
    assert len(await cron_sessions(engine)) == 1
    # The dead worker's late outcome cannot overwrite the new one.
    assert not await dead.store.finish(run.id, "worker-a", status="done", result="zombie")

    done = await deliver_notifications(hub, manual_sleep, events)
    assert done.content == "Here is your digest."
    assert (await alive.store.run(run.id)).delivery_status == "delivered"
    assert (await alive.dispatcher.step()).delivered == 0
    assert notified_runs(notified) == [run.id]
    assert len(model.requests) == 2


async def test_a_step_while_a_result_waits_for_its_notification_does_not_deliver_it_again(
    engine: Engine,
    hub: ChatHub,
    scheduler: Scheduler,
    clock: FakeClock,
    model: EchoModel,
    manual_sleep: ManualSleep,
    notified: list[Notification],
    origin: int,
) -> None:
    """The run stays ``delivery_status=pending`` until the notification is stored in the
    chat (200 ms window, then the chat's turn lock). A step in between (the 30 s safety
    interval, another job's wake) must not hand the same result to the hub again."""
    run = await due_run(scheduler, clock)
    model.add(text("The result."), text("Told once."))
    events = hub.events(ORIGIN)
    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()
    assert notified_runs(notified) == [run.id]

    again = await scheduler.dispatcher.step()  # before the notification is stored

    assert again.delivered == 0
    assert notified_runs(notified) == [run.id]
    done = await deliver_notifications(hub, manual_sleep, events)
    assert done.content == "Told once."


async def test_a_result_whose_notice_could_not_be_stored_is_told_by_a_later_step(
    engine: Engine,
    hub: ChatHub,
    scheduler: Scheduler,
    clock: FakeClock,
    model: EchoModel,
    manual_sleep: ManualSleep,
    notified: list[Notification],
    origin: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The database failed while the notice was being stored in the chat: the result is
    not left busy until a restart (it was, silently) but told by the next step, once."""
    run = await due_run(scheduler, clock)
    model.add(text("The result."), text("Told at last."))
    events = hub.events(ORIGIN)
    original = ChatSessionHandler.deliver_notifications
    failures = [RuntimeError("database gone")]

    async def fails_once(self: ChatSessionHandler, *args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(ChatSessionHandler, "deliver_notifications", fails_once)
    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()
    await manual_sleep.release(hub.config.notify_window_s)
    for _ in range(50):  # the hub's delivery task fails and gives the result back
        if not failures and run.id not in scheduler.runner.busy:
            break
        await asyncio.sleep(0.01)
    assert (await scheduler.store.run(run.id)).delivery_status == "pending"

    again = await scheduler.dispatcher.step()

    assert again.delivered == 1
    done = await deliver_notifications(hub, manual_sleep, events)
    assert done.content == "Told at last."
    assert notified_runs(notified) == [run.id, run.id]
    assert (await scheduler.store.run(run.id)).delivery_status == "delivered"
    assert (await scheduler.dispatcher.step()).delivered == 0


async def test_a_notice_is_recorded_delivered_in_the_commit_that_stores_it(
    engine: Engine,
    hub: ChatHub,
    scheduler: Scheduler,
    clock: FakeClock,
    model: EchoModel,
    manual_sleep: ManualSleep,
    origin: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the very moment the notice is in the chat, its run is marked delivered: a
    kill -9 there cannot tell it twice (the mark was a second transaction after it)."""
    run = await due_run(scheduler, clock)
    model.add(text("The result."), text("Told once."))
    events = hub.events(ORIGIN)
    seen_at_store: list[str] = []
    original = handler_module.store_tool_result

    async def store_then_look(*args: Any, **kwargs: Any) -> None:
        await original(*args, **kwargs)
        seen_at_store.append((await scheduler.store.run(run.id)).delivery_status)

    monkeypatch.setattr(handler_module, "store_tool_result", store_then_look)
    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()
    done = await deliver_notifications(hub, manual_sleep, events)

    assert done.content == "Told once."
    assert seen_at_store == ["delivered"]
    assert run.id not in scheduler.runner.busy


async def test_a_result_another_worker_told_first_is_not_told_again(
    engine: Engine,
    hub: ChatHub,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    manual_sleep: ManualSleep,
    origin: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two workers' notices of one result (a's delivery lease ran out while its notice
    waited for a busy chat, and b took it): the one stored second rolls back, as its
    mark finds the run told already (both were stored; found by review). A benign race:
    logged as such, not as a failure."""
    caplog.set_level(logging.INFO, logger="engine.hub.background.delivery")
    a, b = make_scheduler(owner="worker-a"), make_scheduler(owner="worker-b")
    run = await due_run(a, clock)
    [claimed] = await a.store.claim("worker-a", clock(), LEASE, 1)
    finished = await a.store.finish(
        claimed.id, "worker-a", status="done", result="42", deliver_until=clock() + LEASE
    )
    assert finished is not None
    model.add(text("Told once."))
    events = hub.events(ORIGIN)
    await a.runner.deliver([finished], claimed=True)
    assert (await deliver_notifications(hub, manual_sleep, events)).content == "Told once."

    await b.runner.deliver([finished], claimed=True)  # b's copy, read while it was pending
    await manual_sleep.release(hub.config.notify_window_s)
    for _ in range(100):  # the hub's delivery task runs, fails its mark, gives it back
        if run.id not in b.runner.busy:
            break
        await asyncio.sleep(0.01)
    detail = await engine.store.views.session_detail(origin)
    notices = [m for m in detail["messages"] if m.get("name") == "read_notification"]
    assert len(notices) == 1
    assert len(model.requests) == 1  # the one notice's turn
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("withdrawn" in r.getMessage() for r in caplog.records)


async def test_an_async_result_that_cannot_be_brought_back_holds_up_no_other_result(
    engine: Engine,
    hub: ChatHub,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    notified: list[Notification],
    origin: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sweep goes through its results in order: one whose injection keeps failing (its
    parent's agent removed) is tried again later, and the results after it are told (they
    never were: the failure ended the sweep, every time; found by review)."""
    dead = make_scheduler(owner="worker-a")
    await research_task(dead, clock, origin)
    cron = await dead.store.create(
        NewJob(
            kind="cron",
            title="Digest",
            prompt="go",
            timezone="UTC",
            spec="0 8 * * *",
            origin_source=ORIGIN,
            next_run_at=clock(),
        )
    )
    await dead.store.materialize(clock(), dead.next_fire)
    runs = await dead.store.claim("worker-a", clock(), LEASE, 5)
    assert len(runs) == 2
    for run in runs:
        await dead.store.finish(
            run.id, "worker-a", status="done", result="r", deliver_until=clock() + LEASE
        )
    cron_run = next(r for r in runs if r.job_id == cron.id)

    async def broken_inject(*args: Any, **kwargs: Any) -> None:
        raise KeyError("unknown agent 'researcher'")

    monkeypatch.setattr(hub, "inject", broken_inject)
    alive = make_scheduler(owner="worker-b")
    clock.advance(LEASE + timedelta(seconds=1))
    await alive.dispatcher.step()
    await alive.dispatcher.drain()  # a sweep delivers beside the step
    assert cron_run.id in notified_runs(notified)


async def test_missed_fires_are_told_once_as_one_notice(
    engine: Engine,
    hub: ChatHub,
    scheduler: Scheduler,
    clock: FakeClock,
    model: EchoModel,
    manual_sleep: ManualSleep,
    notified: list[Notification],
    origin: int,
) -> None:
    job = await scheduler.create_cron(ORIGIN, "Hourly check", "0 * * * *", "check")
    model.add(text("Checked."))
    clock.advance(timedelta(hours=4, minutes=2))  # down from before 01:00 to 04:02
    events = hub.events(ORIGIN)

    report = await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()

    assert (report.created, report.missed) == (1, 3)
    missed = [r for r in await scheduler.store.runs(job.id) if r.status == "missed"]
    assert [r.scheduled_for.hour for r in missed] == [1, 2, 3]
    missed_notices = [n for n in notified if n.event_type == "job_missed"]
    assert len(missed_notices) == 1
    assert "missed 3 run(s)" in missed_notices[0].summary
    await scheduler.dispatcher.step()  # nothing new: the missed fires are not told again
    assert len([n for n in notified if n.event_type == "job_missed"]) == 1

    await deliver_notifications(hub, manual_sleep, events)
    assert all(r.delivery_status == "delivered" for r in await scheduler.store.runs(job.id))


async def test_a_jobs_missed_fires_are_one_notice_when_a_sweep_would_cut_them(
    hub: ChatHub,
    scheduler: Scheduler,
    clock: FakeClock,
    model: EchoModel,
    manual_sleep: ManualSleep,
    notified: list[Notification],
    origin: int,
) -> None:
    """A sweep reads 100 rows: a minutely job's missed rows after an hourly job's were cut,
    and its downtime was told in two notices (found by review)."""
    hourly = await scheduler.create_cron(ORIGIN, "Hourly", "0 * * * *", "check")
    clock.now = datetime(2026, 1, 1, 0, 59, 30, tzinfo=UTC)
    minutely = await scheduler.create_cron(ORIGIN, "Ticker", "* * * * *", "tick")
    assert hourly.next_run_at == minutely.next_run_at
    clock.now = datetime(2026, 1, 1, 4, 0, 30, tzinfo=UTC)  # down from 00:59:40
    model.add(text("Checked."), text("Ticked."))
    events = hub.events(ORIGIN)

    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()
    await deliver_notifications(hub, manual_sleep, events)
    clock.advance(timedelta(seconds=30))
    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()

    ticker = [
        n.summary
        for n in notified
        if n.event_type == "job_missed" and n.refs["job_id"] == minutely.id
    ]
    assert len(ticker) == 1 and "missed 180 run(s)" in ticker[0], ticker


# -- async tasks ----------------------------------------------------------------------------------


async def test_an_async_task_returns_to_its_parent_and_shares_its_scratchpad(
    engine: Engine,
    hub: ChatHub,
    scheduler: Scheduler,
    model: EchoModel,
    origin: int,
) -> None:
    model.add(
        tool_call("update_scratchpad", json.dumps({"key": "finding", "value": "42"}), "c1"),
        text("The answer is 42."),
        text("Your background research is done: 42."),
    )
    events = hub.events(ORIGIN)

    job = await scheduler.create_async(ORIGIN, origin, "Research", "find the answer")
    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()

    [run] = await scheduler.store.runs(job.id)
    assert (run.status, run.result, run.delivery_status) == (
        "done",
        "The answer is 42.",
        "delivered",
    )
    [task_session] = await cron_sessions(engine)
    assert task_session["context_label"] == "CronJob: Research"
    assert await engine.store.scratchpad.all(origin) == {"finding": "42"}
    assert await engine.store.scratchpad.all(task_session["id"]) == {}

    detail = await engine.store.views.session_detail(origin)
    [synthetic] = [m for m in detail["messages"] if m["kind"] == "thinking"]
    assert synthetic["is_synthetic"] is True
    [call] = [m for m in detail["messages"] if m["kind"] == "tool"]
    assert call["name"] == TASK_COMPLETED_TOOL
    assert call["status"] == "done"
    payload = json.loads(call["result"])
    assert payload["task_id"] == job.id
    assert (payload["status"], payload["result"]) == ("done", "The answer is 42.")
    [done] = [e.event for e in await wait_done(events) if isinstance(e.event, Done)]
    assert done.content == "Your background research is done: 42."
    assert (await scheduler.store.get(job.id)).enabled is False  # a single run


async def test_an_async_task_taken_up_after_a_restart_still_shares_its_parents_scratchpad(
    app_config: AppConfig,
    engine: Engine,
    hub: ChatHub,
    hub_config: HubConfig,
    scheduler: Scheduler,
    model: EchoModel,
    clock: FakeClock,
    origin: int,
) -> None:
    """The restarted process reopened the task's session without its parent's scratchpad:
    the task went on with an empty one of its own (until 2026-12-07; found by review)."""
    blocker = BlockingTool()
    engine.tools.register(blocker)
    await engine.store.scratchpad.set(origin, "plan", "PARENT-NOTE-42")
    await research_task(scheduler, clock, origin)
    [job] = await scheduler.store.for_source(ORIGIN)
    model.add(tool_call("wait_here", "{}"))
    await scheduler.dispatcher.step()
    await asyncio.wait_for(blocker.started.wait(), 5)
    await scheduler.dispatcher.close()  # a deploy while the task works

    again = await Engine.open(app_config, models=ModelRegistry([model]), policy=AllowAll())
    hub_again = ChatHub(again, hub_config)
    await hub_again.start()
    restarted = Scheduler(again, hub_again, timezone="UTC", clock=clock, owner="worker-b")
    try:
        again.tools.register(BlockingTool())  # its call was cut short: never run again
        model.add(text("Found it."))
        clock.advance(timedelta(minutes=5))
        await restarted.dispatcher.step()
        await asyncio.wait_for(restarted.dispatcher.drain(), 5)
        [run] = await restarted.store.runs(job.id)
    finally:
        await restarted.close()
        await hub_again.close()
        await again.close()
    assert (run.status, run.result) == ("done", "Found it.")
    [_first, resumed] = [r for r in model.requests if last_user_text(r[0]) == "find"]
    assert "PARENT-NOTE-42" in "\n".join(
        str(m["content"]) for m in resumed[0] if m["role"] == "system"
    )


async def test_an_async_task_asked_for_before_a_long_restart_still_runs(
    engine: Engine,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    origin: int,
    notified: list[Notification],
) -> None:
    """Made, then the process stopped for more than the misfire grace (a deploy): its one
    fire was recorded missed, the chat told a "Scheduled job" missed a run, and the
    conversation that asked never got its result (found by review)."""
    model.add(text("Found it."), text("Your research is done."))
    before = make_scheduler(owner="worker-a")
    job = await before.create_async(ORIGIN, origin, "Research", "find")
    await before.close()
    clock.advance(timedelta(minutes=10))
    after = make_scheduler(owner="worker-b")
    assert (await after.dispatcher.step()).started == 1
    await after.dispatcher.drain()
    [run] = await after.store.runs(job.id)
    assert (run.status, run.result) == ("done", "Found it.")
    assert not [n for n in notified if "missed" in n.summary]


async def test_an_async_tasks_result_after_new_reaches_the_chat(
    engine: Engine,
    hub: ChatHub,
    scheduler: Scheduler,
    model: EchoModel,
    manual_sleep: ManualSleep,
    notified: list[Notification],
    origin: int,
) -> None:
    """The person typed /new while the task ran: its result went into the old
    conversation, marked delivered, and nothing reached the chat (found by review). The
    chat's conversation of now is told."""
    model.add(text("There are 25 primes below 100."), text("Your task is done: 25 primes."))
    job = await scheduler.create_async(ORIGIN, origin, "Primes", "Count the primes below 100.")
    await hub.clear(ORIGIN)
    events = hub.events(ORIGIN)

    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()

    [notice] = [n for n in notified if n.refs.get("job_id") == job.id]
    assert notice.summary.startswith("Background task 'Primes' finished.")
    assert "25 primes below 100" in notice.summary
    await deliver_notifications(hub, manual_sleep, events)
    [run] = await scheduler.store.runs(job.id)
    assert run.delivery_status == "delivered"


# -- deleting a job while it runs -----------------------------------------------------------------


async def in_flight_then_deleted(
    engine: Engine, scheduler: Scheduler, clock: FakeClock, model: EchoModel
) -> tuple[Run, BlockingTool]:
    """A run blocked in a tool when its job is deleted; returns once the run has ended."""
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    run = await due_run(scheduler, clock, "Slow job")
    assert (await scheduler.dispatcher.step()).started == 1
    await asyncio.wait_for(blocker.started.wait(), 5)

    await scheduler.delete(ORIGIN, run.job_id)  # the hub cancels the run's session
    await asyncio.wait_for(scheduler.dispatcher.drain(), 5)
    return run, blocker


async def test_deleting_a_job_cancels_its_run_in_flight_and_no_result_is_delivered(
    engine: Engine,
    hub: ChatHub,
    scheduler: Scheduler,
    clock: FakeClock,
    model: EchoModel,
    notified: list[Notification],
    origin: int,
) -> None:
    bus = engine.system_bus.subscribe()
    run, blocker = await in_flight_then_deleted(engine, scheduler, clock, model)

    assert blocker.cancelled and blocker.runs == 1
    stored = await scheduler.store.run(run.id)
    assert (stored.status, stored.result) == ("failed", None)
    assert (await next_job_completed(bus)).status == "failed"
    assert len(model.requests) == 1  # the model was not asked to go on after the cancel
    assert not [n for n in notified if n.event_type == "job_result"]
    assert await scheduler.jobs(ORIGIN) == []
    assert await scheduler.store.claim("worker-z", clock() + LEASE * 10, LEASE, 10) == []


async def test_a_deleted_jobs_cancelled_run_is_not_reported_to_the_chat(
    engine: Engine,
    hub: ChatHub,
    scheduler: Scheduler,
    clock: FakeClock,
    model: EchoModel,
    notified: list[Notification],
    origin: int,
) -> None:
    """The user deleted the job; "Scheduled job 'Slow job' failed: Turn cancelled ..." is
    noise. (Its pending runs get ``delivery_status='none'`` on delete; the running one
    should end the same way.)"""
    run, _ = await in_flight_then_deleted(engine, scheduler, clock, model)

    assert notified == []
    assert (await scheduler.store.run(run.id)).delivery_status == "none"


# -- what the service refuses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "timezone", "message"),
    [
        ("every morning", None, "expected 5, 6 or 7 fields"),
        ("61 * * * *", None, "cron spec: minute"),
        ("@fortnightly", None, "unknown nickname"),
        ("0 8 * * *", "Mars/Olympus_Mons", "'Mars/Olympus_Mons' is not an IANA time zone"),
        ("*/30 * * * * *", None, "fires every 30 s; the shortest allowed period is 60 s"),
        ("0 0 9 1 2 * 2025", None, "never fires after now"),
    ],
)
async def test_bad_schedules_are_refused_with_a_clear_message(
    scheduler: Scheduler, spec: str, timezone: str | None, message: str
) -> None:
    with pytest.raises(SchedulerError, match=message.replace("*", r"\*")):
        await scheduler.create_cron(ORIGIN, "t", spec, "do it", timezone=timezone)
    assert await scheduler.jobs(ORIGIN) == []


async def test_oversized_or_empty_text_is_refused(scheduler: Scheduler, origin: int) -> None:
    with pytest.raises(SchedulerError, match="prompt: 1000000 characters; the limit is 32000"):
        await scheduler.create_cron(ORIGIN, "big", "0 8 * * *", "x" * 1_000_000)
    with pytest.raises(SchedulerError, match="prompt: 1000000 characters"):
        await scheduler.create_async(ORIGIN, origin, "big", "x" * 1_000_000)
    with pytest.raises(SchedulerError, match="title: empty"):
        await scheduler.create_cron(ORIGIN, "  ", "0 8 * * *", "do it")
    with pytest.raises(SchedulerError, match="prompt: empty"):
        await scheduler.create_cron(ORIGIN, "t", "0 8 * * *", " \n ")
    assert await scheduler.jobs(ORIGIN) == []


async def test_a_spec_or_agent_wider_than_its_column_is_refused_in_a_sentence(
    scheduler: Scheduler, origin: int
) -> None:
    """Accepted by the checks, they failed the job's INSERT on PostgreSQL: the model read
    "internal error" (found by review on 2026-12-06). Spaces between fields are one."""
    spaced = await scheduler.create_cron(ORIGIN, "t", "0" + " " * 300 + "8 * * *", "do it")
    assert spaced.spec == "0 8 * * *"
    every = ",".join(map(str, range(60))) + " " + ",".join(map(str, range(24)))
    wide = every + " " + ",".join(map(str, range(1, 32))) + " * *"
    with pytest.raises(SchedulerError, match="cron spec: longer than 255 characters"):
        await scheduler.create_cron(ORIGIN, "t", wide, "do it")
    for agent in ("a" * 100, "nobody"):
        with pytest.raises(SchedulerError, match="agent: there is no agent"):
            await scheduler.create_cron(ORIGIN, "t", "0 8 * * *", "do it", agent_id=agent)
        with pytest.raises(SchedulerError, match="agent: there is no agent"):
            await scheduler.create_async(ORIGIN, origin, "t", "do it", agent_id=agent)
    assert [job.id for job in await scheduler.jobs(ORIGIN)] == [spaced.id]


async def test_the_per_chat_job_limit(make_scheduler: Callable[..., Scheduler]) -> None:
    scheduler = make_scheduler(limits=SchedulerLimits(max_jobs_per_source=2))
    first = await scheduler.create_cron(ORIGIN, "one", "0 8 * * *", "a")
    await scheduler.create_cron(ORIGIN, "two", "0 9 * * *", "b")

    with pytest.raises(SchedulerError, match=r"already has 2 scheduled tasks \(the limit is 2\)"):
        await scheduler.create_cron(ORIGIN, "three", "0 10 * * *", "c")

    await scheduler.create_cron("telegram:2", "elsewhere", "0 10 * * *", "c")  # per chat
    await scheduler.delete(ORIGIN, first.id)
    await scheduler.create_cron(ORIGIN, "three", "0 10 * * *", "c")  # a slot is free again


async def test_finished_one_off_tasks_do_not_use_up_the_job_limit(
    make_scheduler: Callable[..., Scheduler], clock: FakeClock, model: EchoModel, origin: int
) -> None:
    """A single-run job that has fired (or an async task that returned) schedules nothing
    any more; it should not keep the chat from creating new jobs."""
    scheduler = make_scheduler(limits=SchedulerLimits(max_jobs_per_source=2))
    for title in ("first", "second"):
        await scheduler.create_async(ORIGIN, origin, title, "do it")
        await scheduler.dispatcher.step()
        await scheduler.dispatcher.drain()
    assert all(not job.enabled for job in await scheduler.jobs(ORIGIN))

    await scheduler.create_cron(ORIGIN, "daily", "0 8 * * *", "go")


async def test_another_chats_job_cannot_be_changed(scheduler: Scheduler) -> None:
    job = await scheduler.create_cron(ORIGIN, "mine", "0 8 * * *", "go")

    with pytest.raises(SchedulerError, match=f"task {job.id}: no such task in this chat"):
        await scheduler.toggle("telegram:2", job.id, False)
    with pytest.raises(SchedulerError, match="no such task in this chat"):
        await scheduler.delete("telegram:2", job.id)
    with pytest.raises(SchedulerError, match="task 999: no such task"):
        await scheduler.toggle(ORIGIN, 999, False)
    assert (await scheduler.store.get(job.id)).enabled is True


async def test_resuming_computes_the_next_run_from_now_without_catching_up(
    scheduler: Scheduler, clock: FakeClock
) -> None:
    job = await scheduler.create_cron(ORIGIN, "hourly", "0 * * * *", "go")
    assert job.next_run_at == datetime(2026, 1, 1, 1, tzinfo=UTC)
    clock.advance(timedelta(minutes=30))
    paused = await scheduler.toggle(ORIGIN, job.id, False)
    assert (paused.enabled, paused.next_run_at) == (False, None)
    assert "paused" in scheduler.describe(paused)

    clock.advance(timedelta(hours=5))  # 05:30: five fires passed while paused
    assert (await scheduler.dispatcher.step()).created == 0
    resumed = await scheduler.toggle(ORIGIN, job.id, True)
    report = await scheduler.dispatcher.step()

    assert (resumed.enabled, resumed.next_run_at) == (True, datetime(2026, 1, 1, 6, tzinfo=UTC))
    assert (report.created, report.missed) == (0, 0)
    assert await scheduler.store.runs(job.id) == []


async def test_a_one_off_task_that_fired_is_done_not_paused(
    scheduler: Scheduler, clock: FakeClock, origin: int
) -> None:
    """A single run that fired, or a background task started, was listed as paused with
    a ▶️ Resume that answered "no future run to resume" (found by review)."""
    xmas = await scheduler.create_cron(ORIGIN, "Xmas", "0 0 9 25 12 * 2026", "Merry xmas.")
    later = await scheduler.create_cron(ORIGIN, "Later", "0 0 9 26 12 * 2026", "Later.")
    research = await scheduler.create_async(ORIGIN, origin, "Research", "find things")
    later = await scheduler.toggle(ORIGIN, later.id, False)  # paused before its day
    assert xmas.single_run and xmas.next_run_at is not None
    clock.now = xmas.next_run_at + timedelta(seconds=1)
    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()

    jobs = {job.id: job for job in await scheduler.jobs(ORIGIN)}
    last = await scheduler.last_statuses(list(jobs.values()))
    for done in (xmas, research):
        assert scheduler.finished(jobs[done.id], last.get(done.id))
        assert scheduler.describe(jobs[done.id], last.get(done.id)).endswith(" — done")
    # Paused before its day, it never ran: paused, and it can be resumed (even once its
    # day has passed it was called "done"; found by review).
    assert later.id not in last and not scheduler.finished(jobs[later.id], None)
    assert scheduler.describe(jobs[later.id]).endswith(" — paused")
    with pytest.raises(SchedulerError, match="no future run"):
        await scheduler.toggle(ORIGIN, xmas.id, True)
    assert (await scheduler.toggle(ORIGIN, later.id, True)).enabled


async def test_a_schedule_that_ran_out_of_fires_is_done_not_paused(
    make_scheduler, clock: FakeClock, origin: int
) -> None:
    """``0 0 9 1,2 1 * 2026`` fires twice and never again: it was listed as paused with a
    ▶️ that could only fail, and counted against the chat's job limit for good (found by
    review on 2026-12-07)."""
    scheduler = make_scheduler(owner="worker-a", limits=SchedulerLimits(max_jobs_per_source=1))
    job = await scheduler.create_cron(ORIGIN, "New year", "0 0 9 1,2 1 * 2026", "Hi.")
    assert not job.single_run
    for _ in range(2):
        job = await scheduler.store.get(job.id)
        assert job is not None and job.next_run_at is not None
        clock.now = job.next_run_at + timedelta(seconds=1)
        await scheduler.dispatcher.step()
        await scheduler.dispatcher.drain()
    [ended] = await scheduler.jobs(ORIGIN)
    assert not ended.enabled and ended.next_run_at is None
    last = await scheduler.last_statuses([ended])
    assert scheduler.finished(ended, last.get(ended.id))
    assert scheduler.describe(ended, last.get(ended.id)).endswith(" — done")
    await scheduler.create_cron(ORIGIN, "Daily", "0 8 * * *", "go")  # within the limit


# -- the APScheduler wake-up ----------------------------------------------------------------------


async def test_the_dispatcher_wakes_at_the_due_time_and_sleeps_until_the_next(
    engine: Engine,
    make_scheduler: Callable[..., Scheduler],
    model: EchoModel,
    origin: int,
) -> None:
    """A real APScheduler timer, with a fire a minute in the (real) past: it runs at once,
    then the wake-up is set for the next day's fire."""
    due = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    clock = FakeClock(due - timedelta(minutes=10))
    scheduler = make_scheduler(owner="worker-a", clock_=clock)
    bus = engine.system_bus.subscribe()
    await scheduler.start()  # the fixture closes it
    job = await scheduler.create_cron(ORIGIN, "daily", f"{due.minute} {due.hour} * * *", "go")
    assert job.next_run_at == due
    clock.now = due + timedelta(seconds=1)  # the timer (already past) fires next

    completed = await next_job_completed(bus)
    assert completed.job_id == job.id and completed.status == "done"

    async def rescheduled() -> None:
        while True:
            wake = scheduler.dispatcher._scheduler.get_job(WAKE_ID)
            if wake is not None and wake.next_run_time == due + timedelta(days=1):
                return
            await asyncio.sleep(0.01)

    await asyncio.wait_for(rescheduled(), 5)
    assert scheduler.dispatcher.last_step_at == clock.now


# -- claimed runs waiting for a slot --------------------------------------------------------------


async def blocked_with_queue(
    engine: Engine,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    *,
    sleep: ManualSleep,
) -> tuple[Scheduler, list[Run], BlockingTool]:
    """Three jobs due, one slot: the first run blocks in a tool, two wait claimed."""
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    scheduler = make_scheduler(owner="worker-a", max_concurrent=1, sleep=sleep)
    for i in range(3):
        await scheduler.create_cron(ORIGIN, f"job {i}", "0 8 * * *", f"job {i}: go")
    clock.now = datetime(2026, 1, 1, 8, 0, 5, tzinfo=UTC)

    report = await scheduler.dispatcher.step()
    await asyncio.wait_for(blocker.started.wait(), 5)

    assert (report.created, report.started) == (3, 3)  # all three claimed at once
    assert scheduler.dispatcher.queued == 2
    assert len(await cron_sessions(engine)) == 1  # one executes
    runs = [
        run for job in await scheduler.jobs(ORIGIN) for run in await scheduler.store.runs(job.id)
    ]
    assert all((r.status, r.lease_owner, r.attempt) == ("running", "worker-a", 1) for r in runs)
    return scheduler, sorted(runs, key=lambda r: r.id), blocker


def renewals(scheduler: Scheduler) -> asyncio.Queue[set[int]]:
    """What each bulk lease renewal kept."""
    seen: asyncio.Queue[set[int]] = asyncio.Queue()
    original = scheduler.store.renew

    async def renew(owner: str, run_ids: Any, expires_at: datetime) -> set[int]:
        kept = await original(owner, run_ids, expires_at)
        seen.put_nowait(kept)
        return kept

    scheduler.store.renew = renew  # type: ignore[method-assign]
    return seen


async def test_claimed_runs_wait_for_a_slot_with_their_leases_renewed_and_then_run(
    engine: Engine,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    notified: list[Notification],
    origin: int,
) -> None:
    sleep = ManualSleep()
    scheduler, runs, blocker = await blocked_with_queue(
        engine, make_scheduler, clock, model, sleep=sleep
    )
    seen = renewals(scheduler)
    queued = {r.id for r in runs[1:]}

    clock.advance(timedelta(seconds=50))
    await sleep.release(LEASE.total_seconds() / 3)  # the keeper of the executing run
    await sleep.release(LEASE.total_seconds() / 3)  # the renewal of the queued ones
    assert await asyncio.wait_for(seen.get(), 5) == queued
    for run in runs:
        stored = await scheduler.store.run(run.id)
        assert stored.lease_expires_at == clock() + LEASE  # renewed at 08:00:55
    clock.advance(timedelta(seconds=30))  # past the first lease (08:01:05)
    other = make_scheduler(owner="worker-b")
    assert (await other.dispatcher.step()).started == 0  # nothing to take over

    blocker.release.set()
    await asyncio.wait_for(scheduler.dispatcher.drain(), 5)

    stored = [await scheduler.store.run(r.id) for r in runs]
    assert [(r.status, r.attempt, r.lease_owner) for r in stored] == [("done", 1, "worker-a")] * 3
    assert sorted(notified_runs(notified)) == [r.id for r in runs]
    assert len(await cron_sessions(engine)) == 3


async def test_queued_runs_of_a_worker_that_stopped_are_reclaimed_by_another(
    engine: Engine,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    notified: list[Notification],
    origin: int,
) -> None:
    """The process holding claimed runs dies (its in-memory queue with it): their leases
    run out and another worker takes them, each run once more, each delivered once."""
    dead, runs, _ = await blocked_with_queue(
        engine, make_scheduler, clock, model, sleep=ManualSleep()
    )

    async def killed(*_: Any) -> int:
        return 0  # nothing reaches the database any more

    dead.store.release = killed  # type: ignore[method-assign]
    await dead.close()  # no outcome stored, no lease given back: as if killed

    alive = make_scheduler(owner="worker-b")
    clock.advance(LEASE / 2)
    assert (await alive.dispatcher.step()).started == 0  # the leases still hold
    clock.advance(LEASE)
    report = await alive.dispatcher.step()
    await asyncio.wait_for(alive.dispatcher.drain(), 5)

    assert report.started == 3
    stored = [await alive.store.run(r.id) for r in runs]
    assert [(r.status, r.attempt, r.lease_owner) for r in stored] == [("done", 2, "worker-b")] * 3
    assert sorted(notified_runs(notified)) == [r.id for r in runs]


async def test_a_run_whose_job_is_deleted_while_it_waits_for_a_slot_does_not_run(
    engine: Engine,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    notified: list[Notification],
    origin: int,
) -> None:
    scheduler, runs, blocker = await blocked_with_queue(
        engine, make_scheduler, clock, model, sleep=ManualSleep()
    )
    waiting = runs[1]
    await scheduler.delete(ORIGIN, waiting.job_id)

    blocker.release.set()
    await asyncio.wait_for(scheduler.dispatcher.drain(), 5)

    stored = await scheduler.store.run(waiting.id)
    assert (stored.status, stored.error, stored.delivery_status) == (
        "failed",
        "job deleted",
        "none",
    )
    assert waiting.id not in notified_runs(notified)
    assert sorted(notified_runs(notified)) == [runs[0].id, runs[2].id]
    assert [m for m in model.requests if last_user_text(m[0]) == "job 1: go"] == []


async def test_a_sweep_does_not_redeliver_a_run_whose_delivery_was_recorded_while_it_read(
    scheduler: Scheduler, clock: FakeClock
) -> None:
    """The sweep's read of undelivered runs is a snapshot (on PostgreSQL, another
    connection): a notification stored while it runs leaves the run listed as undelivered
    and no longer busy. Seen in bench/scheduler_scale.py on PostgreSQL: 3 of 10,000 runs
    were notified twice."""
    run = await due_run(scheduler, clock)
    runner = scheduler.runner
    runner.busy.add(run.id)  # its notification is on its way to the chat

    async def stale_read() -> list[Run]:
        snapshot = [run]  # delivery_status still 'pending' here
        runner._release([run.id])  # ... and the delivery is recorded meanwhile
        return snapshot

    assert await runner.sweepable(stale_read) == []

    async def later_read() -> list[Run]:
        return [run]

    assert await runner.sweepable(later_read) == [run]  # really undelivered: swept


async def test_a_worker_that_shuts_down_gives_its_queued_runs_back_at_once(
    engine: Engine,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    notified: list[Notification],
    origin: int,
) -> None:
    """A graceful stop: the claimed runs that never started are pending again at once
    (their attempt not counted); the one cut off while executing waits for its lease."""
    stopping, runs, _ = await blocked_with_queue(
        engine, make_scheduler, clock, model, sleep=ManualSleep()
    )
    await stopping.close()

    after = make_scheduler(owner="worker-b")
    report = await after.dispatcher.step()
    await asyncio.wait_for(after.dispatcher.drain(), 5)

    assert report.started == 2
    stored = [await after.store.run(r.id) for r in runs]
    assert [(r.status, r.attempt, r.lease_owner) for r in stored] == [
        ("running", 1, "worker-a"),  # cut off mid-run: reclaimed when its lease expires
        ("done", 1, "worker-b"),
        ("done", 1, "worker-b"),
    ]
    assert sorted(notified_runs(notified)) == [runs[1].id, runs[2].id]


async def test_a_result_still_waiting_for_its_chat_is_not_delivered_by_another_worker(
    hub: ChatHub,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    notified: list[Notification],
    origin: int,
) -> None:
    """Worker a finished a run and handed its result to the chat, where it waits (a turn
    runs, an approval card waits: in a fleet, for the chat's owner) longer than a lease:
    a's steps keep its delivery lease, so b's sweep leaves it (b told the chat again)."""
    a, b = make_scheduler(owner="worker-a"), make_scheduler(owner="worker-b")
    job = await a.create_cron(ORIGIN, "Digest", "0 8 * * *", "go")
    model.add(text("The result."))
    clock.now = job.next_run_at + timedelta(seconds=5)
    await a.dispatcher.step()
    await a.dispatcher.drain()
    [run] = await a.store.runs(job.id)
    assert run.status == "done" and notified_runs(notified) == [run.id]
    a.runner.busy.add(run.id)  # still on its way to the chat (not stored there yet)
    for _ in range(4):  # two minutes of a's 30 s safety wake
        clock.advance(timedelta(seconds=30))
        await a.dispatcher.step()
    report = await b.dispatcher.step()
    assert report.delivered == 0
    assert notified_runs(notified) == [run.id]


async def test_more_missed_fires_than_rows_are_told_whole_with_when_they_began(
    hub: ChatHub, scheduler: Scheduler, clock: FakeClock, notified: list[Notification]
) -> None:
    """Down across 150 hourly fires: 100 rows are kept (the first fire's and the last 99),
    and the one notice tells all 150 from the first (it told 100 from the 51st)."""
    job = await scheduler.create_cron(ORIGIN, "Hourly check", "0 * * * *", "check")
    first = clock() + timedelta(hours=1)
    first = first.replace(minute=0, second=0, microsecond=0)
    clock.advance(timedelta(hours=151, minutes=2))  # the 151st fire is on time

    report = await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()

    assert report.missed == 150
    missed = [r for r in await scheduler.store.runs(job.id) if r.status == "missed"]
    assert len(missed) == MAX_MISSED_ROWS
    [notice] = [n for n in notified if n.event_type == "job_missed"]
    # In the job's zone, as its chat reads the time (it was UTC; found by review).
    shown = first.astimezone(ZoneInfo(job.timezone))
    assert f"missed 150 run(s) between {shown:%a %d %b %Y %H:%M} ({job.timezone}) and " in (
        notice.summary
    )


async def test_the_missed_notice_tells_the_times_in_the_jobs_zone(
    scheduler, clock, notified, origin
) -> None:
    """A Rome 08:00 job told "07:00:00+00:00", which the agent repeated (found by review)."""
    job = await scheduler.create_cron(
        ORIGIN, "Briefing", "0 8 * * *", "Brief me.", timezone="Europe/Rome"
    )
    clock.now = job.next_run_at + timedelta(days=2, hours=1)  # down for two days
    await scheduler.dispatcher.step()
    await asyncio.wait_for(scheduler.dispatcher.drain(), 5)
    [notice] = [n for n in notified if n.event_type == "job_missed"]
    assert "08:00 (Europe/Rome) and " in notice.summary and "+00:00" not in notice.summary


async def test_missed_fires_are_told_once_when_two_workers_step_at_once(
    hub: ChatHub,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    notified: list[Notification],
    origin: int,
) -> None:
    """The fleet was down over several fires and two workers step for the same due time:
    the chat is told about the missed runs once (missed runs had no delivery lease, and
    every worker's sweep told the chat)."""
    a, b = make_scheduler(owner="worker-a"), make_scheduler(owner="worker-b")
    await a.create_cron(ORIGIN, "Hourly check", "0 * * * *", "check")
    clock.advance(timedelta(hours=4, minutes=2))
    await a.dispatcher.step()
    await b.dispatcher.step()
    await a.dispatcher.drain()
    await b.dispatcher.drain()
    assert len([n for n in notified if n.event_type == "job_missed"]) == 1


async def test_a_crashed_run_tells_the_chat_no_exception_text(
    scheduler: Scheduler,
    clock: FakeClock,
    origin: int,
    notified: list[Notification],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run's exception (class, text, SQL) was the failure the chat's agent read and
    relayed (found by review): the chat gets a sentence with an error id, the log the rest."""

    async def broken(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("INSERT INTO chat_history failed: database is locked")

    monkeypatch.setattr(ChatSessionHandler, "handle_message", broken)
    job = await scheduler.create_cron(ORIGIN, "Morning digest", "0 8 * * *", "go")
    clock.now = job.next_run_at
    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()

    [run] = await scheduler.store.runs(job.id)
    [notice] = [n for n in notified if n.refs.get("job_id") == job.id]
    assert run.status == "failed"
    assert "internal error (error " in notice.summary
    assert "RuntimeError" not in notice.summary and "INSERT" not in notice.summary


@pytest.mark.parametrize("job_id", [2**63, 10**30])
async def test_a_task_id_no_row_can_have_is_no_such_task(
    scheduler: Scheduler, origin: int, job_id: int
) -> None:
    """Past the database's integers the driver overflowed: "internal error" instead of
    "no such task" (found by review)."""
    with pytest.raises(SchedulerError, match="no such task"):
        await scheduler.delete(ORIGIN, job_id)
    with pytest.raises(SchedulerError, match="no such task"):
        await scheduler.toggle(ORIGIN, job_id, False)


async def test_a_job_whose_zone_left_tzdata_is_paused_and_the_others_fire(
    scheduler: Scheduler, clock: FakeClock, origin: int, notified: list[Notification]
) -> None:
    """A tzdata update drops zones (``US/Pacific-New`` in 2020): that one job's error failed
    every step, so no job of anyone fired, and ``/jobs`` failed in its chat (found by
    review). It is paused and its chat told; the others fire."""
    from bot.platform.jobs import JobAction, Jobs
    from engine.approval import OPERATOR

    good = await scheduler.create_cron(ORIGIN, "Morning", "0 8 * * *", "brief me")
    gone = await scheduler.store.create(
        NewJob(
            kind="cron",
            title="Old",
            prompt="p",
            timezone="US/Pacific-New",
            spec="0 8 * * *",
            origin_source=ORIGIN,
            next_run_at=good.next_run_at,
        )
    )
    _text, entries = await Jobs(scheduler).listing(ORIGIN)
    assert len(entries) == 2
    clock.now = good.next_run_at + timedelta(seconds=1)

    await scheduler.dispatcher.wake()
    await scheduler.dispatcher.drain()

    assert [r.status for r in await scheduler.store.runs(good.id)] == ["done"]
    [failed] = await scheduler.store.runs(gone.id)
    assert failed.status == "failed" and "cannot be read" in (failed.error or "")
    assert not (await scheduler.store.get(gone.id)).enabled  # type: ignore[union-attr]
    await scheduler.dispatcher.step()  # the sweep tells its chat
    await scheduler.dispatcher.drain()
    assert any("cannot be read" in n.summary for n in notified if n.refs.get("job_id") == gone.id)
    # ▶️ on it says why it cannot go on (CronError went past every handler: "something
    # went wrong" in the chat, 500 from the API; found by review).
    said = await Jobs(scheduler).act(ORIGIN, JobAction(gone.id, "resume"), OPERATOR)
    assert "cannot be read" in said and "new schedule" in said


async def test_a_result_waiting_for_its_chat_holds_up_no_other_chats_jobs(
    engine: Engine,
    hub: ChatHub,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
    origin: int,
) -> None:
    """A sweep brought a task's result back into its conversation inside the dispatch
    step, so it waited for that chat's running turn (a long command, a card nobody
    answers), and no job of any chat fired meanwhile (found by review)."""
    dead = make_scheduler(owner="worker-a")
    await research_task(dead, clock, origin)
    await dead.store.materialize(clock(), dead.next_fire)
    [run] = await dead.store.claim("worker-a", clock(), LEASE, 1)
    await dead.store.finish(
        run.id, "worker-a", status="done", result="42", deliver_until=clock() + LEASE
    )
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"), text("done waiting"))
    await hub.send_message(ORIGIN, "run the long thing")
    await asyncio.wait_for(blocker.started.wait(), 5)
    alive = make_scheduler(owner="worker-b")
    clock.advance(LEASE + timedelta(seconds=1))

    try:
        await asyncio.wait_for(alive.dispatcher.step(), 5)  # its sweep takes the result
        await engine.store.sessions.for_source("telegram:2")
        briefing = await alive.create_cron("telegram:2", "Morning", "0 8 * * *", "brief me")
        clock.now = briefing.next_run_at + timedelta(seconds=1)
        model.add(text("Good morning."))
        await asyncio.wait_for(alive.dispatcher.step(), 5)  # the 08:00 wake
    finally:
        blocker.release.set()
    model.add(text("The research says 42."))
    await alive.dispatcher.drain()
    assert [r.status for r in await alive.store.runs(briefing.id)] == ["done"]
    [brought] = await alive.store.runs(run.job_id)
    assert brought.delivery_status == "delivered"


async def test_a_failed_lease_renewal_is_tried_again_and_the_run_stays_its_workers(
    engine: Engine,
    make_scheduler: Callable[..., Scheduler],
    clock: FakeClock,
    model: EchoModel,
) -> None:
    """One renewal that hit "database is locked" ended the renewals for good: the lease
    ran out under the running turn and another worker ran it again (found by review)."""
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    sleep = ManualSleep()
    worker = make_scheduler(owner="worker-a", sleep=sleep)
    job = await worker.create_cron(ORIGIN, "Long brief", "0 8 * * *", "go")
    clock.now = datetime(2026, 1, 1, 8, 0, 5, tzinfo=UTC)
    await worker.dispatcher.step()
    await asyncio.wait_for(blocker.started.wait(), 5)
    renew = worker.store.heartbeat
    locked = [OSError("database is locked")]

    async def once_locked(*args: Any) -> bool:
        if locked:
            raise locked.pop()
        return await renew(*args)

    worker.store.heartbeat = once_locked  # type: ignore[method-assign]
    for _ in range(6):  # two minutes, a renewal every 20 s: the first one fails
        clock.advance(LEASE / 3)
        await sleep.release(LEASE.total_seconds() / 3)
    other = make_scheduler(owner="worker-b")
    assert (await other.dispatcher.step()).started == 0  # still worker a's
    blocker.release.set()
    await asyncio.wait_for(worker.dispatcher.drain(), 5)
    [run] = await worker.store.runs(job.id)
    assert (run.status, run.attempt, run.lease_owner) == ("done", 1, "worker-a")


async def test_a_jobs_run_is_told_the_time_in_the_jobs_zone(
    scheduler: Scheduler, clock: FakeClock, model: EchoModel, origin: int
) -> None:
    """A 07:00 Tokyo briefing on a UTC service was told only it was 22:00 the day before,
    and briefed on the wrong day (found by review on 2026-12-07)."""
    job = await scheduler.create_cron(
        ORIGIN, "Briefing", "0 7 * * *", "brief me on today", timezone="Asia/Tokyo"
    )
    assert job.next_run_at == datetime(2026, 1, 1, 22, tzinfo=UTC)  # 07:00 in Tokyo
    clock.now = job.next_run_at + timedelta(seconds=2)
    await scheduler.dispatcher.step()
    await scheduler.dispatcher.drain()
    system = "\n".join(str(m["content"]) for m in model.requests[0][0] if m["role"] == "system")
    assert "it is Fri 02 Jan 2026 07:00 (Asia/Tokyo) there" in system
