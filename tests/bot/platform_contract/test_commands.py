"""The shared commands (bot/platform/commands.py): the same words on every platform.

Telegram's own commands (/jobs, /pair, /unpair) and its command menu are checked in
tests/bot/telegram_contract/.
"""

from __future__ import annotations


async def test_help_lists_the_commands(driver, model):
    reply = await driver.reply_to("/help")
    for command in ("/new", "/stop", "/model", "/models", "/context", "/cost", "/compact"):
        assert command in reply
    assert not model.requests


async def test_an_unknown_command_gets_help_and_never_reaches_the_model(driver, model):
    reply = await driver.reply_to("/frobnicate now")
    assert "Unknown command /frobnicate" in reply
    assert "/stop" in reply and not model.requests


async def test_the_commands(driver, model):
    replies = {
        command: await driver.reply_to(command)
        for command in (
            "/models",
            "/model 1",
            "/model gpt-9",
            "/context",
            "/cost",
            "/compact",
            "/resettools",
            "/stop",
            "/sethome",
        )
    }
    assert "1. primary" in replies["/models"]
    assert "Model: primary." in replies["/model 1"]
    assert "'gpt-9' is not configured" in replies["/model gpt-9"]
    assert "No model call in this conversation yet." in replies["/context"]
    assert "0 model calls" in replies["/cost"]
    assert "compaction is not enabled" in replies["/compact"]
    assert "Revoked 0 tool group(s)." in replies["/resettools"]
    assert "Nothing to stop." in replies["/stop"]
    assert "notifications will come to this chat" in replies["/sethome"]
    assert driver.service.hub.home == driver.source
    assert not model.requests
