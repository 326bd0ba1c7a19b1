"""The scheduler end to end: asked for in a Telegram chat, fired, delivered back into it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from engine.llm.scripted import text, tool_call
from engine.llm.types import LlmResponse, Message
from scheduler.grants import JobGrants
from tests.bot.telegram_contract.conftest import ALICE, OWNER, eventually, find, stop, texts
from tests.bot.telegram_contract.routed_model import RoutedModel, last_tool, last_user, system_text


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 7, 59, 30, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def test_a_briefing_asked_for_in_the_chat_fires_and_arrives_there(
    start_service, telegram, clock
):
    def route(messages: Sequence[Message]) -> LlmResponse:
        if "You are the tic" in system_text(messages):
            return text("nothing to report")
        tool = last_tool(messages)
        if last_user(messages) == "Write today's briefing.":
            return text("Sunny, two meetings, no urgent mail.")
        if tool and "job_result" in tool:
            return text("Good morning! Your briefing: sunny, two meetings, no urgent mail.")
        if tool and "task_id" in tool:
            return text("Done: every minute you will get a briefing.")
        spec = {
            "mode": "cron",
            "title": "Briefing",
            "prompt": "Write today's briefing.",
            "cron": "* * * * *",
        }
        return tool_call("execute_task", json.dumps(spec), "t1")

    service = await start_service(model_override=RoutedModel(route), clock=clock)
    try:
        telegram.user_message(ALICE, ALICE, "send me a briefing every minute")
        await approve_card(telegram)  # creating a scheduled task asks first (default rules)
        await eventually(
            lambda: any("every minute you will get" in t for t in texts(telegram, ALICE))
        )
        [job] = await service.scheduler.jobs(f"telegram:{ALICE}")
        assert (job.spec, job.title, job.enabled) == ("* * * * *", "Briefing", True)
        assert job.next_run_at == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)

        clock.now = datetime(2026, 12, 1, 8, 0, 5, tzinfo=UTC)
        report = await service.scheduler.dispatcher.step()
        await service.scheduler.dispatcher.drain()

        assert report.created == 1
        await eventually(lambda: any("Your briefing: sunny" in t for t in texts(telegram, ALICE)))
        [run] = await service.scheduler.store.runs(job.id)
        assert (run.status, run.result) == ("done", "Sunny, two meetings, no urgent mail.")
        await eventually_async(lambda: _delivered(service, run.id))
        await eventually_async(lambda: _answered(service, run.id))
        again = await service.scheduler.dispatcher.step()  # nothing fires twice
        assert again.created == 0
    finally:
        await stop(service)


async def test_an_async_task_result_comes_back_into_the_chat(start_service, telegram, clock):
    def route(messages: Sequence[Message]) -> LlmResponse:
        tool = last_tool(messages)
        if last_user(messages) == "Count the primes below 100.":
            return text("There are 25 primes below 100.")
        if tool and "25 primes" in tool:
            return text("The background task finished: 25 primes below 100.")
        if tool and "started" in tool:
            return text("I started it in the background.")
        args = {"mode": "async", "title": "Primes", "prompt": "Count the primes below 100."}
        return tool_call("execute_task", json.dumps(args), "a1")

    service = await start_service(model_override=RoutedModel(route), clock=clock)
    try:
        telegram.user_message(ALICE, ALICE, "count primes below 100 in the background")
        await approve_card(telegram)
        await eventually(
            lambda: any("25 primes below 100" in t for t in texts(telegram, ALICE)), 10
        )
        await service.scheduler.dispatcher.drain()
        shown = texts(telegram, ALICE)
        assert any("started it in the background" in t for t in shown)
    finally:
        await stop(service)


async def approve_card(telegram) -> None:
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    data = card.reply_markup["inline_keyboard"][0][0]["callback_data"]
    telegram.callback(ALICE, ALICE, card.message_id, data)


async def _delivered(service, run_id: int) -> bool:
    run = await service.scheduler.store.run(run_id)
    return run is not None and run.delivery_status == "delivered"


async def _answered(service, run_id: int) -> bool:
    run = await service.scheduler.store.run(run_id)
    if run is None or not run.delivered_message_ids:
        return False
    [message_id] = run.delivered_message_ids
    detail = await service.engine.store.views.session_detail(
        await service.engine.store.sessions.active_for_source(f"telegram:{ALICE}")
    )
    answer = next(m for m in detail["messages"] if m.get("id") == message_id)
    return "Your briefing" in answer["content"]


async def eventually_async(predicate) -> None:
    for _ in range(500):
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


async def test_jobs_lists_the_chat_s_tasks_with_buttons_that_work(start_service, telegram, clock):
    service = await start_service(clock=clock, chathub_timezone="Europe/Rome")
    try:
        source = f"telegram:{ALICE}"
        job = await service.scheduler.create_cron(
            source, "Briefing", "0 8 * * 1-5", "Write the briefing.", timezone="Europe/Rome"
        )
        other = await service.scheduler.create_cron(
            "telegram:222", "Not yours", "0 9 * * *", "x", timezone="UTC"
        )
        telegram.user_message(ALICE, ALICE, "/jobs")
        panel = await eventually(lambda: find(telegram, ALICE, "Scheduled jobs"))
        assert "Briefing" in panel.text and "Monday through Friday" in panel.text
        assert "(Europe/Rome)" in panel.text and "Not yours" not in panel.text
        buttons = [b["callback_data"] for row in panel.reply_markup["inline_keyboard"] for b in row]
        assert buttons == [f"jb1:{job.id}:p", f"jb1:{job.id}:d"]

        telegram.callback(ALICE, ALICE, panel.message_id, f"jb1:{job.id}:p")
        await eventually(lambda: "paused" in (telegram.message(ALICE, panel.message_id).text or ""))
        assert not (await service.scheduler.store.get(job.id)).enabled

        telegram.callback(ALICE, ALICE, panel.message_id, f"jb1:{other.id}:d")  # not this chat's
        await eventually(
            lambda: any("no such task" in (a.get("text") or "") for a in telegram.callback_answers)
        )
        assert (await service.scheduler.store.get(other.id)).deleted_at is None

        telegram.callback(ALICE, ALICE, panel.message_id, f"jb1:{job.id}:d")
        await eventually(
            lambda: "No scheduled jobs" in (telegram.message(ALICE, panel.message_id).text or "")
        )
    finally:
        await stop(service)


async def test_events_api_checks_the_token_and_the_body(start_service, telegram, unused_port):
    import httpx

    service = await start_service(http=True, http_port=unused_port, chathub_api_token="t0ken")
    url = f"http://127.0.0.1:{unused_port}/api/events"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(200):
                try:
                    await client.get(f"http://127.0.0.1:{unused_port}/healthz")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.02)
            good = {"source": "mail", "type": "message", "payload": {"subject": "hi"}}
            auth = {"Authorization": "Bearer t0ken"}
            missing = await client.post(url, json=good)
            wrong = await client.post(url, json=good, headers={"Authorization": "Bearer nope"})
            broken = await client.post(url, content=b"{not json", headers=auth)
            shape = await client.post(url, json={"source": "", "type": 3}, headers=auth)
            extra = await client.post(url, json={**good, "evil": 1}, headers=auth)
            ok = await client.post(url, json=good, headers=auth)
        assert [r.status_code for r in (missing, wrong, broken, shape, extra, ok)] == [
            401,
            401,
            422,
            422,
            422,
            201,
        ]
        assert "source" in shape.json()["error"]
        assert await service.scheduler.tic.events.unprocessed_count() == 1
    finally:
        await stop(service)


async def test_execute_task_sync_runs_a_sub_agent_and_answers_inline(
    start_service, telegram, clock
):
    def route(messages: Sequence[Message]) -> LlmResponse:
        if "research sub-agent" in system_text(messages):
            return text("The README says: chathub is a Telegram agent.")
        tool = last_tool(messages)
        if tool and "README says" in tool:
            return text("According to the researcher, chathub is a Telegram agent.")
        args = {
            "mode": "sync",
            "title": "Look",
            "prompt": "What does the README say?",
            "agent_id": "researcher",
        }
        return tool_call("execute_task", json.dumps(args), "s1")

    service = await start_service(model_override=RoutedModel(route), clock=clock)
    try:
        telegram.user_message(ALICE, ALICE, "ask the researcher what the README says")
        await approve_card(telegram)
        await eventually(
            lambda: any("According to the researcher" in t for t in texts(telegram, ALICE))
        )
        assert await service.scheduler.jobs(f"telegram:{ALICE}") == []  # inline, not a job
    finally:
        await stop(service)


async def test_a_member_who_may_not_approve_cannot_resume_the_owners_job(
    start_service, telegram, clock
):
    """APPROVERS=owner: Bob may not approve the owner's toggle_task, yet his tap on the
    panel's ▶️ Resume brought back the owner's paused job with its standing grants (found
    by review on 2026-12-06)."""
    bob, group = 222, -100778
    service = await start_service(
        clock=clock, telegram_allowed_user_ids=f"{ALICE},{bob}", approvers="owner"
    )
    try:
        source = f"telegram:{group}"
        job = await service.scheduler.create_cron(
            source,
            "Cleanup",
            "0 8 * * *",
            "Delete old files.",
            grants=JobGrants(tools=("execute_cmd",)),
            owner_id=str(OWNER),
        )
        await service.scheduler.toggle(source, job.id, False)  # the owner paused it
        telegram.user_message(group, bob, "/jobs", chat_type="supergroup", first_name="Bob")
        panel = await eventually(lambda: find(telegram, group, "Cleanup"))

        telegram.callback(group, bob, panel.message_id, f"jb1:{job.id}:r", first_name="Bob")
        await eventually(
            lambda: any(
                "Only the owner" in (a.get("text") or "") for a in telegram.callback_answers
            )
        )
        assert not (await service.scheduler.store.get(job.id)).enabled
        telegram.callback(group, OWNER, panel.message_id, f"jb1:{job.id}:r")
        await eventually(
            lambda: any("Resumed" in (a.get("text") or "") for a in telegram.callback_answers)
        )
        assert (await service.scheduler.store.get(job.id)).enabled
    finally:
        await stop(service)


async def test_a_briefing_for_a_chat_that_blocked_the_bot_pauses_until_it_is_resumed(
    start_service, telegram, clock
):
    """Alice blocked the bot: until 2026-12-07 her minutely briefing ran at every fire
    (the model, its tools) and Telegram refused each answer. Now the first refusal is
    noted, the next fire pauses the job, and once she unblocks the bot and resumes it in
    /jobs (a command's reply is no recorded delivery: the resume itself says the chat is
    back; found by review) it runs."""
    briefed: list[str] = []

    def route(messages: Sequence[Message]) -> LlmResponse:
        if "You are the tic" in system_text(messages):
            return text("nothing to report")
        if last_user(messages) == "Write today's briefing.":
            briefed.append("run")
            return text("Sunny.")
        tool = last_tool(messages)
        if tool and "job_result" in tool:
            return text("Your briefing: sunny.")
        return text(f"echo: {last_user(messages)}")

    service = await start_service(model_override=RoutedModel(route), clock=clock)
    try:
        source = f"telegram:{ALICE}"
        telegram.user_message(ALICE, ALICE, "hello")
        await eventually(lambda: "echo: hello" in texts(telegram, ALICE))
        job = await service.scheduler.create_cron(
            source, "Briefing", "* * * * *", "Write today's briefing.", owner_id=source
        )
        telegram.fail_next("sendMessage", 1000, status=403)  # blocked

        async def fire(minute: int) -> None:
            clock.now = datetime(2026, 12, 1, 8, minute, 5, tzinfo=UTC)
            await service.scheduler.dispatcher.step()
            await service.scheduler.dispatcher.drain()

        await fire(0)
        [run] = await service.scheduler.store.runs(job.id)
        await eventually_async(lambda: _delivered(service, run.id))
        await eventually_async(lambda: _gone(service))
        await fire(1)
        assert briefed == ["run"]  # the second fire did not run the model
        paused = await service.scheduler.store.get(job.id)
        assert not paused.enabled and paused.next_run_at is None
        last = max(await service.scheduler.store.runs(job.id), key=lambda r: r.id)
        assert "no longer takes the bot's messages" in (last.error or "")
        assert "Forbidden: bot was blocked by the user" in (last.error or "")

        telegram.clear_faults()  # she unblocks the bot, opens /jobs and taps Resume
        before = len(texts(telegram, ALICE))
        telegram.user_message(ALICE, ALICE, "/jobs")
        await eventually(lambda: len(texts(telegram, ALICE)) > before)
        await service.scheduler.toggle(source, job.id, True)
        await fire(2)
        assert briefed == ["run", "run"]
        assert await service.scheduler.runner.chat_gone("telegram:not-a-chat") is None
        # A platform not running here reaches no one: its jobs' notices go home.
        gone = await service.scheduler.runner.chat_gone("discord:555")
        assert gone == "discord is not running in this service"
    finally:
        await stop(service)


async def _gone(service) -> bool:
    return await service.adapter.outbound.store.gone_reason(str(ALICE)) is not None
