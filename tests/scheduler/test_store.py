"""``JobStore`` on SQLite and PostgreSQL: every fire exactly once, leases, misfires, delivery.

Each test builds its jobs directly (``NewJob``) and passes the time in; a second ``Store``
over the same database stands for a second dispatcher process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.util import await_only

from engine.store import Store, utcnow
from scheduler.store import STOPPED, Job, JobStore, NewJob, Run
from scheduler.tables import job_runs, scheduled_jobs
from tests.scheduler.conftest import cron_next_fire

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=60)


def at(hours: float = 0, minutes: float = 0, seconds: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, minutes=minutes, seconds=seconds)


async def hourly(jobs: JobStore, **options: object) -> Job:
    """An ``0 * * * *`` job whose first fire is 01:00."""
    values: dict = {
        "kind": "cron",
        "title": "hourly",
        "prompt": "check the feed",
        "timezone": "UTC",
        "spec": "0 * * * *",
        "origin_source": "telegram:1",
        "next_run_at": at(1),
    }
    values.update(options)
    return await jobs.create(NewJob(**values))


def by_status(runs: list[Run]) -> dict[str, list[datetime]]:
    out: dict[str, list[datetime]] = {}
    for run in runs:
        out.setdefault(run.status, []).append(run.scheduled_for)
    return out


async def pending_run(jobs: JobStore, **options: object) -> Run:
    job = await hourly(jobs, **options)
    [run] = (await jobs.materialize(at(1), cron_next_fire)).runs
    assert run.job_id == job.id
    return run


# -- materialize: one run per fire ------------------------------------------------------------


async def test_a_due_fire_becomes_one_run_and_the_job_moves_on(jobs: JobStore) -> None:
    job = await hourly(jobs)
    assert await jobs.next_due_at() == at(1)

    assert (await jobs.materialize(at(0, 59), cron_next_fire)).runs == []  # not due yet
    made = await jobs.materialize(at(1, 0, 30), cron_next_fire)

    [run] = made.runs
    assert (run.scheduled_for, run.status, run.attempt) == (at(1), "pending", 0)
    assert made.missed == {}
    assert (await jobs.get(job.id)).next_run_at == at(2)
    assert await jobs.next_due_at() == at(2)

    again = await jobs.materialize(at(1, 0, 30), cron_next_fire)  # the same step, repeated
    assert again.runs == [] and again.missed == {}
    assert [r.id for r in await jobs.runs(job.id)] == [run.id]


async def test_a_dispatcher_with_a_stale_view_of_the_job_adds_no_second_run(
    jobs: JobStore,
) -> None:
    """The job's ``next_run_at`` rewound (a dispatcher that read it before the move):
    ``UNIQUE(job_id, scheduled_for)`` plus insert-or-ignore keep one row for the fire."""
    job = await hourly(jobs)
    [first] = (await jobs.materialize(at(1, 0, 10), cron_next_fire)).runs
    await jobs.set_enabled(job.id, True, at(1))  # as if the move had not happened

    await jobs.materialize(at(1, 0, 10), cron_next_fire)

    runs = await jobs.runs(job.id)
    assert [(r.id, r.scheduled_for) for r in runs] == [(first.id, at(1))]
    assert (await jobs.get(job.id)).next_run_at == at(2)


async def test_two_dispatchers_materializing_at_once_create_each_fire_once(
    store: Store, open_store: Callable[[], Awaitable[Store]]
) -> None:
    first, second = JobStore(store.db), JobStore((await open_store()).db)
    made = [await hourly(first, title=f"job {i}") for i in range(8)]

    for _ in range(3):  # a few rounds: the race shows up on PostgreSQL when it exists
        await asyncio.gather(
            first.materialize(at(1, 0, 30), cron_next_fire),
            second.materialize(at(1, 0, 30), cron_next_fire),
        )

    for job in made:
        runs = await first.runs(job.id)
        assert [(r.scheduled_for, r.status) for r in runs] == [(at(1), "pending")]
        assert (await first.get(job.id)).next_run_at == at(2)


async def test_each_of_two_concurrent_dispatchers_reports_only_the_runs_it_created(
    store: Store, open_store: Callable[[], Awaitable[Store]]
) -> None:
    """``Materialized.runs`` is "what one dispatch step created" (``StepReport.created``).
    The row is made once, but a dispatcher whose insert was ignored must not report it."""
    first, second = JobStore(store.db), JobStore((await open_store()).db)
    for i in range(8):
        await hourly(first, title=f"job {i}")

    a, b = await asyncio.gather(
        first.materialize(at(1, 0, 30), cron_next_fire),
        second.materialize(at(1, 0, 30), cron_next_fire),
    )

    assert len(a.runs) + len(b.runs) == 8
    assert not {r.id for r in a.runs} & {r.id for r in b.runs}


async def test_a_single_run_job_is_disabled_after_its_fire(jobs: JobStore) -> None:
    job = await jobs.create(
        NewJob(
            kind="cron",
            title="once",
            prompt="remind me",
            timezone="UTC",
            spec="0 0 9 1 2 * 2026",  # 9:00 on 1 Feb 2026 only
            single_run=True,
            next_run_at=datetime(2026, 2, 1, 9, tzinfo=UTC),
        )
    )
    [run] = (await jobs.materialize(datetime(2026, 2, 1, 9, 0, 5, tzinfo=UTC), cron_next_fire)).runs

    after = await jobs.get(job.id)
    assert run.scheduled_for == datetime(2026, 2, 1, 9, tzinfo=UTC)
    assert (after.enabled, after.next_run_at) == (False, None)
    assert await jobs.next_due_at() is None
    assert (await jobs.materialize(datetime(2027, 3, 1, tzinfo=UTC), cron_next_fire)).runs == []


# -- misfires: down across several fires -----------------------------------------------------


async def test_coalesce_keeps_only_the_latest_on_time_fire(jobs: JobStore) -> None:
    job = await hourly(jobs)  # fires 01:00 .. 05:00 pass while "down"
    made = await jobs.materialize(at(5, 2), cron_next_fire)

    assert [r.scheduled_for for r in made.runs] == [at(5)]
    assert made.missed == {job.id: 4}
    runs = await jobs.runs(job.id)
    assert by_status(runs) == {"missed": [at(1), at(2), at(3), at(4)], "pending": [at(5)]}
    assert all(r.delivery_status == "pending" for r in runs)
    assert (await jobs.get(job.id)).next_run_at == at(6)


async def test_coalesce_still_runs_once_when_several_fires_are_within_grace(
    jobs: JobStore,
) -> None:
    job = await hourly(jobs, misfire_grace_s=3 * 3600)  # 03:00, 04:00, 05:00 within grace
    made = await jobs.materialize(at(5, 2), cron_next_fire)

    assert [r.scheduled_for for r in made.runs] == [at(5)]
    assert made.missed == {job.id: 4}
    assert by_status(await jobs.runs(job.id)) == {
        "missed": [at(1), at(2), at(3), at(4)],
        "pending": [at(5)],
    }


async def test_without_coalesce_every_fire_within_grace_runs(jobs: JobStore) -> None:
    job = await hourly(jobs, coalesce=False, misfire_grace_s=3 * 3600)
    made = await jobs.materialize(at(5, 2), cron_next_fire)

    assert [r.scheduled_for for r in made.runs] == [at(3), at(4), at(5)]
    assert made.missed == {job.id: 2}
    assert by_status(await jobs.runs(job.id)) == {
        "missed": [at(1), at(2)],
        "pending": [at(3), at(4), at(5)],
    }


@pytest.mark.parametrize(
    ("grace_s", "pending", "missed"),
    [
        (60, [], [1, 2, 3, 4, 5]),  # even the last fire is 2 minutes late
        (300, [5], [1, 2, 3, 4]),
        (2 * 3600, [4, 5], [1, 2, 3]),
        (24 * 3600, [1, 2, 3, 4, 5], []),
    ],
)
async def test_the_misfire_grace_decides_what_still_runs(
    jobs: JobStore, grace_s: int, pending: list[int], missed: list[int]
) -> None:
    job = await hourly(jobs, coalesce=False, misfire_grace_s=grace_s)
    made = await jobs.materialize(at(5, 2), cron_next_fire)

    assert [r.scheduled_for for r in made.runs] == [at(h) for h in pending]
    assert made.missed == ({job.id: len(missed)} if missed else {})
    statuses = by_status(await jobs.runs(job.id))
    assert statuses.get("pending", []) == [at(h) for h in pending]
    assert statuses.get("missed", []) == [at(h) for h in missed]
    assert (await jobs.get(job.id)).next_run_at == at(6)


async def test_a_fire_on_time_still_runs_after_more_fires_were_missed_than_are_counted(
    jobs: JobStore,
) -> None:
    """Down for 12,000 hourly fires (a job every minute down for a week is the same): the
    fire on time still runs, and the schedule goes on from now (it went on from now
    without running it: the 10,000 fires counted ended long before)."""
    job = await hourly(jobs)
    made = await jobs.materialize(at(12_000, 0, 2), cron_next_fire)

    assert [r.scheduled_for for r in made.runs] == [at(12_000)]
    assert made.missed[job.id] >= 10_000
    assert (await jobs.get(job.id)).next_run_at == at(12_001)


# -- claims and leases -------------------------------------------------------------------------


async def test_two_owners_claiming_at_once_never_share_a_run(
    store: Store, open_store: Callable[[], Awaitable[Store]]
) -> None:
    a, b = JobStore(store.db), JobStore((await open_store()).db)
    for i in range(6):
        await hourly(a, title=f"job {i}")
    created = (await a.materialize(at(1), cron_next_fire)).runs
    assert len(created) == 6

    for_a, for_b = await asyncio.gather(
        a.claim("worker-a", at(1), LEASE, 10), b.claim("worker-b", at(1), LEASE, 10)
    )

    ids_a, ids_b = {r.id for r in for_a}, {r.id for r in for_b}
    assert not ids_a & ids_b
    assert ids_a | ids_b == {r.id for r in created}
    assert all((r.lease_owner, r.attempt) == ("worker-a", 1) for r in for_a)
    assert all((r.lease_owner, r.attempt) == ("worker-b", 1) for r in for_b)
    assert await a.claim("worker-c", at(1, 0, 30), LEASE, 10) == []


async def test_claim_respects_the_limit_and_the_lease_is_set(jobs: JobStore) -> None:
    for i in range(3):
        await hourly(jobs, title=f"job {i}")
    await jobs.materialize(at(1), cron_next_fire)

    claimed = await jobs.claim("worker-a", at(1, 0, 5), LEASE, 2)

    assert len(claimed) == 2
    for run in claimed:
        assert run.status == "running"
        assert run.lease_expires_at == at(1, 0, 5) + LEASE
    assert len(await jobs.claim("worker-b", at(1, 0, 5), LEASE, 5)) == 1


async def test_an_expired_lease_is_reclaimed_with_the_next_attempt(jobs: JobStore) -> None:
    run = await pending_run(jobs)
    [mine] = await jobs.claim("worker-a", at(1), LEASE, 1)
    assert mine.attempt == 1

    assert await jobs.claim("worker-b", at(1, 0, 59), LEASE, 1) == []  # still leased
    [theirs] = await jobs.claim("worker-b", at(1, 1, 1), LEASE, 1)

    assert (theirs.id, theirs.attempt, theirs.lease_owner) == (run.id, 2, "worker-b")
    assert theirs.lease_expires_at == at(1, 1, 1) + LEASE
    # The old owner is a zombie now: it can neither renew nor store an outcome.
    assert not await jobs.heartbeat(run.id, "worker-a", at(1, 5))
    assert not await jobs.finish(run.id, "worker-a", status="done", result="late")
    assert await jobs.finish(run.id, "worker-b", status="done", result="fresh")
    assert (await jobs.run(run.id)).result == "fresh"


async def test_after_the_last_attempt_an_expired_run_is_abandoned(jobs: JobStore) -> None:
    run = await pending_run(jobs, max_attempts=2)
    await jobs.claim("worker-a", at(1), LEASE, 1)
    await jobs.claim("worker-b", at(1, 2), LEASE, 1)  # attempt 2 of 2
    assert await jobs.abandon_expired(at(1, 2, 30)) == []  # the lease still holds

    assert await jobs.claim("worker-c", at(1, 4), LEASE, 1) == []  # no third attempt
    [abandoned] = await jobs.abandon_expired(at(1, 4))

    assert (abandoned.id, abandoned.status, abandoned.attempt) == (run.id, "abandoned", 2)
    stored = await jobs.run(run.id)
    assert stored.status == "abandoned"
    assert "abandoned after 2 attempt(s)" in stored.error
    assert [r.id for r in await jobs.undelivered()] == [run.id]
    assert await jobs.abandon_expired(at(1, 10)) == []  # once


async def test_a_run_a_kill_asked_to_stop_is_never_taken_again_and_ends_when_its_lease_does(
    jobs: JobStore,
) -> None:
    """Its worker died (or stopped renewing) after the kill: no other worker runs it again."""
    run = await pending_run(jobs)
    await jobs.claim("worker-a", at(1), LEASE, 1)
    assert await jobs.start(run.id, "worker-a", 7) == "started"

    assert await jobs.request_stop(run.job_id) == [7]
    assert not await jobs.heartbeat(run.id, "worker-a", at(1, 0, 30))  # its runner stops it

    assert await jobs.claim("worker-b", at(1, 5), LEASE, 1) == []
    await jobs.abandon_expired(at(1, 5))
    stopped = await jobs.run(run.id)
    assert (stopped.status, stopped.error, stopped.attempt) == ("failed", STOPPED, 1)
    assert stopped.delivery_status == "none"


async def test_a_claimed_run_a_kill_marked_before_it_started_does_not_start(
    jobs: JobStore,
) -> None:
    run = await pending_run(jobs)
    await jobs.claim("worker-a", at(1), LEASE, 1)  # waiting in the worker's queue

    assert await jobs.request_stop(run.job_id) == []  # no session yet: nothing to cancel

    assert await jobs.start(run.id, "worker-a", 7) == "stopped"
    assert (await jobs.run(run.id)).session_id is None


async def test_heartbeat_by_the_owner_extends_the_lease_and_by_another_fails(
    jobs: JobStore,
) -> None:
    run = await pending_run(jobs)
    await jobs.claim("worker-a", at(1), LEASE, 1)

    assert not await jobs.heartbeat(run.id, "worker-b", at(1, 10))
    assert (await jobs.run(run.id)).lease_expires_at == at(1) + LEASE
    assert await jobs.heartbeat(run.id, "worker-a", at(1, 10))

    assert await jobs.claim("worker-b", at(1, 5), LEASE, 1) == []  # renewed: not reclaimable


async def test_finish_only_by_the_owner_and_only_once(jobs: JobStore) -> None:
    run = await pending_run(jobs)
    assert not await jobs.finish(run.id, "worker-a", status="done", result="x")  # not claimed
    await jobs.claim("worker-a", at(1), LEASE, 1)

    assert not await jobs.finish(run.id, "worker-b", status="done", result="stolen")
    assert await jobs.finish(run.id, "worker-a", status="done", result="the result")
    assert not await jobs.finish(run.id, "worker-a", status="failed", error="again")

    stored = await jobs.run(run.id)
    assert (stored.status, stored.result, stored.error) == ("done", "the result", None)
    assert stored.lease_expires_at is None


# -- delivery records ------------------------------------------------------------------------


async def test_undelivered_lists_outcomes_until_they_are_marked_delivered(
    jobs: JobStore,
) -> None:
    done = await pending_run(jobs, title="done")
    failed = await pending_run(jobs, title="failed")
    running = await pending_run(jobs, title="running")
    abandoned = await pending_run(jobs, title="abandoned", max_attempts=1)
    await jobs.claim("worker-a", at(1), LEASE, 10)
    await jobs.finish(done.id, "worker-a", status="done", result="ok")
    await jobs.finish(failed.id, "worker-a", status="failed", error="boom")
    await jobs.heartbeat(running.id, "worker-a", at(9))
    missed_job = await hourly(jobs, title="missed", next_run_at=at(-2))
    # 22:00, 23:00 and 00:00 missed; 01:00 pending (on time)
    await jobs.materialize(at(1), cron_next_fire)
    assert [r.id for r in await jobs.abandon_expired(at(2))] == [abandoned.id]

    missed = [r for r in await jobs.runs(missed_job.id) if r.status == "missed"]
    assert len(missed) == 3
    listed = {r.id for r in await jobs.undelivered()}
    assert listed == {done.id, failed.id, abandoned.id} | {r.id for r in missed}

    await jobs.mark_delivered([done.id, failed.id])
    await jobs.mark_delivered([r.id for r in missed], "none")
    assert {r.id for r in await jobs.undelivered()} == {abandoned.id}
    stored = await jobs.run(done.id)
    assert stored.delivery_status == "delivered"
    await jobs.mark_delivered([abandoned.id])
    assert await jobs.undelivered() == []


async def test_delete_drops_pending_runs_and_returns_the_running_sessions(
    jobs: JobStore,
) -> None:
    job = await hourly(jobs, coalesce=False, misfire_grace_s=3 * 3600)
    await jobs.materialize(at(3), cron_next_fire)  # 01:00, 02:00, 03:00 pending
    [running] = await jobs.claim("worker-a", at(3), LEASE, 1)
    await jobs.set_session(running.id, 4242)
    other = await hourly(jobs, title="other")

    assert await jobs.delete(job.id) == [4242]

    runs = {r.id: r for r in await jobs.runs(job.id)}
    assert runs[running.id].status == "running"  # the caller cancels its session
    dropped = [r for r in runs.values() if r.id != running.id]
    assert len(dropped) == 2
    assert all((r.status, r.delivery_status) == ("failed", "none") for r in dropped)
    gone = await jobs.get(job.id)
    assert gone.deleted_at is not None and (gone.enabled, gone.next_run_at) == (False, None)
    assert [j.id for j in await jobs.for_source("telegram:1")] == [other.id]
    assert await jobs.claim("worker-b", at(9), LEASE, 10) == []  # nothing of it is claimable
    assert await jobs.delete(job.id) == [4242]  # idempotent


# -- what the operator sees (the HTTP app's job list, kill and metrics) ---------------------


async def test_the_overview_lists_live_jobs_with_their_runs_in_flight_and_latest_run(
    jobs: JobStore,
) -> None:
    finished = await hourly(jobs, title="finished")
    busy = await hourly(jobs, title="busy")
    idle = await hourly(jobs, title="idle", next_run_at=at(5))
    deleted = await hourly(jobs, title="deleted", next_run_at=at(5))
    made = {r.job_id: r for r in (await jobs.materialize(at(1), cron_next_fire)).runs}
    await jobs.claim("worker-a", at(1), LEASE, 10)
    await jobs.finish(made[finished.id].id, "worker-a", status="done", result="ok")
    await jobs.set_session(made[busy.id].id, 4242)
    await jobs.delete(deleted.id)

    overview = await jobs.overview()

    assert [j.id for j in overview.jobs] == [finished.id, busy.id, idle.id]
    assert overview.running == {busy.id}
    assert set(overview.last) == {finished.id, busy.id}
    last = overview.last[finished.id]
    assert (last.status, last.result, last.error) == ("done", "ok", None)
    assert last.at is not None
    assert overview.last[busy.id].status == "running"
    assert await jobs.running_sessions(busy.id) == [4242]
    assert await jobs.running_sessions(finished.id) == []


async def test_run_counts_count_every_run_by_status(store: Store, jobs: JobStore) -> None:
    from scheduler.store import run_counts

    first = await pending_run(jobs, title="first")
    await pending_run(jobs, title="second")
    await jobs.claim("worker-a", at(1), LEASE, 1)
    await jobs.finish(first.id, "worker-a", status="failed", error="boom")

    assert await store.db.run(run_counts) == {"failed": 1, "pending": 1}


# -- at scale: materialized and claimed in bulk ------------------------------------------------


async def test_many_due_jobs_become_one_run_each_across_batches_and_two_claimers(
    store: Store, open_store: Callable[[], Awaitable[Store]]
) -> None:
    """More due jobs than one materialize batch, two dispatchers creating and claiming at
    once: every fire is one row, and every run is claimed by exactly one of them."""
    first, second = JobStore(store.db), JobStore((await open_store()).db)
    await store.db.run(_insert_due_jobs, 1_200)

    made = await asyncio.gather(
        first.materialize(at(1, 0, 1), cron_next_fire, batch=500),
        second.materialize(at(1, 0, 1), cron_next_fire, batch=500),
    )
    claims = await asyncio.gather(
        first.claim_with_jobs("worker-a", at(1, 0, 2), LEASE, 700),
        second.claim_with_jobs("worker-b", at(1, 0, 2), LEASE, 700),
    )

    assert sum(len(m.runs) for m in made) == 1_200
    assert not {r.id for r in made[0].runs} & {r.id for r in made[1].runs}
    a, b = ({run.id for run, _ in claim} for claim in claims)
    assert len(a) + len(b) == 1_200 and not a & b
    assert all(run.job_id == job.id for claim in claims for run, job in claim)
    assert all(run.attempt == 1 and run.status == "running" for c in claims for run, _ in c)
    counts = await store.db.run(_runs_per_job)
    assert counts == {1: 1_200}  # jobs with exactly one run: all of them
    assert await first.claim("worker-c", at(1, 0, 3), LEASE, 10) == []


def _insert_due_jobs(conn, n: int) -> None:  # type: ignore[no-untyped-def]
    from engine.store.schema import utcnow
    from scheduler.tables import scheduled_jobs

    conn.execute(
        scheduled_jobs.insert(),
        [
            {
                "kind": "cron",
                "title": f"job {i}",
                "spec": "0 * * * *",
                "timezone": "UTC",
                "prompt": "go",
                "origin_source": "telegram:1",
                "next_run_at": at(1),
                "created_at": utcnow(),
            }
            for i in range(n)
        ],
    )


def _runs_per_job(conn) -> dict[int, int]:  # type: ignore[no-untyped-def]
    import sqlalchemy as sa

    from scheduler.tables import job_runs

    per_job = (
        sa.select(job_runs.c.job_id, sa.func.count().label("n"))
        .group_by(job_runs.c.job_id)
        .subquery()
    )
    return dict(conn.execute(sa.select(per_job.c.n, sa.func.count()).group_by(per_job.c.n)).all())


async def test_renew_extends_only_the_leases_the_owner_still_holds(jobs: JobStore) -> None:
    mine = [await pending_run(jobs, title=f"mine {i}") for i in range(2)]
    theirs = await pending_run(jobs, title="theirs")
    await jobs.claim("worker-a", at(1), LEASE, 2)
    await jobs.claim("worker-b", at(1), LEASE, 1)

    kept = await jobs.renew("worker-a", [r.id for r in (*mine, theirs)], at(1, 1, 50))

    assert kept == {r.id for r in mine}
    assert await jobs.claim("worker-c", at(1, 1, 30), LEASE, 10) != []  # theirs expired
    assert (await jobs.run(theirs.id)).lease_owner == "worker-c"
    assert [(await jobs.run(r.id)).lease_owner for r in mine] == ["worker-a", "worker-a"]
    assert await jobs.renew("worker-b", [theirs.id], at(1, 5)) == set()  # lost it


async def test_start_records_the_session_only_while_the_run_is_held_and_its_job_alive(
    jobs: JobStore,
) -> None:
    run = await pending_run(jobs)
    other = await pending_run(jobs, title="other")
    assert await jobs.start(run.id, "worker-a", 7) == "lost"  # not claimed yet
    await jobs.claim("worker-a", at(1), LEASE, 2)

    assert await jobs.start(run.id, "worker-b", 7) == "lost"
    assert await jobs.start(run.id, "worker-a", 7) == "started"
    assert (await jobs.run(run.id)).session_id == 7
    await jobs.delete(other.job_id)  # deleted while its claimed run waited for a slot
    assert await jobs.start(other.id, "worker-a", 8) == "deleted"


async def test_a_run_starts_only_while_its_lease_holds(jobs: JobStore) -> None:
    """A worker slow between its claim and its start (a long owner check) started the run
    after its lease ran out, and another worker that had claimed it meanwhile ran it too
    (found by review on 2026-12-06)."""
    run = await pending_run(jobs)
    await jobs.claim("worker-a", at(1), LEASE, 1)
    late = at(1) + LEASE + timedelta(seconds=1)
    assert await jobs.start(run.id, "worker-a", 7, lease=(late, late + LEASE)) == "lost"
    assert (await jobs.run(run.id)).session_id is None
    [taken] = await jobs.claim("worker-b", late, LEASE, 1)  # the other worker's, alone
    assert taken.id == run.id


async def test_a_runs_start_renews_its_lease(jobs: JobStore) -> None:
    run = await pending_run(jobs)
    await jobs.claim("worker-a", at(1), LEASE, 1)
    soon = at(1) + LEASE / 2
    assert await jobs.start(run.id, "worker-a", 7, lease=(soon, soon + LEASE)) == "started"
    assert (await jobs.run(run.id)).lease_expires_at == soon + LEASE
    assert await jobs.claim("worker-b", at(1) + LEASE + timedelta(seconds=1), LEASE, 1) == []


async def test_finish_returns_the_stored_run_and_settles_a_deleted_jobs_delivery(
    jobs: JobStore,
) -> None:
    run = await pending_run(jobs)
    other = await pending_run(jobs, title="other")
    await jobs.claim("worker-a", at(1), LEASE, 2)

    [claimed, _] = sorted(await jobs.runs(run.job_id) + await jobs.runs(other.job_id), key=id_of)
    await jobs.start(run.id, "worker-a", 7)
    stored = await jobs.finish(run.id, "worker-a", status="done", result="ok", run=claimed)
    assert stored == await jobs.run(run.id)  # built from the claimed run: the same
    assert stored.session_id == 7
    assert (stored.status, stored.result, stored.delivery_status) == ("done", "ok", "pending")
    await jobs.delete(other.job_id)
    late = await jobs.finish(other.id, "worker-a", status="failed", error="cancelled")
    assert (late.status, late.delivery_status) == ("failed", "none")
    assert late == await jobs.run(other.id)
    assert [r.id for r in await jobs.undelivered()] == [run.id]


async def test_release_gives_back_only_claimed_runs_that_never_started(jobs: JobStore) -> None:
    queued = await pending_run(jobs)
    started = await pending_run(jobs, title="started")
    await jobs.claim("worker-a", at(1), LEASE, 2)
    assert await jobs.start(started.id, "worker-a", 7) == "started"

    assert await jobs.release("worker-b", [queued.id]) == 0  # not theirs
    assert await jobs.release("worker-a", [queued.id, started.id]) == 1

    back = await jobs.run(queued.id)
    assert (back.status, back.attempt, back.lease_owner) == ("pending", 0, None)
    assert (await jobs.run(started.id)).status == "running"
    [again] = await jobs.claim("worker-b", at(1, 0, 1), LEASE, 10)
    assert (again.id, again.attempt) == (queued.id, 1)


async def test_a_run_a_kill_stopped_while_queued_ends_when_given_back(jobs: JobStore) -> None:
    """A kill while the run waited in its worker's queue, then a deploy that gave it back:
    pending for good, never claimed (it was asked to stop) nor ended (found by review on
    2026-12-07)."""
    queued = await pending_run(jobs)
    await jobs.claim("worker-a", at(1), LEASE, 2)
    await jobs.request_stop(queued.job_id)

    assert await jobs.release("worker-a", [queued.id]) == 1

    ended = await jobs.run(queued.id)
    assert (ended.status, ended.error, ended.delivery_status) == ("failed", STOPPED, "none")
    assert await jobs.claim("worker-b", at(1, 0, 1), LEASE, 10) == []


def id_of(run: Run) -> int:
    return run.id


async def test_a_pause_committed_while_a_step_reads_the_due_jobs_stays(
    jobs: JobStore, backend: str
) -> None:
    """PostgreSQL: the chat's ⏸ commits between the step's read of the due jobs and its
    move of them: the job stays paused (the move set it enabled again, and it fired on)."""
    if backend != "postgresql":
        pytest.skip("two transactions at once: PostgreSQL's")
    job = await hourly(jobs)
    paused: list[Job] = []

    def next_fire(read: Job, after: datetime) -> datetime | None:
        if not paused:  # on another connection, inside the step's transaction
            paused.append(await_only(jobs.set_enabled(job.id, False, None)))
        return cron_next_fire(read, after)

    await jobs.materialize(at(1, 0.5), next_fire)
    assert (paused[0].enabled, paused[0].next_run_at) == (False, None)
    stored = await jobs.get(job.id)
    assert stored is not None and (stored.enabled, stored.next_run_at) == (False, None)


# -- one run of a job at a time ------------------------------------------------------------


async def every_five_minutes(jobs: JobStore) -> Job:
    return await jobs.create(
        NewJob(
            kind="cron",
            title="Inbox",
            prompt="Read my inbox, brief me.",
            timezone="UTC",
            spec="*/5 * * * *",
            origin_source="telegram:1",
            next_run_at=at(0, 5),
        )
    )


async def test_the_job_list_shows_the_finished_run_not_a_fire_skipped_while_it_ran(
    jobs: JobStore,
) -> None:
    """The 00:05 run waits on its card past 00:10 (that fire is skipped), then finishes
    with its briefing. The operator's job list (GET /api/jobs, last_run) must show that
    outcome (it showed the skipped fire, "missed" with no result; found by review)."""
    job = await every_five_minutes(jobs)
    [run] = (await jobs.materialize(at(0, 5, 1), cron_next_fire)).runs
    [claimed] = await jobs.claim("worker-a", at(0, 5, 1), timedelta(hours=1), 10)
    assert claimed.id == run.id
    await jobs.materialize(at(0, 10, 1), cron_next_fire)  # the 00:10 fire: skipped
    assert [r.status for r in await jobs.runs(job.id)] == ["running", "missed"]

    await jobs.finish(run.id, "worker-a", status="done", result="Brief: 3 new mails")

    overview = await jobs.overview()
    assert job.id not in overview.running
    last = overview.last[job.id]
    assert (last.status, last.result) == ("done", "Brief: 3 new mails")


async def test_a_run_whose_worker_died_is_not_retried_beside_the_next_fires_run(
    jobs: JobStore,
) -> None:
    """The 00:05 run's worker was killed (-9) while the run waited on its card; its lease
    ran out at 00:06:01. At 00:10 the dispatcher takes it again (the run resumes its
    session); the 00:10 fire is skipped (it ran beside it: two runs, two cards)."""
    job = await every_five_minutes(jobs)
    await jobs.materialize(at(0, 5, 1), cron_next_fire)
    [first] = await jobs.claim("worker-dead", at(0, 5, 1), timedelta(seconds=60), 10)

    # the next dispatch step of a living worker (materialize, abandon, claim: step()'s order)
    now = at(0, 10, 1)
    await jobs.materialize(now, cron_next_fire)
    await jobs.abandon_expired(now)
    claimed = await jobs.claim("worker-b", now, timedelta(seconds=60), 10)

    assert first.id in [r.id for r in claimed]  # retried, as docs/scheduler.md says
    in_flight = [r for r in await jobs.runs(job.id) if r.status == "running"]
    assert len(in_flight) == 1, [(r.id, r.scheduled_for, r.attempt) for r in in_flight]


async def test_a_run_given_back_at_shutdown_does_not_run_beside_the_next_fire(
    jobs: JobStore,
) -> None:
    """Shutdown gives the queued 00:05 run back (pending again); the service is up again
    at 00:10:01: the old run goes, the 00:10 fire is skipped (both ran together)."""
    job = await every_five_minutes(jobs)
    await jobs.materialize(at(0, 5, 1), cron_next_fire)
    [first] = await jobs.claim("worker-a", at(0, 5, 1), timedelta(seconds=60), 10)
    assert await jobs.release("worker-a", [first.id]) == 1

    now = at(0, 10, 1)
    await jobs.materialize(now, cron_next_fire)
    claimed = await jobs.claim("worker-a2", now, timedelta(seconds=60), 10)
    assert len([r for r in claimed if r.job_id == job.id]) == 1, claimed


async def test_a_revoke_committing_while_a_run_starts_reaches_the_run(
    store: Store, jobs: JobStore, store_url: str, backend: str
) -> None:
    """PostgreSQL: a revoke (🔒) written but not committed when the run's start copied
    the job's grants was passed over (it found no running session: the run had none
    recorded yet), and the run kept the grants taken back (found by review on
    2026-12-07). The start now waits for it."""
    if backend != "postgresql":
        pytest.skip("two writers at once: PostgreSQL's (SQLite serialises them)")
    job, run, session = await _claimed_run(store, jobs)
    other = create_async_engine(store_url)
    try:
        async with other.connect() as conn:
            revoke = await conn.begin()  # the owner's 🔒, not committed yet
            await conn.execute(
                sa.update(scheduled_jobs)
                .where(scheduled_jobs.c.id == job.id)
                .values(run_context=None)
            )
            starting = asyncio.create_task(
                jobs.start(run.id, "worker-a", session.id, lease=(T0, T0 + LEASE))
            )
            await _until_waiting_or_done(other, starting)
            await revoke.commit()
        assert await asyncio.wait_for(starting, 10) == "started"
    finally:
        await other.dispose()
    stored = await store.sessions.get(session.id)
    assert stored is not None and stored.run_context is None, stored


async def test_a_delete_while_a_run_starts_is_no_deadlock(
    store: Store, jobs: JobStore, store_url: str, backend: str
) -> None:
    """PostgreSQL: the start took the job's share lock after the run's row, a deletion
    takes the job's row then the runs': PostgreSQL killed one of them as a deadlock
    (found by review of the change on 2026-12-07). The start locks the job first."""
    if backend != "postgresql":
        pytest.skip("PostgreSQL's row locks")
    job, run, session = await _claimed_run(store, jobs)
    other = create_async_engine(store_url)
    errors: list[BaseException] = []
    try:
        async with other.connect() as conn:
            deleting = await conn.begin()  # the chat's delete: _delete's first statement
            await conn.execute(
                sa.update(scheduled_jobs)
                .where(scheduled_jobs.c.id == job.id, scheduled_jobs.c.deleted_at.is_(None))
                .values(deleted_at=utcnow(), enabled=False, next_run_at=None)
            )
            starting = asyncio.create_task(
                jobs.start(run.id, "worker-a", session.id, lease=(T0, T0 + LEASE))
            )
            await _until_waiting_or_done(other, starting)
            try:  # _delete goes on: _request_stop on the job's running runs
                await conn.execute(
                    sa.update(job_runs)
                    .where(
                        job_runs.c.job_id == job.id,
                        job_runs.c.status == "running",
                        job_runs.c.cancel_requested_at.is_(None),
                    )
                    .values(cancel_requested_at=utcnow())
                )
                await deleting.commit()
            except Exception as exc:
                errors.append(exc)
                await deleting.rollback()
        try:
            await asyncio.wait_for(starting, 15)
        except Exception as exc:
            errors.append(exc)
    finally:
        await other.dispose()
    assert not errors, [f"{type(e).__name__}: {str(e)[:300]}" for e in errors]


async def _claimed_run(store: Store, jobs: JobStore) -> tuple[Job, Run, Any]:
    """A job granted ``execute_cmd``, its run claimed by worker-a, the run's session."""
    granted = {"allow_tools": ["execute_cmd"], "mcp_servers": []}
    job = await jobs.create(
        NewJob(
            kind="cron",
            title="Disk",
            prompt="df -h",
            timezone="UTC",
            spec="0 * * * *",
            origin_source="telegram:1",
            run_context=granted,
            next_run_at=T0,
        )
    )
    [run] = (await jobs.materialize(T0, cron_next_fire)).runs
    await jobs.claim("worker-a", T0, LEASE, 1)
    session = await store.sessions.create(
        "cron", is_interactive=False, is_ephemeral=True, run_context=granted
    )
    return job, run, session


async def _until_waiting_or_done(engine: Any, task: asyncio.Task[Any]) -> None:
    """Until ``task`` waits for a row lock (PostgreSQL says so), or is done."""
    async with engine.connect() as watcher:
        waiting = sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted")
        for _ in range(1000):
            if task.done() or (await watcher.execute(waiting)).scalar():
                return
            await asyncio.sleep(0.01)
