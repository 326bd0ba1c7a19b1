"""Jobs and their runs in the database: every fire exactly once, claimed with a lease.

A due fire becomes a ``job_runs`` row (``UNIQUE(job_id, scheduled_for)``) in the same
transaction that moves the job's ``next_run_at`` on, so two dispatchers — or one that
restarts — never create a fire twice. A run is claimed by setting its lease (owner and
expiry) only where it is still claimable, so two workers never run it both.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.hub import NoticeWithdrawn
from engine.store import Database, chat_sessions, insert_for, utcnow
from scheduler.cron import CronError
from scheduler.tables import job_runs as r
from scheduler.tables import scheduled_jobs as j

__all__ = [
    "STOPPED",
    "AlreadyTold",
    "Job",
    "JobStore",
    "JobsOverview",
    "LastRun",
    "NewJob",
    "Run",
    "mark_delivered_in",
    "run_counts",
]

log = logging.getLogger(__name__)


class AlreadyTold(NoticeWithdrawn):
    """A run's result was told already: the notice that would tell it again rolls back."""


#: At most this many missed fires of one job are recorded per dispatch step: the first and
#: the last ones, the first standing for those between (the notice tells them all).
MAX_MISSED_ROWS = 100
#: At most this many fires of one job are gone through one by one per dispatch step.
MAX_COUNTED_FIRES = 10_000


@dataclass(frozen=True, slots=True)
class NewJob:
    kind: str
    title: str
    prompt: str
    timezone: str
    spec: str | None = None
    agent_id: str = "main"
    origin_source: str | None = None
    parent_session_id: int | None = None
    #: The job's grants (scheduler/grants.py), applied as its runs' RunContext.
    run_context: dict[str, Any] | None = None
    #: Whom the job serves: a platform user id (``telegram:42``); ``None``: the home chat's.
    owner_id: str | None = None
    #: Seconds a run waits for a decision on a call outside its grants (``None``: default).
    approval_wait_s: int | None = None
    enabled: bool = True
    single_run: bool = False
    coalesce: bool = True
    misfire_grace_s: int = 300
    max_attempts: int = 3
    next_run_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Job(NewJob):
    id: int = 0
    created_at: datetime | None = None
    deleted_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    job_id: int
    scheduled_for: datetime
    status: str
    attempt: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    session_id: int | None
    result: str | None
    error: str | None
    delivery_status: str
    created_at: datetime
    #: The chat messages that told the user (the agent's answer to the notification).
    delivered_message_ids: list[int] | None = None
    #: The fires a missed run stands for (see ``job_runs.fires``).
    fires: int = 1


@dataclass(frozen=True, slots=True)
class Materialized:
    """What one dispatch step created: runs to execute and fires recorded as missed."""

    runs: list[Run]
    missed: dict[int, int]  # job id → missed fires in this step
    jobs: int = 0  # due jobs handled
    #: The jobs of the runs created, as read (a claim right after need not read them again).
    read: dict[int, Job] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LastRun:
    """A job's latest run as the operator sees it."""

    status: str
    result: str | None
    error: str | None
    at: datetime | None  # finished, or created when it has not finished


@dataclass(frozen=True, slots=True)
class JobsOverview:
    """Every live job, which of them have a run in flight, and each one's latest run."""

    jobs: list[Job]
    running: set[int]
    last: dict[int, LastRun]


# (job, after) → the job's next fire strictly after ``after`` (None: never again)
NextFire = Callable[[Job, datetime], datetime | None]

#: The error of a run a kill stopped before it could end by itself.
STOPPED = "stopped by a kill"

_JOB_FIELDS = [f.name for f in fields(Job)]
_RUN_FIELDS = [f.name for f in fields(Run)]


class JobStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, job: NewJob) -> Job:
        return await self._db.run(_create, job)

    async def get(self, job_id: int) -> Job | None:
        return await self._db.run(_get, job_id)

    async def for_source(self, source: str) -> list[Job]:
        """The live (not deleted) jobs a chat created, oldest first."""
        return await self._db.run(_for_source, source)

    async def delete(self, job_id: int) -> list[int]:
        """Delete a job (its history stays); the session ids of its runs still in flight."""
        return await self._db.run(_delete, job_id)

    async def set_run_context(self, job_id: int, run_context: dict[str, Any] | None) -> Job:
        """Replace a live job's grants (its runs' RunContext): later runs apply them, and
        so do its runs in flight from their next call (their sessions', in the same
        commit)."""
        return await self._db.run(_set_run_context, job_id, run_context)

    async def set_enabled(self, job_id: int, enabled: bool, next_run_at: datetime | None) -> Job:
        return await self._db.run(_set_enabled, job_id, enabled, next_run_at)

    async def next_due_at(self, *, besides: str | None = None) -> datetime | None:
        """What to wake up for: the earliest ``next_run_at`` of an enabled job and, with
        ``besides`` (the asking dispatcher), the earliest lease of another owner's run in
        flight (a dead process's run is taken again when its lease ends, not at the next
        safety wake)."""
        return await self._db.run(_next_due_at, besides)

    async def materialize(
        self, now: datetime, next_fire: NextFire, *, batch: int = 500
    ) -> Materialized:
        """Turn every due fire into a run (or a ``missed`` row), and move the jobs on.

        In transactions of ``batch`` jobs, so thousands of jobs due at once never hold
        the database for seconds.
        """
        runs: list[Run] = []
        missed: dict[int, int] = {}
        read: dict[int, Job] = {}
        while True:
            part = await self._db.run(_materialize, now, next_fire, batch)
            runs += part.runs
            missed.update(part.missed)
            read.update(part.read)
            if part.jobs < batch:
                return Materialized(runs, missed, read=read)

    async def claim(self, owner: str, now: datetime, lease: timedelta, limit: int) -> list[Run]:
        """Take runs to execute: pending ones, and running ones whose lease expired."""
        return await self._db.run(_claim, owner, now, lease, limit)

    async def claim_with_jobs(
        self,
        owner: str,
        now: datetime,
        lease: timedelta,
        limit: int,
        known: dict[int, Job] | None = None,
    ) -> list[tuple[Run, Job]]:
        """``claim``, with each run's job: from ``known`` (jobs just read; only what cannot
        change — a deletion is checked again when the run starts) or read in the same
        transaction."""
        return await self._db.run(_claim_with_jobs, owner, now, lease, limit, known or {})

    async def renew(self, owner: str, run_ids: Sequence[int], expires_at: datetime) -> set[int]:
        """Extend the leases of many held runs at once; the ids still held by ``owner``."""
        return await self._db.run(_renew, owner, list(run_ids), expires_at)

    async def release(self, owner: str, run_ids: Sequence[int]) -> int:
        """Give back claimed runs that never started (no session yet): pending again, their
        attempt not counted, claimable at once by anyone (one a kill asked to stop ends,
        failed: ``STOPPED``). How many were given back."""
        return await self._db.run(_release, owner, list(run_ids))

    async def start(
        self,
        run_id: int,
        owner: str,
        session_id: int,
        lease: tuple[datetime, datetime] | None = None,
    ) -> str:
        """Record the session of a claimed run about to execute, if it is still ours.

        ``started``; ``lost`` (the lease went to another owner, or ran out at ``lease``'s
        now; do not run it); ``deleted`` (the job was deleted while the run waited; do not
        run it). ``lease``: (now, until when) the run is held from its start.
        """
        return await self._db.run(_start, run_id, owner, session_id, lease)

    async def abandon_expired(self, now: datetime) -> list[Run]:
        """Runs whose lease expired after their last attempt become ``abandoned``; those
        of a deleted job or asked to stop end as failed. Every run ended so, in order."""
        return await self._db.run(_abandon_expired, now)

    async def heartbeat(self, run_id: int, owner: str, expires_at: datetime) -> bool:
        """Renew a held run's lease; False when it is not ours any more or was asked to stop."""
        return await self._db.run(_heartbeat, run_id, owner, expires_at)

    async def set_session(self, run_id: int, session_id: int) -> None:
        await self._db.run(_set_session, run_id, session_id)

    async def finish(
        self,
        run_id: int,
        owner: str,
        *,
        status: str,
        result: str | None = None,
        error: str | None = None,
        run: Run | None = None,
        deliver_until: datetime | None = None,
    ) -> Run | None:
        """Store the outcome (before any delivery): the stored run, None if the lease was
        lost meanwhile. ``run``: the run as claimed; the stored one is then built from it
        and the few columns that may have changed since (saves reading the whole row).

        ``deliver_until``: the lease becomes a delivery lease: until then no other worker's
        sweep delivers the run (this one is about to)."""
        return await self._db.run(_finish, run_id, owner, status, result, error, run, deliver_until)

    async def undelivered(
        self, limit: int = 100, *, owner: str | None = None, now: datetime | None = None
    ) -> list[Run]:
        """Finished runs (and missed or abandoned ones) the user was not told about yet.

        With ``owner`` and ``now``: only those ``owner`` may deliver — its own, or ones
        whose delivery lease (another worker's) has expired.
        """
        return await self._db.run(_undelivered, limit, owner, now)

    async def claim_deliveries(
        self, owner: str, now: datetime, until: datetime, limit: int = 100
    ) -> list[Run]:
        """The runs to tell the user about that ``owner`` may deliver (its own, unleased
        ones, or ones whose delivery lease expired), leased to it until ``until`` in the
        same statement: two workers' sweeps at once never both take one."""
        return await self._db.run(_claim_deliveries, owner, now, until, limit)

    async def renew_deliveries(self, owner: str, run_ids: Sequence[int], until: datetime) -> None:
        """Keep the delivery leases of runs ``owner`` is delivering (a result may wait
        long for its chat: a running turn, an approval card)."""
        if run_ids:
            await self._db.run(_renew_deliveries, owner, list(run_ids), until)

    async def mark_delivered(self, run_ids: Sequence[int], status: str = "delivered") -> None:
        await self._db.run(_mark_delivered, list(run_ids), status)

    async def set_delivered_messages(self, run_ids: Sequence[int], message_ids: list[int]) -> None:
        """The chat messages that told the user about these runs."""
        await self._db.run(_set_delivered_messages, list(run_ids), message_ids)

    async def runs(self, job_id: int) -> list[Run]:
        return await self._db.run(_runs, job_id)

    async def run(self, run_id: int) -> Run | None:
        return await self._db.run(_run, run_id)

    async def last_statuses(self, job_ids: Sequence[int]) -> dict[int, str]:
        """Each job's latest run's status (a fire skipped while a run went on is none);
        a job without runs is left out."""
        return await self._db.run(_last_statuses, list(job_ids)) if job_ids else {}

    async def overview(self) -> JobsOverview:
        """Every live job, oldest first, with its run in flight and latest run (the
        operator's job list)."""
        return await self._db.run(_overview)

    async def request_stop(self, job_id: int) -> list[int]:
        """Ask the job's runs in flight to stop; their session ids (``running_sessions``)."""
        return await self._db.run(_request_stop, job_id)

    async def stop_runs(self, job_id: int) -> tuple[list[int], int]:
        """``request_stop`` and ``stopping_unstarted`` in one transaction: a run given
        back between the two (a deploy's release ends a stopped queued run) was counted
        by neither, and a kill that had stopped it answered "no run in flight" (until
        2026-12-07; found by review)."""
        return await self._db.run(_stop_runs, job_id)

    async def stopping_unstarted(self, job_id: int) -> int:
        """How many of the job's runs asked to stop were claimed but not started (no
        session yet): they end as they would start, or when given back."""
        return await self._db.run(_stopping_unstarted, job_id)

    async def job_of_session(self, session_id: int) -> int | None:
        """The job whose run works in ``session_id`` (``None``: no run's session)."""
        return await self._db.run(_job_of_session, session_id)

    async def running_sessions(self, job_id: int) -> list[int]:
        """The session ids of the job's runs in flight, oldest first."""
        return await self._db.run(_running_sessions, job_id)


