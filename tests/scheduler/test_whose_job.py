"""Whose job a member may resume or delete through the agent: under
``APPROVERS=requester+owner`` only a job that serves them (or nobody), as ``/jobs`` rules.

The call's card names the member who asked the agent, who may approve it themselves:
until 2026-12-07 Bob resumed Alice's paused job (with its standing grants) or deleted it
so, while the panel refused him the same (found by review).
"""

from __future__ import annotations

import json

import pytest

from engine.approval import Decider
from engine.core import Engine
from engine.hub import APPROVE, ChatHub, SendOptions
from engine.llm.scripted import text, tool_call
from engine.session.events import ApprovalRequired, Done
from engine.store import SENDER_KEY
from scheduler.grants import JobGrants
from scheduler.service import Scheduler
from scheduler.tools import scheduler_tools
from tests.engine.hub.conftest import EchoModel
from tests.scheduler import test_job_grants as grants
from tests.scheduler.test_job_grants import wait_until_card_or_done

# The engine with the real approval rules, and a scheduler acting on it.
engine, acting, sleeps = grants.engine, grants.acting, grants.sleeps

GROUP = "telegram:-1001"
ALICE, BOB = "111", "222"


async def alices_paused_job(acting: Scheduler, engine: Engine) -> int:
    for tool in scheduler_tools(acting):
        engine.tools.register(tool)
    job = await acting.create_cron(
        GROUP,
        "Cleanup",
        "0 8 * * *",
        "Delete old files.",
        grants=JobGrants(tools=("execute_cmd",)),
        owner_id=f"telegram:{ALICE}",
    )
    await acting.toggle(GROUP, job.id, False)
    return job.id


async def asked_by(
    hub: ChatHub, model: EchoModel, user: str, call: str, args: dict[str, object]
) -> str:
    """``user`` asks the agent in the group, which calls ``call``; ``user`` approves the
    card (they asked: the card's rule lets them); what the call answered."""
    model.add(tool_call(call, json.dumps(args), "c1"), text("Done."))
    events = hub.events(GROUP)
    await hub.send_message(
        GROUP, f"{call} please", SendOptions(metadata={SENDER_KEY: {"id": user}})
    )
    seen = await wait_until_card_or_done(events)
    card = seen[-1].event
    assert isinstance(card, ApprovalRequired)
    await hub.decide(card.tool_call_id, APPROVE, decider=Decider(user, is_allowed=True))
    while not isinstance(seen[-1].event, Done):
        seen += await wait_until_card_or_done(events)
    answers = reversed(model.requests[-1][0])
    return next(str(m["content"]) for m in answers if m["role"] == "tool")


@pytest.mark.parametrize("call", ["toggle_task", "delete_task"])
async def test_a_member_cannot_resume_or_delete_anothers_job_through_the_agent(
    acting: Scheduler, engine: Engine, hub: ChatHub, model: EchoModel, call: str
) -> None:
    job_id = await alices_paused_job(acting, engine)
    args = {"task_id": job_id, "enabled": True} if call == "toggle_task" else {"task_id": job_id}

    said = await asked_by(hub, model, BOB, call, args)

    assert "serves someone else" in said
    [job] = await acting.jobs(GROUP)
    assert not job.enabled


async def test_a_member_resumes_and_deletes_their_own_job_and_pauses_anyones(
    acting: Scheduler, engine: Engine, hub: ChatHub, model: EchoModel
) -> None:
    job_id = await alices_paused_job(acting, engine)
    resumed = await asked_by(hub, model, ALICE, "toggle_task", {"task_id": job_id, "enabled": True})
    assert resumed.startswith("resumed task")
    paused = await asked_by(hub, model, BOB, "toggle_task", {"task_id": job_id, "enabled": False})
    assert paused.startswith("paused task")
    deleted = await asked_by(hub, model, ALICE, "delete_task", {"task_id": job_id})
    assert deleted.startswith("deleted task")
    assert await acting.jobs(GROUP) == []
