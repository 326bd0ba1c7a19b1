"""Stopping a running turn: ``/stop`` on every platform, and the terminal's Ctrl-C."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from engine.llm.scripted import tool_call
from engine.store.schema import approval_rules, utcnow
from tests.engine.session.helpers import BlockingTool


async def test_stop_during_a_tool(driver, model):
    blocker = await _a_turn_blocked_in_a_tool(driver, model)

    await driver.say("/stop")

    await driver.expect_stopped()
    assert blocker.cancelled


@pytest.mark.only_on("terminal")
async def test_ctrl_c_during_a_tool(driver, model):
    blocker = await _a_turn_blocked_in_a_tool(driver, model)

    await driver.ctrl_c()

    await driver.expect_stopped()
    assert blocker.cancelled


async def _a_turn_blocked_in_a_tool(driver, model) -> BlockingTool:
    blocker = BlockingTool()
    engine = driver.service.engine
    engine.tools.register(blocker)
    await engine.store.db.run(_allow_the_blocker)
    engine.policy.invalidate()
    model.add(tool_call("wait_here", "{}", "w"))
    await driver.say("wait")
    await asyncio.wait_for(blocker.started.wait(), 5)
    return blocker


def _allow_the_blocker(conn) -> None:
    conn.execute(
        sa.insert(approval_rules).values(
            group_name="default",
            tool_pattern="wait_here",
            action="allow",
            priority=1,
            note="test",
            created_at=utcnow(),
        )
    )


@pytest.mark.only_on("telegram-ptb", "telegram-aiogram", "webchat", "discord", "slack", "matrix")
async def test_stop_says_how_many_waiting_messages_it_dropped(driver, model):
    """Each was acknowledged as taken; until 2026-12-07 they vanished without a word
    (found by review). The terminal takes no line while a turn runs."""
    blocker = await _a_turn_blocked_in_a_tool(driver, model)
    await driver.say("and then this")
    await _queued(driver, 1)

    await driver.say("/stop")

    await driver.expect("Dropped 1 message that was waiting")
    assert blocker.cancelled


async def _queued(driver, count: int) -> None:
    queue = driver.service.engine.store.queue
    for _ in range(500):
        if len(await queue.pending()) == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {count} message(s) waiting")