def run_counts(conn: Connection) -> dict[str, int]:
    """How many runs there are in each status (a unit of work's part: the metrics scrape)."""
    rows = conn.execute(sa.select(r.c.status, sa.func.count()).group_by(r.c.status)).all()
    return {str(status): int(n) for status, n in rows}


def _latest_runs(*where: Any) -> sa.Select[Any]:
    """The id of each job's latest run (of the jobs ``where`` keeps). A fire skipped
    while a run went on is no run: the run's outcome is the last."""
    return (
        sa.select(sa.func.max(r.c.id))
        .join(j, j.c.id == r.c.job_id)
        .where(*where, sa.or_(r.c.error.is_(None), r.c.error != SKIPPED_NOTE))
        .group_by(r.c.job_id)
    )


def _last_statuses(conn: Connection, job_ids: list[int]) -> dict[int, str]:
    latest = _latest_runs(r.c.job_id.in_(job_ids))
    rows = conn.execute(sa.select(r.c.job_id, r.c.status).where(r.c.id.in_(latest)))
    return {int(row.job_id): str(row.status) for row in rows}


def _overview(conn: Connection) -> JobsOverview:
    rows = conn.execute(sa.select(j).where(j.c.deleted_at.is_(None)).order_by(j.c.id)).all()
    running = conn.execute(
        sa.select(r.c.job_id).where(r.c.status == "running").distinct()
    ).scalars()
    latest = _latest_runs(j.c.deleted_at.is_(None))
    last = {
        row.job_id: LastRun(row.status, row.result, row.error, row.finished_at or row.created_at)
        for row in conn.execute(
            sa.select(
                r.c.job_id, r.c.status, r.c.result, r.c.error, r.c.finished_at, r.c.created_at
            ).where(r.c.id.in_(latest))
        )
    }
    return JobsOverview([_job(row) for row in rows], set(running), last)


def _request_stop(conn: Connection, job_id: int) -> list[int]:
    """Mark the job's runs in flight to stop (whichever process runs one sees it at its next
    lease renewal, if no notice reached it first); their session ids."""
    conn.execute(
        r.update()
        .where(r.c.job_id == job_id, r.c.status == "running", r.c.cancel_requested_at.is_(None))
        .values(cancel_requested_at=utcnow())
    )
    return _running_sessions(conn, job_id)


def _stop_runs(conn: Connection, job_id: int) -> tuple[list[int], int]:
    return _request_stop(conn, job_id), _stopping_unstarted(conn, job_id)


def _stopping_unstarted(conn: Connection, job_id: int) -> int:
    return int(
        conn.execute(
            sa.select(sa.func.count()).where(
                r.c.job_id == job_id,
                r.c.status == "running",
                r.c.session_id.is_(None),
                r.c.cancel_requested_at.is_not(None),
            )
        ).scalar_one()
    )


def _job_of_session(conn: Connection, session_id: int) -> int | None:
    return conn.execute(sa.select(r.c.job_id).where(r.c.session_id == session_id).limit(1)).scalar()


def _running_sessions(conn: Connection, job_id: int) -> list[int]:
    return list(
        conn.execute(
            sa.select(r.c.session_id)
            .where(r.c.job_id == job_id, r.c.status == "running", r.c.session_id.is_not(None))
            .order_by(r.c.id)
        ).scalars()
    )


def _job(row: sa.Row) -> Job:
    values = row._asdict()  # one dict: much cheaper than a lookup per field in ``_mapping``
    return Job(**{name: values[name] for name in _JOB_FIELDS})


def _run_row(row: sa.Row) -> Run:
    values = row._asdict()
    return Run(**{name: values[name] for name in _RUN_FIELDS})


def _create(conn: Connection, job: NewJob) -> Job:
    values = {f.name: getattr(job, f.name) for f in fields(NewJob)}
    now = utcnow()
    new_id = conn.execute(j.insert().values(created_at=now, **values)).inserted_primary_key[0]
    return Job(**values, id=new_id, created_at=now)


def _get(conn: Connection, job_id: int) -> Job | None:
    row = conn.execute(sa.select(j).where(j.c.id == job_id)).first()
    return _job(row) if row else None


