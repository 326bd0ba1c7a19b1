"""Talking, starting over, a message too long, a model call that fails: alike everywhere."""

from __future__ import annotations

import pytest

from engine.llm.types import LlmError
from tests.bot.platform_contract.scripts import user_texts


async def test_a_conversation(driver):
    await driver.say("hello there")
    await driver.expect_message("echo: hello there")


async def test_new_starts_a_fresh_conversation(driver, model):
    await driver.say("remember 42")
    await driver.expect_message("echo: remember 42")
    await driver.say("/new")
    await driver.expect("New conversation")
    await driver.say("what was it?")
    await driver.expect_message("echo: what was it?")
    assert user_texts(model) == ["what was it?"]


# Matrix: the homeserver refuses an event over 64 KiB (M_TOO_LARGE) before the bot sees it.
@pytest.mark.only_on("telegram-ptb", "telegram-aiogram", "terminal", "webchat", "discord", "slack")
async def test_a_100_kb_message_gets_a_clear_error(driver, model):
    await driver.say("x" * 100_000)
    reply = await driver.expect("limit")
    assert "100000 characters" in reply and not model.requests


async def test_a_failed_model_call_is_one_sentence_and_the_next_message_works(driver, model):
    model.add(LlmError("the model is down for maintenance", model="primary"))
    await driver.say("hello?")
    said = await driver.expect("down for maintenance")
    assert "The model rejected the request" in said
    assert not any("Traceback" in t or "LlmError" in t for t in driver.shown())

    await driver.say("again")

    await driver.expect_message("echo: again")
