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


async def test_a_pending_question_still_works_after_a_restart(driver, model):
    ask = tool_call("ask_user_clarification", '{"question": "Which city?"}', "q")
    model.add(ask)
    await driver.say("book a hotel")
    await driver.question()

    await driver.restart()
    model.add(text("Booking Rome."))
    question = await driver.question()
    await driver.answer(question, "Rome")

    await driver.expect("Booking Rome.")
    assert tool_results(model) == ["Rome"]


async def test_a_pending_question_is_not_asked_twice_after_a_restart(driver, model):
    ask = tool_call("ask_user_clarification", '{"question": "Which city?"}', "q")
    model.add(ask)
    await driver.say("book a hotel")
    await driver.question()

    await driver.restart()
    await driver.question()  # the terminal asks again at start, on a screen of its own

    assert driver.questions_shown() == 1