def _for_source(conn: Connection, source: str) -> list[Job]:
    rows = conn.execute(
        sa.select(j).where(j.c.origin_source == source, j.c.deleted_at.is_(None)).order_by(j.c.id)
    )
    return [_job(row) for row in rows]


def _set_run_context(conn: Connection, job_id: int, run_context: dict[str, Any] | None) -> Job:
    conn.execute(
        j.update().where(j.c.id == job_id, j.c.deleted_at.is_(None)).values(run_context=run_context)
    )
    running = _running_sessions(conn, job_id)
    if running:
        conn.execute(
            chat_sessions.update()
            .where(chat_sessions.c.id.in_(running))
            .values(run_context=run_context)
        )
    job = _get(conn, job_id)
    assert job is not None
    return job


def _delete(conn: Connection, job_id: int) -> list[int]:
    conn.execute(
        j.update()
        .where(j.c.id == job_id, j.c.deleted_at.is_(None))
        .values(deleted_at=utcnow(), enabled=False, next_run_at=None)
    )
    # Runs not started yet are dropped with the job; running ones are cancelled by the caller.
    conn.execute(
        r.update()
        .where(r.c.job_id == job_id, r.c.status == "pending")
        .values(
            status="failed", error="job deleted before this run started", delivery_status="none"
        )
    )
    _request_stop(conn, job_id)
    rows = conn.execute(
        sa.select(r.c.session_id).where(
            r.c.job_id == job_id, r.c.status == "running", r.c.session_id.is_not(None)
        )
    )
    sessions = [row[0] for row in rows]
    # Whatever the runs in flight end with, the chat asked for the job to go: no report.
    conn.execute(
        r.update()
        .where(r.c.job_id == job_id, r.c.status == "running")
        .values(delivery_status="none")
    )
    return sessions


def _set_enabled(conn: Connection, job_id: int, enabled: bool, next_run_at: datetime | None) -> Job:
    conn.execute(
        j.update()
        .where(j.c.id == job_id, j.c.deleted_at.is_(None))
        .values(enabled=enabled, next_run_at=next_run_at if enabled else None)
    )
    job = _get(conn, job_id)
    assert job is not None
    return job


def _next_due_at(conn: Connection, besides: str | None) -> datetime | None:
    due = conn.execute(
        sa.select(sa.func.min(j.c.next_run_at)).where(
            j.c.enabled.is_(True), j.c.deleted_at.is_(None), j.c.next_run_at.is_not(None)
        )
    ).scalar()
    if besides is None:
        return due
    expiry = conn.execute(
        sa.select(sa.func.min(r.c.lease_expires_at)).where(
            r.c.status == "running", r.c.lease_owner != besides
        )
    ).scalar()
    return min((t for t in (due, expiry) if t is not None), default=None)


def _insert_ignoring_duplicates(conn: Connection, rows: list[dict[str, Any]]) -> list[Run]:
    """Insert runs; a fire some other dispatcher already created is skipped. The inserted.

    One multi-row ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` per batch (SQLAlchemy's
    insertmanyvalues), not one statement per run.
    """
    if not rows:
        return []
    dialect = conn.dialect.name
    options = {"constraint": "uq_runs_job_fire"} if dialect == "postgresql" else {}
    statement = insert_for(dialect, r).on_conflict_do_nothing(**options)
    result = conn.execute(statement.returning(r.c.id, r.c.job_id, r.c.scheduled_for), rows)
    # Only the key comes back; the rest of each run is what was inserted.
    by_fire = {(row["job_id"], row["scheduled_for"]): row for row in rows}
    inserted = []
    for run_id, job_id, fire in result:
        row = by_fire[(job_id, fire)]
        values = {f: row.get(f) for f in _RUN_FIELDS}
        inserted.append(Run(**{**values, "id": run_id, "scheduled_for": fire}))
    return inserted


def _move_jobs(conn: Connection, moves: dict[int, datetime | None], now: datetime) -> None:
    """Set each job's ``next_run_at``: one UPDATE per distinct next fire (jobs due together
    mostly share it); a job with no future fire disables itself. Only a job still enabled
    and due: a pause (or a new schedule) committed since it was read stays."""
    groups: dict[datetime | None, list[int]] = defaultdict(list)
    for job_id, upcoming in moves.items():
        groups[upcoming].append(job_id)
    for upcoming, ids in groups.items():
        for chunk in _chunks(ids):
            conn.execute(
                j.update()
                .where(j.c.id.in_(chunk), j.c.enabled.is_(True), j.c.next_run_at <= now)
                .values(next_run_at=upcoming, enabled=upcoming is not None)
            )


