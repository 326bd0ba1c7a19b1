"""A question (``ask_user_clarification``) in a group, both bindings: only its asker is
made to reply."""

from __future__ import annotations

import json

from engine.llm.scripted import text, tool_call
from tests.bot.telegram_contract.conftest import ALICE, eventually, find

GROUP = -1008080


async def test_a_question_in_a_group_forces_a_reply_from_the_asker_only(service, telegram, model):
    """Until 2026-12-07 the question carried ForceReply without ``selective`` and replied
    to nothing: every member's client opened a reply to the bot, and the group's next
    lines all went to it (found by review on 2026-12-07)."""
    bot = telegram.bot_username
    model.add(tool_call("ask_user_clarification", json.dumps({"question": "Which file?"}), "q1"))
    model.add(text("ok"))
    asked = telegram.user_message(
        GROUP,
        ALICE,
        f"@{bot} clean the file",
        chat_type="supergroup",
        entities=[{"type": "mention", "offset": 0, "length": len(bot) + 1}],
    )
    question = await eventually(lambda: find(telegram, GROUP, "❓ Question"))
    markup = question.reply_markup or {}
    assert markup.get("force_reply") is True
    assert markup.get("selective") is True, markup
    assert question.reply_to_message_id == asked["message"]["message_id"]


async def test_a_question_in_a_private_chat_forces_the_reply_as_before(service, telegram, model):
    """The private chat's question is unchanged by the group's fix: a plain ForceReply,
    replying to nothing."""
    model.add(tool_call("ask_user_clarification", json.dumps({"question": "Which file?"}), "q1"))
    model.add(text("ok"))
    telegram.user_message(ALICE, ALICE, "clean the file")
    question = await eventually(lambda: find(telegram, ALICE, "❓ Question"))
    markup = question.reply_markup or {}
    assert markup.get("force_reply") is True
    assert "selective" not in markup
    assert question.reply_to_message_id is None
