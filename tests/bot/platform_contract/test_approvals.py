"""Approval cards: what one shows and what approving or rejecting it does, on every platform.

What only Telegram shows (the buttons, the card edited to its outcome, the answered tap)
is checked in tests/bot/telegram_contract/test_contract.py.
"""

from __future__ import annotations

import pytest

from engine.llm.scripted import text
from tests.bot.platform_contract.scripts import shell, tool_results


async def test_approve_runs_the_tool(driver, model):
    model.add(shell("echo approved >> runs.log"), text("Logged it."))
    await driver.say("log it")
    card = await driver.approval()
    assert "echo approved >> runs.log" in card.text

    await driver.approve(card)

    await driver.expect("Logged it.")
    assert (driver.workspace / "runs.log").read_text() == "approved\n"


async def test_reject_with_a_reason(driver, model):
    model.add(shell("rm -rf data"), text("Understood."))
    await driver.say("clean up")
    card = await driver.approval()

    await driver.reject(card, "keep the data")

    await driver.expect("Understood.")
    assert tool_results(model) == ["User rejected this tool call. Reason: keep the data"]


async def test_reject_without_a_reason(driver, model):
    model.add(shell("rm -rf data"), text("Fine, nothing deleted."))
    await driver.say("clean up")
    card = await driver.approval()

    await driver.reject(card)

    await driver.expect("Fine, nothing deleted.")
    assert tool_results(model) == ["User rejected this tool call."]
    assert not (driver.workspace / "data").exists()


@pytest.mark.parametrize("for_", ["15m", "session"])
async def test_approving_and_stopping_the_asking(driver, model, for_):
    model.add(shell("echo 1", "a"), shell("echo 2", "b"), text("Both done."))
    await driver.say("run both")
    card = await driver.approval()

    await driver.approve_and_stop_asking(card, for_=for_)

    await driver.expect("Both done.")
    await driver.idle()
    assert driver.approvals_shown() == 1


async def test_a_pending_approval_still_works_after_a_restart(driver, model):
    model.add(shell("echo once >> runs.log"))
    await driver.say("log once")
    await driver.approval()

    await driver.restart()
    model.add(text("Logged once."))
    card = await driver.approval()
    await driver.approve(card)

    await driver.expect("Logged once.")
    assert (driver.workspace / "runs.log").read_text() == "once\n"
    assert driver.approvals_shown() == 1
