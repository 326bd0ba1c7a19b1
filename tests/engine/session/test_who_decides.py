"""Who may decide a gated call, at the engine every surface goes through (``APPROVERS``).

The requester is recorded with the approval from the sender of the message the model was
answering; a refused decider changes nothing; the operator (web inbox, API, terminal)
decides under every policy.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engine.approval.deciders import OPERATOR, Decider
from engine.config import AppConfig, load_settings
from engine.core import Engine
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import text, tool_call
from engine.session import events as ev
from engine.session.outcomes import Final
from engine.store.inbox import NotPermitted
from tests.engine.session.helpers import start_until

ALICE = Decider("11", is_allowed=True)
BOB = Decider("22", is_allowed=True)
OWNER = Decider("1", is_owner=True, is_allowed=True)
FROM_ALICE = {"sender": {"id": "11", "name": "Alice"}}


@pytest.fixture
async def open_with(tmp_path: Path, model, limits):
    opened: list[Engine] = []

    async def open_(approvers: str = "requester+owner") -> Engine:
        settings = load_settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}",
            chathub_workspace=tmp_path / "workspace",
            chathub_timezone="UTC",
            approvers=approvers,
            _env_file=None,
        )
        engine = await Engine.open(
            AppConfig(settings=settings, models=(), engine=limits), models=ModelRegistry([model])
        )
        opened.append(engine)
        return engine

    yield open_
    for engine in opened:
        await engine.close()


def shell(command: str):
    return tool_call("execute_cmd", json.dumps({"command": command}), "c1")


async def gated(engine: Engine, model, **message) -> tuple[asyncio.Task, ev.ApprovalRequired]:
    model.add(shell("echo ran > out.txt"), text("Done."))
    handler = await engine.new_session("telegram:-100")
    return await start_until(
        lambda emit: handler.handle_message("log it", emit=emit, **message),
        ev.ApprovalRequired,
        [],
    )


async def test_the_requester_is_recorded_and_others_are_refused(open_with, model, tmp_path):
    engine = await open_with()
    turn, request = await gated(engine, model, metadata=FROM_ALICE)
    record = await engine.store.inbox.get(request.tool_call_id)
    assert (record.requester_id, record.requester_name) == ("11", "Alice")
    assert await engine.approvals.who_may_decide(request.tool_call_id) == (
        "Alice (who asked) or the owner can decide."
    )

    with pytest.raises(NotPermitted, match="Only Alice"):
        await engine.approve(request.tool_call_id, decider=BOB)
    with pytest.raises(NotPermitted):
        await engine.reject(request.tool_call_id, "no", decider=BOB)
    assert [i.tool_call_id for i in await engine.pending_approvals()] == [request.tool_call_id]
    assert not (tmp_path / "workspace" / "out.txt").exists()

    await engine.approve(request.tool_call_id, decider=ALICE)
    assert isinstance(await asyncio.wait_for(turn, 5), Final)
    assert (tmp_path / "workspace" / "out.txt").exists()


@pytest.mark.parametrize(
    ("approvers", "refused", "permitted"),
    [
        ("requester+owner", BOB, OWNER),
        ("owner", ALICE, OWNER),
        ("allowed", Decider("33"), BOB),
    ],
)
async def test_each_policy(open_with, model, approvers, refused, permitted):
    engine = await open_with(approvers)
    turn, request = await gated(engine, model, metadata=FROM_ALICE)
    with pytest.raises(NotPermitted):
        await engine.approve(request.tool_call_id, decider=refused)
    await engine.approve(request.tool_call_id, decider=permitted)
    assert isinstance(await asyncio.wait_for(turn, 5), Final)


@pytest.mark.parametrize("approvers", ["requester+owner", "owner", "allowed"])
async def test_the_operator_decides_under_every_policy(open_with, model, approvers):
    engine = await open_with(approvers)
    turn, request = await gated(engine, model, metadata=FROM_ALICE)
    await engine.reject(request.tool_call_id, "not now", decider=OPERATOR)
    assert isinstance(await asyncio.wait_for(turn, 5), Final)


@pytest.mark.parametrize(
    "message",
    [
        {"is_synthetic": True, "metadata": FROM_ALICE},  # a cron or tic prompt names nobody
        {"metadata": None},
        {"metadata": {"sender": "11"}},  # malformed sender metadata
        {"metadata": {"sender": {"id": 11, "name": "Alice"}}},  # not an opaque string id
        {"metadata": {"sender": {"id": "", "name": "Alice"}}},
    ],
)
async def test_no_requester_means_only_the_owner(open_with, model, message):
    engine = await open_with()
    turn, request = await gated(engine, model, **message)
    record = await engine.store.inbox.get(request.tool_call_id)
    assert record.requester_id is None
    assert await engine.approvals.who_may_decide(request.tool_call_id) == (
        "Only the owner can decide."
    )
    with pytest.raises(NotPermitted, match="Only the owner"):
        await engine.approve(request.tool_call_id, decider=ALICE)
    await engine.approve(request.tool_call_id, decider=OWNER)
    assert isinstance(await asyncio.wait_for(turn, 5), Final)


async def test_the_rule_survives_a_restart(open_with, model):
    engine = await open_with()
    _turn, request = await gated(engine, model, metadata=FROM_ALICE)
    await engine.close()
    again = await open_with()
    with pytest.raises(NotPermitted):
        await again.approve(request.tool_call_id, decider=BOB)
    decided = await again.approve(request.tool_call_id, decider=ALICE)
    assert decided.resumed is not None
    assert isinstance(await asyncio.wait_for(decided.resumed, 5), Final)
