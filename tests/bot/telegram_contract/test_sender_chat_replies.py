"""A reply to words written on behalf of a chat (``sender_chat``), both bindings: the
model reads the chat's title as their author.

A channel's post reaches its linked discussion group as an automatic forward sent by
Telegram's service account (777000) on behalf of the channel; an anonymous admin writes
as the group (the placeholder sender "Group", GroupAnonymousBot). A comment is a reply to
the post's forward, in the post's thread.
"""

from __future__ import annotations

import time

from tests.bot.telegram_contract.conftest import ALICE, eventually, texts

DISCUSSION = -1001234567890
CHANNEL = -1009876543210


def automatic_forward(message_id: int) -> dict:
    return {
        "message_id": message_id,
        "from": {"id": 777000, "is_bot": False, "first_name": "Telegram"},
        "sender_chat": {"id": CHANNEL, "type": "channel", "title": "Release News"},
        "chat": {"id": DISCUSSION, "type": "supergroup", "title": "Release News Chat"},
        "date": int(time.time()),
        "is_automatic_forward": True,
        "forward_origin": {
            "type": "channel",
            "chat": {"id": CHANNEL, "type": "channel", "title": "Release News"},
            "message_id": 7,
            "date": int(time.time()),
        },
        "text": "Version 2.0 is out: faster sync, new themes.",
    }


def comment(telegram, post_id: int, message_id: int, words: str) -> None:
    bot = telegram.bot_username
    text = f"@{bot} {words}"
    telegram.push_update(
        {
            "message": {
                "message_id": message_id,
                "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
                "chat": {"id": DISCUSSION, "type": "supergroup", "title": "Release News Chat"},
                "date": int(time.time()),
                "message_thread_id": post_id,
                "reply_to_message": automatic_forward(post_id),
                "text": text,
                "entities": [{"type": "mention", "offset": 0, "length": len(bot) + 1}],
            }
        }
    )


async def test_the_post_a_comment_replies_to_is_the_channels_words(service, telegram, model):
    """Until 2026-12-07 the model read "[In reply to Telegram: …]": the post's forward
    named by its placeholder sender, not the channel (found by review on 2026-12-07)."""
    telegram.push_update({"message": automatic_forward(40)})
    comment(telegram, 40, 41, "summarize this")
    said = await eventually(
        lambda: [t for t in texts(telegram, DISCUSSION) if "summarize this" in t]
    )
    assert "Release News" in said[0], f"the channel's post is attributed elsewhere: {said[0]!r}"


async def test_a_reply_to_an_anonymous_admin_names_the_group_not_a_person(service, telegram, model):
    """Until 2026-12-07 the model read "[In reply to Group: …]": the anonymous admin's
    placeholder sender, not the group they wrote as (found by review on 2026-12-07)."""
    admin_says = {
        "message_id": 60,
        "from": {
            "id": 1087968824,
            "is_bot": True,
            "first_name": "Group",
            "username": "GroupAnonymousBot",
        },
        "sender_chat": {"id": DISCUSSION, "type": "supergroup", "title": "Release News Chat"},
        "chat": {"id": DISCUSSION, "type": "supergroup", "title": "Release News Chat"},
        "date": int(time.time()),
        "text": "Freeze starts Friday.",
    }
    telegram.push_update({"message": admin_says})
    bot = telegram.bot_username
    telegram.push_update(
        {
            "message": {
                "message_id": 61,
                "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
                "chat": {"id": DISCUSSION, "type": "supergroup", "title": "Release News Chat"},
                "date": int(time.time()),
                "reply_to_message": admin_says,
                "text": f"@{bot} when is that?",
                "entities": [{"type": "mention", "offset": 0, "length": len(bot) + 1}],
            }
        }
    )
    said = await eventually(lambda: [t for t in texts(telegram, DISCUSSION) if "when is" in t])
    assert "Release News Chat" in said[0], f"the admin's words are attributed to: {said[0]!r}"
