"""Talking, starting over, and the limit on a message: the same on every platform."""

from __future__ import annotations

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


async def test_a_100_kb_message_gets_a_clear_error(driver, model):
    await driver.say("x" * 100_000)
    reply = await driver.expect("limit")
    assert "100000 characters" in reply and not model.requests
