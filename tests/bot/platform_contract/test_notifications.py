"""Background notifications come to the home conversation, whichever platform it is on."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from engine.llm.scripted import text, tool_call
from engine.llm.types import LlmResponse, Message
from tests.bot.telegram_contract.routed_model import RoutedModel, last_tool, system_text


def tic_route(messages: Sequence[Message]) -> LlmResponse:
    """The tic notifies about Anna's mail; the home conversation's turn says it."""
    tool = last_tool(messages)
    if "You are the tic" in system_text(messages):
        if tool == "sent":
            return text("done")
        args = {"event_type": "mail", "summary": "Anna (your boss) asks to move the 3 pm call."}
        return tool_call("notify", json.dumps(args), "n1")
    if tool and '"tic"' in tool:
        return text("Heads up: Anna asks to move the 3 pm call.")
    return text("ok")


@pytest.fixture
def model() -> RoutedModel:
    return RoutedModel(tic_route)


async def test_the_tic_turns_two_events_into_one_notification_at_home(driver):
    assert "notifications will come to this chat" in await driver.reply_to("/sethome")
    scheduler = driver.service.scheduler
    await scheduler.tic.events.add("mail", "message", {"from": "anna@corp", "subject": "3 pm call"})
    await scheduler.tic.events.add("mail", "message", {"from": "news@shop", "subject": "Sale!"})

    report = await scheduler.tic.tick()

    assert report.events == 2
    await driver.expect("Anna asks to move")
    assert sum("Anna asks to move" in t for t in driver.shown()) == 1
    assert (await scheduler.tic.tick()).events == 0  # processed once
