"""A scheduled job's card in a web conversation: shown live, and again after a reload."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.webchat.conversations import source_of
from engine.core import Engine
from engine.hub import ChatHub
from scheduler.service import Scheduler
from tests.bot.webchat.conftest import ChatServer
from tests.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer


async def test_a_jobs_card_is_shown_again_after_a_reload_and_decided_there(
    server: ChatServer, engine: Engine, hub: ChatHub, fake_openai: FakeOpenAIServer
) -> None:
    (engine.workspace.root / "notes.txt").write_text("Buy milk.")
    clock = FakeClock()
    scheduler = Scheduler(engine, hub, timezone="UTC", clock=clock, owner="web-test")
    try:
        first = await server.client("c1")  # the conversation exists; its page is open
        job = await scheduler.create_cron(source_of("c1"), "Notes", "0 8 * * *", "Brief me.")
        fake_openai.reply_tool_calls(("r1", "read_file", {"path": "notes.txt"}))
        fake_openai.reply_text("Brief: done")
        assert job.next_run_at is not None
        clock.now = job.next_run_at + timedelta(seconds=1)
        await scheduler.dispatcher.step()
        live = (await first.until("approval_required"))[-1]
        assert live["asked_by"] == "Notes" and live["tool"] == "read_file"
        await first.close()

        reloaded = await server.client("c1")  # a reload: the card is shown again
        again = (await reloaded.until("approval_required"))[-1]
        assert (again["tool_call_id"], again["asked_by"]) == (live["tool_call_id"], "Notes")
        await reloaded.send(type="approve_tool", tool_call_id=again["tool_call_id"])
        await asyncio.wait_for(scheduler.dispatcher.drain(), 15)
        [run] = await scheduler.store.runs(job.id)
        assert (run.status, run.result) == ("done", "Brief: done")
        await reloaded.close()
    finally:
        await scheduler.close()
