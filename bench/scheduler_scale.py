"""Scheduler at scale: ``--jobs`` cron jobs (default 10,000) due in the same minute.

A real engine and hub over a SQLite file (WAL), or PostgreSQL with ``--database-url``
(a fresh database is created on that server for each configuration and dropped after),
and a zero-latency model. The jobs are inserted straight into ``scheduled_jobs`` in one
transaction (what ``JobStore.create`` writes, without the per-chat limit checks of
``Scheduler.create_cron``), all with ``next_run_at`` at the same minute and
``origin_source`` one of 100 known chats (``bench:0`` … ``bench:99``).

The injected clock starts 1 s after that minute and moves with real time (so leases and
``started_at`` behave as in production). The dispatcher is driven as the service drives
it: one ``step()`` (the APScheduler wake at the due time), then whatever that step set
going — a pool of at most ``max_concurrent`` workers draining the claimed runs, and the
step each worker kicks off when the queue runs dry. The bench only waits for those tasks
(and steps again should a run still be pending, which does not happen here).

Each run is the real ``JobRunner.execute``: an ephemeral ``cron`` session, one model step,
the outcome stored, a ``Notification`` handed to ``hub.notify``. Delivery is included by
default: the hub batches notifications (0.2 s window) and runs one agent turn per target
chat per batch; "all delivered" is when no run has ``delivery_status = 'pending'``.
``--no-delivery`` replaces ``hub.notify`` by a stub that marks the runs delivered at once.

Three lags per run, all real elapsed time from t0 = the start of the first ``step()``
(the dispatcher's wake for the due minute; every job is already due then):

* dispatch lag: until the run was claimed — its lease taken (``status='running'``, owner,
  expiry, ``attempt + 1``) in the claim transaction, committed — and handed to this
  process's executor queue. From then on the run is this worker's: the lease is renewed
  while it waits, and a worker that dies leaves it to be reclaimed when the lease expires.
  This is the issue's measured bar (p99 <= 2 s).
* start lag: until ``runner.execute`` began for it (a worker slot took it off the queue).
  At most ``max_concurrent`` runs execute at once, so this is the queue's wait: it grows
  with the backlog divided by the execution throughput (runs per second).
* completion lag: until ``runner.execute`` returned — the outcome stored and the
  notification handed to the hub (not yet delivered into the chat; see "all delivered").

Exactly once: ``job_runs`` rows are counted per job with SQL; ``execute`` calls and
notifications handed to the hub are counted per run. Each configuration runs in a fresh
process, so peak RSS (``getrusage`` max RSS) is that configuration's alone;
``--tracemalloc`` adds the Python heap peak (slower).

    python bench/scheduler_scale.py [--jobs 10000] [--concurrency 32 128] [--quick]
        [--database-url postgresql+asyncpg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bot.schema import LAYERS
from bot.settings import load_settings
from engine.config import AppConfig, EngineConfig, HubConfig
from engine.core import Engine
from engine.hub import ChatHub, Notification
from engine.llm import LlmResponse, Message, ModelRegistry, ScriptedModel, ToolSchema, Usage
from engine.session import AllowAll
from engine.store import Store
from scheduler.service import Scheduler
from scheduler.tables import job_runs, scheduled_jobs

GOAL_P99_LAG_S = 2.0
SOURCES = 100
DUE = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
DELIVERY_TIMEOUT_S = 30.0


class InstantModel(ScriptedModel):
    """Answers every request at once with text; records nothing."""

    def __init__(self) -> None:
        super().__init__(name="instant", record=False)
        self.calls = 0

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, on_delta: Any = None
    ) -> LlmResponse:
        self.calls += 1
        return LlmResponse(content="pong", usage=Usage(10, 1), model=self.name)


class RealTimeClock:
    """Starts at ``start`` and moves with real time (``perf_counter``)."""

    def __init__(self, start: datetime) -> None:
        self._start = start
        self._t0 = time.perf_counter()

    def __call__(self) -> datetime:
        return self._start + timedelta(seconds=time.perf_counter() - self._t0)


def _insert_jobs(conn: sa.Connection, n: int) -> None:
    now = datetime.now(UTC)
    rows = [
        {
            "kind": "cron",
            "title": f"job {i}",
            "spec": "0 9 * * *",
            "timezone": "UTC",
            "prompt": "ping",
            "agent_id": "main",
            "origin_source": f"bench:{i % SOURCES}",
            "parent_session_id": None,
            "run_context": None,
            "enabled": True,
            "single_run": False,
            "coalesce": True,
            "misfire_grace_s": 300,
            "max_attempts": 3,
            "next_run_at": DUE,
            "created_at": now,
        }
        for i in range(n)
    ]
    conn.execute(scheduled_jobs.insert(), rows)


def _check_runs(conn: sa.Connection) -> dict[str, int]:
    per_job = (
        sa.select(scheduled_jobs.c.id, sa.func.count(job_runs.c.id).label("n"))
        .select_from(scheduled_jobs.outerjoin(job_runs, job_runs.c.job_id == scheduled_jobs.c.id))
        .group_by(scheduled_jobs.c.id)
        .subquery()
    )
    counts = dict(conn.execute(sa.select(per_job.c.n, sa.func.count()).group_by(per_job.c.n)).all())
    statuses = dict(
        conn.execute(
            sa.select(job_runs.c.status, sa.func.count()).group_by(job_runs.c.status)
        ).all()
    )
    return {
        "rows": int(conn.execute(sa.select(sa.func.count()).select_from(job_runs)).scalar()),
        "jobs_without_run": int(counts.get(0, 0)),
        "jobs_with_duplicates": int(sum(c for n, c in counts.items() if n > 1)),
        "done": int(statuses.get("done", 0)),
        "not_done": int(sum(c for s, c in statuses.items() if s != "done")),
    }


def _undelivered(conn: sa.Connection) -> int:
    return int(
        conn.execute(
            sa.select(sa.func.count())
            .select_from(job_runs)
            .where(job_runs.c.delivery_status == "pending")
        ).scalar()
    )


def _pending(conn: sa.Connection) -> int:
    return int(
        conn.execute(
            sa.select(sa.func.count()).select_from(job_runs).where(job_runs.c.status == "pending")
        ).scalar()
    )


def _pct(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


@contextlib.asynccontextmanager
async def database(server_url: str | None, tmp: str) -> AsyncIterator[str]:
    """A SQLite file under ``tmp``, or a fresh database on the PostgreSQL server."""
    if server_url is None:
        yield f"sqlite+aiosqlite:///{tmp}/bench.db"
        return
    import asyncpg

    server = make_url(server_url)
    name = f"chathub_bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(
        server.set(drivername="postgresql").render_as_string(hide_password=False)
    )
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield server.set(drivername="postgresql+asyncpg", database=name).render_as_string(
                hide_password=False
            )
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def run_one(
    jobs: int, concurrency: int, delivery: bool, trace: bool, server_url: str | None
) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    if trace:
        tracemalloc.start()
    with tempfile.TemporaryDirectory() as tmp:
        async with database(server_url, tmp) as url:
            return await _run_one(jobs, concurrency, delivery, trace, url, tmp)


async def _run_one(
    jobs: int, concurrency: int, delivery: bool, trace: bool, url: str, tmp: str
) -> dict[str, Any]:
    settings = load_settings(
        database_url=url,
        chathub_workspace=Path(tmp) / "ws",
        chathub_timezone="UTC",
        _env_file=None,
    )
    model = InstantModel()
    engine = await Engine.open(
        AppConfig(settings=settings, models=(), engine=EngineConfig()),
        models=ModelRegistry([model]),
        policy=AllowAll(),
        store=await Store.open(url, LAYERS),  # the scheduler's tables too
    )
    hub = ChatHub(engine, HubConfig(idle_evict_s=3600))
    await hub.start()
    for k in range(SOURCES):  # the chats that created the jobs exist (known targets)
        await engine.store.sessions.for_source(f"bench:{k}")

    t_create = time.perf_counter()
    await engine.store.db.run(_insert_jobs, jobs)
    create_s = time.perf_counter() - t_create

    clock = RealTimeClock(DUE + timedelta(seconds=1))
    scheduler = Scheduler(
        engine, hub, timezone="UTC", clock=clock, owner="bench", max_concurrent=concurrency
    )
    dispatcher = scheduler.dispatcher
    runner = scheduler.runner

    notified: Counter[int] = Counter()
    original_notify = hub.notify

    def notify(notification: Notification) -> None:
        notified.update(notification.refs.get("run_ids", ()))
        if delivery:
            original_notify(notification)
        else:  # a bench stub: recorded delivered at once, as the chat's commit would
            hub._spawn(stored_at_once(notification))

    async def stored_at_once(notification: Notification) -> None:
        if notification.delivered_in is not None:
            await engine.store.db.run(notification.delivered_in)
        if notification.on_delivered is not None:
            await notification.on_delivered()

    hub.notify = notify  # type: ignore[method-assign]

    claimed: dict[int, float] = {}
    started: dict[int, float] = {}
    finished: dict[int, float] = {}
    store = dispatcher.store
    original_claim = store.claim_with_jobs

    async def claim_with_jobs(*args, **kwargs):  # type: ignore[no-untyped-def]
        taken = await original_claim(*args, **kwargs)
        now = time.perf_counter()  # committed; the step queues them right after
        for run, _ in taken:
            claimed.setdefault(run.id, now)
        return taken

    store.claim_with_jobs = claim_with_jobs  # type: ignore[method-assign]
    original_execute = runner.execute

    async def execute(run, job=None):  # type: ignore[no-untyped-def]
        started[run.id] = time.perf_counter()
        try:
            return await original_execute(run, job)
        finally:
            finished[run.id] = time.perf_counter()

    runner.execute = execute  # type: ignore[method-assign]

    reports = []
    original_step = dispatcher.step

    async def step():  # type: ignore[no-untyped-def]
        report = await original_step()
        reports.append(report)
        return report

    dispatcher.step = step  # type: ignore[method-assign]

    t0 = time.perf_counter()
    first = await dispatcher.step()
    first_step_s = time.perf_counter() - t0
    while True:
        # The worker pool and the steps it kicks off run by themselves: wait for them.
        await dispatcher.drain()
        if await engine.store.db.run(_pending) == 0:
            break
        await dispatcher.step()  # not expected: a run still pending
    steps = len(reports)
    created = sum(report.created for report in reports)
    swept = sum(report.delivered for report in reports)
    executed_s = time.perf_counter() - t0

    delivered_s = math.nan
    deadline = time.perf_counter() + DELIVERY_TIMEOUT_S
    while time.perf_counter() < deadline:
        if await engine.store.db.run(_undelivered) == 0:
            delivered_s = time.perf_counter() - t0
            break
        await asyncio.sleep(0.05)
    check = await engine.store.db.run(_check_runs)

    heap_peak = tracemalloc.get_traced_memory()[1] if trace else None
    await scheduler.close()
    await hub.close()
    await engine.close()

    lags = sorted(c - t0 for c in claimed.values())
    start_lags = sorted(s - t0 for s in started.values())
    done_lags = sorted(f - t0 for f in finished.values())
    durations = sorted(finished[i] - started[i] for i in started if i in finished)
    return {
        "jobs": jobs,
        "concurrency": concurrency,
        "delivery": delivery,
        "create_s": create_s,
        "first_step_s": first_step_s,
        "database": url.split("://")[0],
        "first_step_created": first.created,
        "first_step_started": first.started,
        "created": created,
        "steps": steps,
        "swept": swept,
        "executed_s": executed_s,
        "delivered_s": delivered_s,
        "runs_per_s": len(started) / executed_s if executed_s else math.nan,
        "lag_p50": _pct(lags, 0.5),
        "lag_p99": _pct(lags, 0.99),
        "lag_max": lags[-1] if lags else math.nan,
        "claimed": len(claimed),
        "start_p50": _pct(start_lags, 0.5),
        "start_p99": _pct(start_lags, 0.99),
        "start_max": start_lags[-1] if start_lags else math.nan,
        "done_p50": _pct(done_lags, 0.5),
        "done_p99": _pct(done_lags, 0.99),
        "done_max": done_lags[-1] if done_lags else math.nan,
        "run_p50_ms": _pct(durations, 0.5) * 1000,
        "run_p99_ms": _pct(durations, 0.99) * 1000,
        "executed": len(started),
        "model_calls": model.calls,
        "notified_runs": len(notified),
        "notified_max": max(notified.values(), default=0),
        "notified_dupes": sum(1 for c in notified.values() if c > 1),
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "heap_peak_mb": heap_peak / 2**20 if heap_peak is not None else None,
        **check,
    }


def child(args: argparse.Namespace) -> None:
    result = asyncio.run(
        run_one(
            args.jobs,
            args.concurrency[0],
            not args.no_delivery,
            args.tracemalloc,
            args.database_url,
        )
    )
    print(json.dumps(result))


def ok(flag: bool) -> str:
    return "ok" if flag else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--quick", action="store_true", help="1,000 jobs")
    parser.add_argument("--no-delivery", action="store_true", help="stub hub.notify")
    parser.add_argument("--tracemalloc", action="store_true", help="Python heap peak (slower)")
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server (postgresql+asyncpg://...): a fresh database is made on it",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.jobs = 1_000
    if args.child:
        child(args)
        return

    delivery = "excluded (hub.notify stubbed)" if args.no_delivery else "included"
    backend = "PostgreSQL (asyncpg)" if args.database_url else "SQLite file (WAL)"
    print(
        f"scheduler scale: {args.jobs:,} cron jobs due at the same minute, zero-latency model, "
        f"{backend}; delivery {delivery}"
    )
    print(
        "one step() at the due time claims the due runs; a pool of max_concurrent workers "
        "executes them\n(lags from the start of that step; definitions in the docstring)"
    )
    results = []
    for concurrency in args.concurrency:
        cmd = [sys.executable, __file__, "--child", "--jobs", str(args.jobs)]
        cmd += ["--concurrency", str(concurrency)]
        cmd += ["--no-delivery"] if args.no_delivery else []
        cmd += ["--tracemalloc"] if args.tracemalloc else []
        cmd += ["--database-url", args.database_url] if args.database_url else []
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"concurrency {concurrency}: failed\n{done.stderr[-3000:]}")
            continue
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        logged = Counter(line[:160] for line in done.stderr.splitlines() if line.strip())
        for line, count in logged.most_common(5):
            print(f"  concurrency {concurrency} logged {count}x: {line}")

    w = 14
    head = "".join(f"{'max_concurrent=' + str(r['concurrency']):>{w + 6}}" for r in results)
    print(f"\n{'':<34}{head}{'goal':>12}")
    print("-" * (34 + (w + 6) * len(results) + 12))

    def row(label: str, fmt, goal: str = "", check=None) -> None:  # type: ignore[no-untyped-def]
        cells = ""
        for r in results:
            text = fmt(r)
            if check is not None:
                text += f" {ok(check(r)):>4}"
            else:
                text += " " * 5
            cells += f"{text:>{w + 6}}"
        print(f"{label:<34}{cells}{goal:>12}")

    n = args.jobs
    row("jobs created (bulk insert), s", lambda r: f"{r['create_s']:.2f}")
    row("first step (create+claim all), s", lambda r: f"{r['first_step_s']:.2f}")
    row(
        "runs created (job_runs rows)",
        lambda r: f"{r['rows']:,}",
        f"= {n:,}",
        lambda r: r["rows"] == n,
    )
    row(
        "jobs with no run",
        lambda r: f"{r['jobs_without_run']}",
        "0",
        lambda r: r["jobs_without_run"] == 0,
    )
    row(
        "jobs with >1 run",
        lambda r: f"{r['jobs_with_duplicates']}",
        "0",
        lambda r: r["jobs_with_duplicates"] == 0,
    )
    row(
        "runs executed (execute calls)",
        lambda r: f"{r['executed']:,}",
        f"= {n:,}",
        lambda r: r["executed"] == n,
    )
    row("runs status done", lambda r: f"{r['done']:,}", f"= {n:,}", lambda r: r["done"] == n)
    row("dispatch steps (incl. kicked off)", lambda r: f"{r['steps']:,}")
    row("re-delivered by step() sweep", lambda r: f"{r['swept']:,}", "0", lambda r: r["swept"] == 0)
    row(
        "runs claimed (lease taken)",
        lambda r: f"{r['claimed']:,}",
        f"= {n:,}",
        lambda r: r["claimed"] == n,
    )
    row("dispatch lag (claimed) p50, s", lambda r: f"{r['lag_p50']:.2f}")
    row(
        "dispatch lag (claimed) p99, s",
        lambda r: f"{r['lag_p99']:.2f}",
        f"<= {GOAL_P99_LAG_S:.0f}",
        lambda r: r["lag_p99"] <= GOAL_P99_LAG_S,
    )
    row("dispatch lag (claimed) max, s", lambda r: f"{r['lag_max']:.2f}")
    row("start lag (execute began) p50, s", lambda r: f"{r['start_p50']:.2f}")
    row("start lag (execute began) p99, s", lambda r: f"{r['start_p99']:.2f}")
    row("start lag (execute began) max, s", lambda r: f"{r['start_max']:.2f}")
    row("completion lag (stored) p50, s", lambda r: f"{r['done_p50']:.2f}")
    row("completion lag (stored) p99, s", lambda r: f"{r['done_p99']:.2f}")
    row("one run (execute) p50, ms", lambda r: f"{r['run_p50_ms']:.1f}")
    row("one run (execute) p99, ms", lambda r: f"{r['run_p99_ms']:.1f}")
    row("all runs executed, s", lambda r: f"{r['executed_s']:.1f}")
    row("runs per second", lambda r: f"{r['runs_per_s']:.0f}")
    row("all runs delivered, s", lambda r: f"{r['delivered_s']:.1f}")
    row(
        "runs notified (hub.notify)",
        lambda r: f"{r['notified_runs']:,}",
        f"= {n:,}",
        lambda r: r["notified_runs"] == n,
    )
    row(
        "runs notified more than once",
        lambda r: f"{r['notified_dupes']:,}",
        "0",
        lambda r: r["notified_dupes"] == 0,
    )
    row("peak RSS, MB", lambda r: f"{r['maxrss_mb']:.0f}")
    if args.tracemalloc:
        row("Python heap peak (tracemalloc), MB", lambda r: f"{r['heap_peak_mb']:.0f}")


if __name__ == "__main__":
    main()
