"""A job's run remembers as its chat does: it searches that chat, acts for the job's
person there, and nothing it says is indexed or learned under a source of its own.

Until 2026-12-07 every run was the session source "cron": one person's job found another
person's jobs with ``search_sessions``, a job's prompt was indexed and learned for a person
of the platform "cron" (past ``/forget_me`` and ``/memory off``) (found by review).
"""

from __future__ import annotations

import json

import sqlalchemy as sa

from engine.core import Engine
from engine.hub import ChatHub
from engine.llm.scripted import text
from memory.service import MemoryService
from memory.tables import memory_documents, memory_identities
from memory.users import Identity
from scheduler.service import Scheduler
from tests.clock import FakeClock
from tests.engine.hub.conftest import EchoModel, wait_done
from tests.memory import test_engine as memory_engine
from tests.scheduler import test_job_grants as grants
from tests.scheduler.test_job_grants import calls_then_says, fire, result_of

# The engine with the real approval rules, a scheduler acting on it, memory as served.
engine, acting, sleeps = grants.engine, grants.acting, grants.sleeps
memory = memory_engine.memory

ANN, BOB = "telegram:111", "telegram:222"
SECRET = "my door code is 4921"


async def said_in(hub: ChatHub, source: str, words: str) -> None:
    events = hub.events(source)
    await hub.send_message(source, words)
    await wait_done(events)


async def test_a_job_searches_its_own_chat_and_never_another_persons_job(
    acting: Scheduler, hub: ChatHub, clock: FakeClock, model: EchoModel, memory: MemoryService
) -> None:
    await said_in(hub, ANN, f"Remember this: {SECRET}")
    ann_job = await acting.create_cron(ANN, "Health", "0 8 * * *", SECRET, owner_id=ANN)
    model.add(text(f"Noted: {SECRET}."))
    await fire(acting, clock, ann_job)
    await result_of(acting, ann_job)
    await memory.settled()

    bob_job = await acting.create_cron(BOB, "Digest", "0 9 * * *", "door code?", owner_id=BOB)
    calls_then_says(model, "search_sessions", {"query": "door code"}, "Found")
    await fire(acting, clock, bob_job)
    status, bobs, error = await result_of(acting, bob_job)
    assert status == "done", error
    assert "4921" not in (bobs or "")

    ann_again = await acting.create_cron(ANN, "Recall", "0 10 * * *", "door code?", owner_id=ANN)
    calls_then_says(model, "search_sessions", {"query": "door code"}, "Found")
    await fire(acting, clock, ann_again)
    status, anns, error = await result_of(acting, ann_again)
    assert status == "done", error
    assert "4921" in (anns or "")  # her own chat's words


async def test_nothing_a_job_run_says_is_indexed_for_a_person_of_its_own(
    acting: Scheduler, engine: Engine, clock: FakeClock, model: EchoModel, memory: MemoryService
) -> None:
    job = await acting.create_cron(ANN, "Health", "0 8 * * *", SECRET, owner_id=ANN)
    model.add(text(f"Noted: {SECRET}."))
    await fire(acting, clock, job)
    await result_of(acting, job)
    await memory.settled()

    def read(conn: sa.Connection) -> tuple[list[str], list[str]]:
        sources = conn.execute(sa.select(memory_documents.c.source)).scalars().all()
        platforms = conn.execute(sa.select(memory_identities.c.platform)).scalars().all()
        return list(sources), list(platforms)

    sources, platforms = await engine.store.db.run(read)
    assert "cron" not in sources
    assert "cron" not in platforms
    assert await memory.search.sessions("cron", "door code") == []


async def test_a_fact_a_job_saves_is_its_persons_in_its_chat(
    acting: Scheduler, clock: FakeClock, model: EchoModel, memory: MemoryService
) -> None:
    job = await acting.create_cron(ANN, "Habits", "0 8 * * *", "note my habit", owner_id=ANN)
    calls_then_says(model, "memory_save", {"fact": "Ann runs at dawn."}, "Saved")
    await fire(acting, clock, job)
    status, result, error = await result_of(acting, job)
    assert status == "done", error
    assert json.loads(result.split(": ", 1)[1])["saved"]["fact"] == "Ann runs at dawn."

    ann = await memory.user_for(Identity("telegram", "111"))
    [fact] = await memory.facts.list(ann)
    assert (fact.body, fact.origin_source) == ("Ann runs at dawn.", ANN)


async def test_a_job_of_a_chat_with_memory_off_searches_nothing(
    acting: Scheduler, hub: ChatHub, clock: FakeClock, model: EchoModel, memory: MemoryService
) -> None:
    await said_in(hub, ANN, f"Remember this: {SECRET}")
    await memory.set_opt_out(ANN, opted_out=True)
    job = await acting.create_cron(ANN, "Recall", "0 8 * * *", "door code?", owner_id=ANN)
    calls_then_says(model, "search_sessions", {"query": "door code"}, "Found")
    await fire(acting, clock, job)
    status, result, error = await result_of(acting, job)
    assert status == "done", error
    assert "memory is switched off in this conversation" in (result or "")
    assert "4921" not in (result or "")