def _materialize(conn: Connection, now: datetime, next_fire: NextFire, batch: int) -> Materialized:
    due = [
        _job(row)
        for row in conn.execute(
            sa.select(j)
            .where(
                j.c.enabled.is_(True),
                j.c.deleted_at.is_(None),
                j.c.next_run_at.is_not(None),
                j.c.next_run_at <= now,
            )
            .order_by(j.c.next_run_at, j.c.id)
            .limit(batch)
        )
    ]
    rows: list[dict[str, Any]] = []
    moves: dict[int, datetime | None] = {}
    busy = _running_jobs(conn, [job.id for job in due], now)
    for job in due:
        assert job.next_run_at is not None
        grace = _grace(job)
        try:
            fires = _due_fires(job, now, grace, next_fire)
            upcoming = next_fire(job, max(fires[-1], now))
        except CronError as exc:  # its zone left the time-zone database since it was made
            rows.append(_unreadable(job, now, exc))
            moves[job.id] = None  # paused, its chat told; the other jobs fire
            continue
        on_time = [f for f in fires if now - f <= grace]
        late = [f for f in fires if now - f > grace]
        if job.coalesce and len(on_time) > 1:
            late, on_time = late + on_time[:-1], on_time[-1:]
        if job.id in busy:  # one run of a job at a time: its fires meanwhile are skipped
            rows += [_new_run(job.id, fire, "missed", now, skipped=True) for fire in on_time]
            on_time = []
        rows += [_new_run(job.id, fire, "pending", now) for fire in on_time]
        rows += _missed_rows(job.id, late, now)
        moves[job.id] = upcoming  # None (a single run, or an ended schedule): disabled
    created: list[Run] = []
    missed_counts: dict[int, int] = {}
    for run in _insert_ignoring_duplicates(conn, rows):
        if run.status == "pending":
            created.append(run)
        else:
            missed_counts[run.job_id] = missed_counts.get(run.job_id, 0) + run.fires
    _move_jobs(conn, moves, now)
    created.sort(key=lambda run: (run.scheduled_for, run.id))
    by_id = {job.id: job for job in due}
    read = {run.job_id: by_id[run.job_id] for run in created}
    return Materialized(created, missed_counts, len(due), read)


def _unreadable(job: Job, now: datetime, error: CronError) -> dict[str, Any]:
    """A failed run telling the job's chat that its schedule cannot be read any more (a
    zone tzdata dropped, as ``US/Pacific-New`` in 2020): until 2026-12-06 its error failed
    every step, and no job of anyone fired (found by review)."""
    log.warning("job %s paused: its schedule cannot be read (%s)", job.id, error)
    assert job.next_run_at is not None
    return {
        **_new_run(job.id, job.next_run_at, "failed", now),
        "error": f"its schedule cannot be read any more ({error}); it is paused until it "
        "is given a new one",
        "finished_at": now,
    }


def _missed_rows(job_id: int, late: list[datetime], now: datetime) -> list[dict[str, Any]]:
    """A row per missed fire, up to ``MAX_MISSED_ROWS``: past it the first fire's row
    stands for the ones up to the last rows kept (a notice tells when it began)."""
    if len(late) <= MAX_MISSED_ROWS:
        return [_new_run(job_id, fire, "missed", now) for fire in late]
    kept = late[-(MAX_MISSED_ROWS - 1) :]
    first = _new_run(job_id, late[0], "missed", now, fires=len(late) - len(kept))
    return [first, *(_new_run(job_id, fire, "missed", now) for fire in kept)]


#: A fire skipped because the job's run before was still going: recorded, logged, told to
#: no one (a notice at every fire while a run waits on its card would be noise).
SKIPPED_NOTE = "skipped: the run before was still going"


def _running_jobs(conn: Connection, job_ids: list[int], now: datetime) -> set[int]:
    """The jobs with a run going or still to go: running (its lease live, or lapsed with
    attempts left: taken again, as a dead worker's is), or pending (given back at a stop,
    not yet claimed). "Every 5 minutes" whose run waited 30 minutes for a card started a
    run, and a card, at every fire meanwhile."""
    max_attempts = sa.select(j.c.max_attempts).where(j.c.id == r.c.job_id).scalar_subquery()
    unfinished = sa.and_(
        r.c.status.in_(("running", "pending")),
        r.c.cancel_requested_at.is_(None),
        sa.or_(r.c.lease_expires_at >= now, r.c.attempt < max_attempts),
    )
    busy: set[int] = set()
    for chunk in _chunks(job_ids):
        busy.update(
            conn.execute(
                sa.select(r.c.job_id).where(r.c.job_id.in_(chunk), unfinished).distinct()
            ).scalars()
        )
    return busy


#: How late a background task (``async``: "started; its result comes back here") may still
#: run: it runs late rather than never. A deploy of more than the misfire grace recorded it
#: ``missed`` until 2026-12-06, and the conversation that asked never heard of it (review).
LATE_TASK_GRACE = timedelta(days=365)


def _grace(job: Job) -> timedelta:
    return LATE_TASK_GRACE if job.kind == "async" else timedelta(seconds=job.misfire_grace_s)


def _due_fires(job: Job, now: datetime, grace: timedelta, next_fire: NextFire) -> list[datetime]:
    """The job's fires from its ``next_run_at`` to ``now``. Past ``MAX_COUNTED_FIRES`` (a
    job every minute, down for a week) the rest are not gone through one by one: those
    still within the misfire grace are found from there, the ones between are skipped."""
    assert job.next_run_at is not None
    fires = [job.next_run_at]
    while (following := next_fire(job, fires[-1])) is not None and following <= now:
        if len(fires) < MAX_COUNTED_FIRES:
            fires.append(following)
            continue
        log.warning(
            "job %s missed more than %d fires; the ones before %s are not counted",
            job.id,
            MAX_COUNTED_FIRES,
            (now - grace).isoformat(),
        )
        recent = next_fire(job, max(now - grace - _JUST_BEFORE, fires[-1]))
        while recent is not None and recent <= now and len(fires) < 2 * MAX_COUNTED_FIRES:
            fires.append(recent)
            recent = next_fire(job, recent)
        break
    return fires


_JUST_BEFORE = timedelta(microseconds=1)


