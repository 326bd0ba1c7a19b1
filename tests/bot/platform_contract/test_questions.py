"""A clarification question and its answer, on every platform."""

from __future__ import annotations

from engine.llm.scripted import text, tool_call
from tests.bot.platform_contract.scripts import tool_results


async def test_a_clarification_is_answered(driver, model):
    ask = tool_call("ask_user_clarification", '{"question": "Which city?"}', "q")
    model.add(ask, text("Booking Rome."))
    await driver.say("book a hotel")
    question = await driver.question()
    assert "Which city?" in question.text

    await driver.answer(question, "Rome")

    await driver.expect("Booking Rome.")
    assert tool_results(model) == ["Rome"]