def _new_run(
    job_id: int,
    fire: datetime,
    status: str,
    now: datetime,
    *,
    fires: int = 1,
    skipped: bool = False,
) -> dict[str, Any]:
    if skipped:
        log.info("job %s: its fire of %s skipped, the run before still going", job_id, fire)
    return {
        "job_id": job_id,
        "fires": fires,
        "error": SKIPPED_NOTE if skipped else None,
        "scheduled_for": fire,
        "status": status,
        "attempt": 0,
        "delivery_status": "none" if skipped else "pending",
        "created_at": now,
        "finished_at": now if status == "missed" else None,
    }


def _claimable(now: datetime) -> sa.ColumnElement[bool]:
    expired = sa.and_(r.c.status == "running", r.c.lease_expires_at < now)
    return sa.and_(
        sa.or_(r.c.status == "pending", expired),
        r.c.attempt < j.c.max_attempts,
        j.c.deleted_at.is_(None),
        r.c.cancel_requested_at.is_(None),  # a run asked to stop is never taken again
    )


def _claim(conn: Connection, owner: str, now: datetime, lease: timedelta, limit: int) -> list[Run]:
    """One ``UPDATE ... RETURNING`` takes up to ``limit`` claimable runs, oldest fire first.

    The claimable condition is checked again by the UPDATE itself, row by row, so a run
    another owner took meanwhile (PostgreSQL: after its lock is released) is not taken
    twice; on PostgreSQL the candidates are locked with ``SKIP LOCKED`` so concurrent
    claimers take different runs instead of waiting for each other.
    """
    if limit <= 0:
        return []
    candidates = (
        sa.select(r.c.id)
        .join(j, j.c.id == r.c.job_id)
        .where(_claimable(now), r.c.scheduled_for <= now)
        .order_by(r.c.scheduled_for, r.c.id)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        candidates = candidates.with_for_update(of=r, skip_locked=True)
    # A CTE is evaluated once (PostgreSQL may otherwise re-run a LIMIT subquery per row).
    chosen = candidates.cte("chosen")
    max_attempts = sa.select(j.c.max_attempts).where(j.c.id == r.c.job_id).scalar_subquery()
    rows = conn.execute(
        r.update()
        .where(
            r.c.id.in_(sa.select(chosen.c.id)),
            sa.or_(
                r.c.status == "pending",
                sa.and_(r.c.status == "running", r.c.lease_expires_at < now),
            ),
            r.c.attempt < max_attempts,
        )
        .values(
            status="running",
            lease_owner=owner,
            lease_expires_at=now + lease,
            attempt=r.c.attempt + 1,
            started_at=now,
        )
        .returning(*r.c)
    ).all()
    claimed = [_run_row(row) for row in rows]
    claimed.sort(key=lambda run: (run.scheduled_for, run.id))
    return claimed


def _claim_with_jobs(
    conn: Connection,
    owner: str,
    now: datetime,
    lease: timedelta,
    limit: int,
    known: dict[int, Job],
) -> list[tuple[Run, Job]]:
    claimed = _claim(conn, owner, now, lease, limit)
    jobs = {run.job_id: known[run.job_id] for run in claimed if run.job_id in known}
    ids = sorted({run.job_id for run in claimed if run.job_id not in jobs})
    for chunk in _chunks(ids):
        for row in conn.execute(sa.select(j).where(j.c.id.in_(chunk))):
            jobs[row.id] = _job(row)
    return [(run, jobs[run.job_id]) for run in claimed]


def _chunks(ids: Sequence[int], size: int = 5_000) -> list[Sequence[int]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def _renew(conn: Connection, owner: str, run_ids: list[int], expires_at: datetime) -> set[int]:
    kept: set[int] = set()
    for chunk in _chunks(run_ids):
        rows = conn.execute(
            r.update()
            .where(r.c.id.in_(chunk), r.c.lease_owner == owner, r.c.status == "running")
            .values(lease_expires_at=expires_at)
            .returning(r.c.id)
        )
        kept.update(row[0] for row in rows)
    return kept


def _release(conn: Connection, owner: str, run_ids: list[int]) -> int:
    released = 0
    for chunk in _chunks(run_ids):
        unstarted = sa.and_(
            r.c.id.in_(chunk),
            r.c.lease_owner == owner,
            r.c.status == "running",
            r.c.session_id.is_(None),
        )
        # One a kill asked to stop ends so: given back, it was never claimed again nor
        # ended (only a running run ends at its lease), pending for good (until 2026-12-07;
        # found by review).
        released += conn.execute(
            r.update()
            .where(unstarted, r.c.cancel_requested_at.is_not(None))
            .values(
                status="failed",
                error=STOPPED,
                delivery_status="none",
                finished_at=utcnow(),
                lease_owner=None,
                lease_expires_at=None,
            )
        ).rowcount
        done = conn.execute(
            r.update()
            .where(unstarted, r.c.cancel_requested_at.is_(None))
            .values(
                status="pending",
                lease_owner=None,
                lease_expires_at=None,
                started_at=None,
                attempt=r.c.attempt - 1,
            )
        )
        released += done.rowcount
    return released


# The statements every run executes are built once, with bound parameters: building a
# SQLAlchemy expression costs ~5x more than executing it (about 250 us against 45 us on
# SQLite), and these run ten thousand times when ten thousand jobs fire together.
_held_by = sa.and_(
    r.c.id == sa.bindparam("b_run"),
    r.c.lease_owner == sa.bindparam("b_owner"),
    r.c.status == "running",
)
_job_live = sa.select(j.c.id).where(j.c.id == r.c.job_id, j.c.deleted_at.is_(None)).exists()
_job_deleted = sa.select(j.c.id).where(j.c.id == r.c.job_id, j.c.deleted_at.is_not(None)).exists()
_START = (
    r.update()
    .where(_held_by, _job_live, r.c.cancel_requested_at.is_(None))
    .values(session_id=sa.bindparam("b_session"))
)
# Started only while the lease has not run out, and renewed from the start: a worker slow
# between its claim and its start (a long owner check) ran the run while another worker,
# which had claimed it once the lease ran out, ran it too (found by review on 2026-12-06).
_START_RENEWED = _START.where(
    r.c.lease_expires_at > sa.bindparam("b_now", type_=r.c.lease_expires_at.type)
).values(lease_expires_at=sa.bindparam("b_expires", type_=r.c.lease_expires_at.type))
_HELD = sa.select(r.c.id).where(_held_by)
# A run asked to stop (a kill, a delete) renews no more: its runner stops it.
_HEARTBEAT = (
    r.update()
    .where(_held_by, r.c.cancel_requested_at.is_(None))
    .values(lease_expires_at=sa.bindparam("b_expires"))
)
_FINISH = (
    r.update()
    .where(_held_by)
    .values(
        status=sa.bindparam("b_status"),
        result=sa.bindparam("b_result"),
        error=sa.bindparam("b_error"),
        finished_at=sa.bindparam("b_finished", type_=r.c.finished_at.type),
        lease_expires_at=sa.bindparam("b_deliver_until", type_=r.c.lease_expires_at.type),
        # The job was deleted while the run worked: nobody asked for its outcome any more.
        delivery_status=sa.case((_job_deleted, "none"), else_=r.c.delivery_status),
    )
)
_FINISH_KNOWN = _FINISH.returning(r.c.session_id, r.c.delivery_status)
_FINISH_ALL = _FINISH.returning(*r.c)
_MARK_DELIVERED = (
    r.update()
    .where(r.c.id.in_(sa.bindparam("b_runs", expanding=True)))
    .values(
        delivery_status=sa.bindparam("b_delivery"),
        delivered_at=sa.bindparam("b_at", type_=r.c.delivered_at.type),
    )
)
_MARK_PENDING_DELIVERED = _MARK_DELIVERED.where(r.c.delivery_status == "pending")
_SET_MESSAGES = (
    r.update()
    .where(r.c.id.in_(sa.bindparam("b_runs", expanding=True)))
    .values(delivered_message_ids=sa.bindparam("b_messages", type_=r.c.delivered_message_ids.type))
)


def _start(
    conn: Connection,
    run_id: int,
    owner: str,
    session_id: int,
    lease: tuple[datetime, datetime] | None = None,
) -> str:
    """Record the run's session if the run is still ours: ``started``, ``lost`` or
    ``deleted`` (its job was deleted while it waited) or ``stopped`` (a kill asked it to).
    ``lease``: (now, until when): held only while unexpired at ``now``, renewed to then."""
    held = {"b_run": run_id, "b_owner": owner}
    values = {**held, "b_session": session_id}
    statement = _START
    if lease is not None:
        statement = _START_RENEWED
        values.update(b_now=lease[0], b_expires=lease[1])
    # The grants the session starts with are the job's as this commit sees them: a revoke
    # since the session was made reaches it (later ones reach running sessions). Read
    # under a share lock: on PostgreSQL a revoke written but not yet committed (it found
    # no running session: this one is not recorded yet) was passed over, and the run kept
    # the grants taken back (until 2026-12-07; found by review). The job's row is locked
    # before the run's, as a deletion locks them (the other order could deadlock).
    job_id = sa.select(r.c.job_id).where(r.c.id == run_id).scalar_subquery()
    grants = conn.execute(
        sa.select(j.c.run_context).where(j.c.id == job_id).with_for_update(read=True)
    ).scalar()
    if conn.execute(statement, values).rowcount == 1:
        conn.execute(
            chat_sessions.update()
            .where(chat_sessions.c.id == session_id)
            .values(run_context=grants)
        )
        return "started"
    still = conn.execute(
        sa.select(_job_live.label("live"), r.c.lease_expires_at).where(_held_by), held
    ).first()
    if still is None or (lease is not None and still.lease_expires_at <= lease[0]):
        return "lost"
    return "stopped" if still.live else "deleted"


def _abandon_expired(conn: Connection, now: datetime) -> list[Run]:
    # A deleted job's run whose worker died is not retried: it just ends; so does a run a
    # kill asked to stop (its worker stopped renewing, or died). Each is returned (its
    # session's calls still wait: the caller closes them).
    ended: list[Run] = []
    deleted = r.c.job_id.in_(sa.select(j.c.id).where(j.c.deleted_at.is_not(None)))
    for which, error in ((deleted, "job deleted"), (r.c.cancel_requested_at.is_not(None), STOPPED)):
        # Only the runs this statement ended (another process of a fleet may end them too).
        ended += [
            _run_row(row)
            for row in conn.execute(
                r.update()
                .where(r.c.status == "running", r.c.lease_expires_at < now, which)
                .values(status="failed", error=error, delivery_status="none", finished_at=now)
                .returning(*r.c)
            )
        ]
    rows = conn.execute(
        sa.select(r)
        .join(j, j.c.id == r.c.job_id)
        .where(
            r.c.status == "running",
            r.c.lease_expires_at < now,
            r.c.attempt >= j.c.max_attempts,
        )
    ).all()
    abandoned = []
    for row in rows:
        conn.execute(
            r.update()
            .where(r.c.id == row.id, r.c.status == "running")
            .values(
                status="abandoned",
                finished_at=now,
                error=f"abandoned after {row.attempt} attempt(s): the worker stopped responding",
            )
        )
        abandoned.append(replace(_run_row(row), status="abandoned"))
    return ended + abandoned


def _heartbeat(conn: Connection, run_id: int, owner: str, expires_at: datetime) -> bool:
    values = {"b_run": run_id, "b_owner": owner, "b_expires": expires_at}
    return conn.execute(_HEARTBEAT, values).rowcount == 1


def _set_session(conn: Connection, run_id: int, session_id: int) -> None:
    conn.execute(r.update().where(r.c.id == run_id).values(session_id=session_id))


def _finish(
    conn: Connection,
    run_id: int,
    owner: str,
    status: str,
    result: str | None,
    error: str | None,
    claimed: Run | None = None,
    deliver_until: datetime | None = None,
) -> Run | None:
    values = {
        "b_run": run_id,
        "b_owner": owner,
        "b_status": status,
        "b_result": result,
        "b_error": error,
        "b_finished": utcnow(),
        "b_deliver_until": deliver_until,
    }
    row = conn.execute(_FINISH_ALL if claimed is None else _FINISH_KNOWN, values).first()
    if row is None:
        return None
    if claimed is None:
        return _run_row(row)
    return replace(
        claimed,
        status=status,
        result=result,
        error=error,
        lease_expires_at=deliver_until,
        session_id=row.session_id,
        delivery_status=row.delivery_status,
    )


def _undelivered(
    conn: Connection, limit: int, owner: str | None = None, now: datetime | None = None
) -> list[Run]:
    where = [
        r.c.delivery_status == "pending",
        r.c.status.in_(("done", "failed", "missed", "abandoned")),
    ]
    if owner is not None and now is not None:
        where.append(
            sa.or_(
                r.c.lease_expires_at.is_(None),
                r.c.lease_expires_at <= now,
                r.c.lease_owner == owner,
            )
        )
    runs = [
        _run_row(row)
        for row in conn.execute(sa.select(r).where(*where).order_by(r.c.id).limit(limit))
    ]
    cut = {run.job_id for run in runs if run.status == "missed"} if len(runs) == limit else set()
    if cut:
        # A job's missed rows are one notice: those past the limit come along (until
        # 2026-12-06 the cut told one job's downtime in two notices; found by review).
        rest = conn.execute(
            sa.select(r)
            .where(*where, r.c.status == "missed", r.c.job_id.in_(cut), r.c.id > runs[-1].id)
            .order_by(r.c.id)
        )
        runs += [_run_row(row) for row in rest]
    return runs


def _claim_deliveries(
    conn: Connection, owner: str, now: datetime, until: datetime, limit: int
) -> list[Run]:
    ids = [run.id for run in _undelivered(conn, limit, owner, now)]
    if not ids:
        return []
    # Checked again as the rows are written: another worker's sweep may have taken them
    # since they were read (it waits for their lock, then finds them leased).
    mine = sa.and_(
        r.c.id.in_(ids),
        r.c.delivery_status == "pending",
        sa.or_(
            r.c.lease_expires_at.is_(None), r.c.lease_expires_at <= now, r.c.lease_owner == owner
        ),
    )
    rows = conn.execute(
        r.update().where(mine).values(lease_owner=owner, lease_expires_at=until).returning(r)
    )
    return sorted((_run_row(row) for row in rows), key=lambda run: run.id)


def _renew_deliveries(conn: Connection, owner: str, run_ids: list[int], until: datetime) -> None:
    for chunk in _chunks(run_ids):
        conn.execute(
            r.update()
            .where(r.c.id.in_(chunk), r.c.lease_owner == owner, r.c.delivery_status == "pending")
            .values(lease_expires_at=until)
        )


def mark_delivered_in(conn: Connection, run_ids: list[int], status: str = "delivered") -> None:
    """``mark_delivered`` as part of another unit of work (the one storing the notice):
    ``AlreadyTold`` rolls that back when another worker's notice told one of them first
    (a worker whose delivery lease ran out while its notice waited for the chat)."""
    if not run_ids:
        return
    values = {"b_runs": run_ids, "b_delivery": status, "b_at": utcnow()}
    if conn.execute(_MARK_PENDING_DELIVERED, values).rowcount != len(set(run_ids)):
        raise AlreadyTold(f"run(s) {run_ids} were told already")


def _mark_delivered(conn: Connection, run_ids: list[int], status: str) -> None:
    if run_ids:
        values = {"b_runs": run_ids, "b_delivery": status, "b_at": utcnow()}
        conn.execute(_MARK_DELIVERED, values)


def _set_delivered_messages(conn: Connection, run_ids: list[int], message_ids: list[int]) -> None:
    if run_ids:
        conn.execute(_SET_MESSAGES, {"b_runs": run_ids, "b_messages": message_ids})


def _runs(conn: Connection, job_id: int) -> list[Run]:
    rows = conn.execute(sa.select(r).where(r.c.job_id == job_id).order_by(r.c.scheduled_for))
    return [_run_row(row) for row in rows]


def _run(conn: Connection, run_id: int) -> Run | None:
    row = conn.execute(sa.select(r).where(r.c.id == run_id)).first()
    return _run_row(row) if row else None
