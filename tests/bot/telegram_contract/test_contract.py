"""One contract, both bindings: what a person in Telegram sees and can do.

What every platform does alike (a conversation, /new, the commands, approving and rejecting,
questions, /stop) runs over each platform in tests/bot/platform_contract/; here are the
scenarios only Telegram has and what only Telegram shows of the shared ones (buttons, cards
edited to their outcome, answered taps, forced replies, "typing…").
"""

from __future__ import annotations

import asyncio
import json

import httpx
import sqlalchemy as sa

from bot.delivery.tables import platform_cards, platform_events
from bot.telegram.rendering.cards import format_callback
from engine.llm.scripted import text, tool_call
from engine.store import connect
from tests.bot.telegram_contract.conftest import (
    ALICE,
    OWNER,
    STRANGER,
    eventually,
    eventually_true,
    find,
    stop,
    texts,
)
from tests.engine.hub.conftest import held
from tests.engine.session.helpers import BlockingTool


def shell(command: str, call_id: str = "c1"):
    return tool_call("execute_cmd", json.dumps({"command": command}), call_id)


async def test_the_command_menu_is_registered(service, telegram):
    telegram.user_message(ALICE, ALICE, "hello there")
    await eventually(lambda: "echo: hello there" in texts(telegram, ALICE))
    assert {c["command"] for c in telegram.commands["default/"]} >= {"stop", "new", "model"}


async def test_an_approved_card_says_who_approved_and_loses_its_buttons(service, telegram, model):
    model.add(shell("echo approved >> runs.log"), text("Logged it."))
    telegram.user_message(ALICE, ALICE, "log it")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    buttons = [b["callback_data"] for row in card.reply_markup["inline_keyboard"] for b in row]
    assert buttons[0].startswith("ap1:") and len(buttons) == 4

    telegram.callback(ALICE, ALICE, card.message_id, buttons[0])

    await eventually(lambda: "Logged it." in texts(telegram, ALICE))
    edited = telegram.message(ALICE, card.message_id)
    assert "Approved" in edited.text and "Alice" in edited.text
    assert not (edited.reply_markup or {}).get("inline_keyboard")
    assert telegram.callback_answers  # the spinner was stopped


async def test_a_card_telegram_refuses_ends_its_wait_and_the_turn_goes_on(service, telegram, model):
    """A card Telegram refused (a closed topic, a blocked bot) closed unseen, and its turn
    waited for good for a decision nobody could see (found by review): its call is
    rejected and the model says so."""
    model.add(shell("echo hi >> runs.log"), text("I could not run it."))
    # The progress line's and the card's (a topic closed a moment; the answer goes out).
    telegram.fail_next("sendMessage", 2, status=400, description="Bad Request: TOPIC_CLOSED")
    telegram.user_message(ALICE, ALICE, "log it")
    await eventually(lambda: "I could not run it." in texts(telegram, ALICE))
    assert not find(telegram, ALICE, "Approval needed")
    [_, after] = model.requests
    [result] = [m["content"] for m in after[0] if m["role"] == "tool"]
    assert "could not be shown" in result
    assert not (service.hub.workspace_root / "runs.log").exists()


async def test_a_rejected_card_asks_for_the_reason_and_then_shows_it(service, telegram, model):
    model.add(shell("rm -rf data"), text("Understood."))
    telegram.user_message(ALICE, ALICE, "clean up")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    telegram.callback(ALICE, ALICE, card.message_id, format_callback(_call_id(card), "reject"))
    await eventually(lambda: "reason" in (telegram.message(ALICE, card.message_id).text or ""))

    telegram.user_message(ALICE, ALICE, "keep the data", reply_to_message_id=card.message_id)

    await eventually(lambda: "Understood." in texts(telegram, ALICE))
    assert "keep the data" in telegram.message(ALICE, card.message_id).text


async def test_a_photo_given_as_the_reason_is_named_to_the_agent(service, telegram, model):
    """A reason sent as a photo with a caption: the caption is the reason and the photo,
    kept in the workspace, is named in it (it was kept but never named: the agent could
    not look at what it was shown instead)."""
    model.add(shell("rm -rf data"), text("Understood."))
    telegram.user_message(ALICE, ALICE, "clean up")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    telegram.callback(ALICE, ALICE, card.message_id, format_callback(_call_id(card), "reject"))
    await eventually(lambda: "reason" in (telegram.message(ALICE, card.message_id).text or ""))

    telegram.photo_message(
        ALICE,
        ALICE,
        b"\xff\xd8\xff\xe0jpeg",
        caption="delete this one",
        reply_to_message_id=card.message_id,
    )

    await eventually(lambda: "Understood." in texts(telegram, ALICE))
    [result] = [m["content"] for m in model.requests[-1][0] if m["role"] == "tool"]
    assert "delete this one" in result and "uploads/telegram/" in result
    # The card shows the reason as people read it: the photo by its name, not the note
    # to the agent (it showed the agent's "[SYSTEM INFO]" block; found by review).
    shown = telegram.message(ALICE, card.message_id).text
    assert "delete this one 📎" in shown and ".jpg" in shown
    assert "SYSTEM" not in shown and "uploads/" not in shown


async def test_a_clarification_forces_a_reply(service, telegram, model):
    ask = tool_call("ask_user_clarification", '{"question": "Which city?"}', "q")
    model.add(ask, text("Booking Rome."))
    telegram.user_message(ALICE, ALICE, "book a hotel")
    question = await eventually(lambda: find(telegram, ALICE, "❓"))
    assert question.reply_markup.get("force_reply") is True

    telegram.user_message(ALICE, ALICE, "Rome", reply_to_message_id=question.message_id)

    await eventually(lambda: "Booking Rome." in texts(telegram, ALICE))


async def test_a_slow_turn_shows_typing_until_stopped(service, telegram, model):
    blocker = BlockingTool()
    service.engine.tools.register(blocker)
    await service.engine.store.db.run(_allow_everything)
    service.engine.policy.invalidate()
    model.add(tool_call("wait_here", "{}", "w"))
    telegram.user_message(ALICE, ALICE, "wait")
    await eventually(lambda: blocker.started.is_set())
    # A slow turn shows "typing…" (0.4 s in; more under a loaded machine's other tests).
    await eventually(lambda: telegram.chat_actions, within_s=15)
    assert telegram.chat_actions[0]["action"] == "typing"

    telegram.user_message(ALICE, ALICE, "/stop")

    await eventually(lambda: blocker.cancelled)
    await eventually(lambda: any("Stopped" in t for t in texts(telegram, ALICE)))


async def test_pairing_a_stranger(service, telegram, model):
    telegram.user_message(STRANGER, STRANGER, "hi, let me in", first_name="Bob")
    offer = await eventually(lambda: find(telegram, STRANGER, "pairing code"))
    code = offer.text.split("pairing code is ")[1].split()[0]
    assert len(code) == 6 and not model.requests  # nothing reached the model
    await eventually(lambda: find(telegram, OWNER, f"/pair {code}"))

    telegram.user_message(OWNER, OWNER, f"/pair {code}")

    await eventually(lambda: find(telegram, STRANGER, "Welcome"))
    telegram.user_message(STRANGER, STRANGER, "thanks")
    await eventually(lambda: "echo: thanks" in texts(telegram, STRANGER))
    # A paired member talks, but the owner's notifications stay where they were.
    home = service.hub.home
    telegram.user_message(STRANGER, STRANGER, "/sethome")
    await eventually(lambda: find(telegram, STRANGER, "Only people of the bot's configuration"))
    assert service.hub.home == home


async def test_a_strangers_name_never_becomes_a_link_for_the_owner(service, telegram, model):
    """A first name "[Telegram Support](https://…)" reached the owner as a link labelled
    "Telegram Support" (found by review); the name is shown as written."""
    name = "[Telegram Support](https://evil.example/login)"
    telegram.user_message(STRANGER, STRANGER, "hi", first_name=name, username=None)
    notice = await eventually(lambda: find(telegram, OWNER, "asks to talk"))
    assert "[Telegram Support]" in notice.text and "(https://evil.example/login)" in notice.text
    assert not any(e.get("type") == "text_link" for e in notice.entities or [])
    code = notice.text.split("/pair ")[1].split()[0]
    telegram.user_message(OWNER, OWNER, f"/pair {code}")
    paired = await eventually(lambda: find(telegram, OWNER, "Paired"))
    assert not any(e.get("type") == "text_link" for e in paired.entities or [])


async def test_a_forged_callback_changes_nothing(service, telegram, model):
    model.add(shell("echo x"), text("ok"))
    telegram.user_message(ALICE, ALICE, "go")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    data = format_callback(_call_id(card), "approve")

    telegram.callback(ALICE, STRANGER, card.message_id, data, first_name="Mallory")
    telegram.callback(OWNER, OWNER, card.message_id, data)  # the right id, another chat
    telegram.callback(ALICE, ALICE, card.message_id, "garbage")
    telegram.callback(ALICE, ALICE, card.message_id, "ap1:" + "9" * 61)  # 65 bytes

    await eventually(lambda: len(telegram.callback_answers) == 4)
    answers = [a.get("text") or "" for a in telegram.callback_answers]
    assert sum("expired" in a for a in answers) == 3 and any("not allowed" in a for a in answers)
    assert "Approved" not in telegram.message(ALICE, card.message_id).text
    [item] = await service.engine.pending_approvals()
    assert item.tool_call_id == _call_id(card)


async def test_a_429_storm_is_waited_out(service, telegram, model):
    telegram.fail_next("sendMessage", 3, retry_after=1)
    telegram.user_message(ALICE, ALICE, "hello")
    await eventually(lambda: "echo: hello" in texts(telegram, ALICE))
    assert service.adapter.outbound.stats.retry_after >= 3


async def test_a_long_reply_is_split(service, telegram, model):
    paragraphs = [f"Paragraph {i}: " + "word " * 150 for i in range(12)]
    model.add(text("\n\n".join(paragraphs)))
    telegram.user_message(ALICE, ALICE, "write a lot")
    await eventually(lambda: any("Paragraph 11" in t for t in texts(telegram, ALICE)))
    replies = [t for t in texts(telegram, ALICE) if "Paragraph" in t]
    assert len(replies) >= 2 and all(len(t.encode("utf-16-le")) // 2 <= 4096 for t in replies)
    assert "".join(replies).count("Paragraph") == 12


async def test_in_groups_only_a_mention_or_a_reply_is_answered(service, telegram, model):
    """And a command, when it is ours: Telegram gives one without "@bot" to every bot of
    the group, and another bot's (``/roll``) got "Unknown command" and the whole help
    text (found by review)."""
    group = -1001
    telegram.user_message(group, ALICE, "chatting among ourselves", chat_type="supergroup")
    telegram.user_message(group, ALICE, "/roll 2d6", chat_type="supergroup")
    telegram.user_message(group, ALICE, "/jobs", chat_type="supergroup")
    mention = f"@{telegram.bot_username} what time is it?"
    entities = [{"type": "mention", "offset": 0, "length": len(telegram.bot_username) + 1}]
    telegram.user_message(group, ALICE, mention, chat_type="supergroup", entities=entities)
    telegram.user_message(group, ALICE, f"/roll@{telegram.bot_username}", chat_type="supergroup")
    await eventually(
        lambda: all(
            any(words in t for t in texts(telegram, group))
            for words in ("Unknown command /roll", "what time is it", "No scheduled jobs")
        )
    )
    said = texts(telegram, group)
    assert not any("among ourselves" in t for t in said)
    assert sum("Unknown command" in t for t in said) == 1  # the one that named this bot


OTHER_BOTS_GROUP = -1004244


async def test_another_bots_command_in_a_private_chat_never_reaches_the_model(
    service, telegram, model
):
    """``/model@OtherBot 2`` became a message to the model (found by review on
    2026-12-07): it is told it names another bot."""
    telegram.user_message(ALICE, ALICE, "/model@OtherBot 2")
    await eventually(lambda: texts(telegram, ALICE))
    await service.adapter.drain()
    assert not any("OtherBot" in t for t in texts(telegram, ALICE)), texts(telegram, ALICE)
    assert not model.requests, [r[0][-1] for r in model.requests]


async def test_another_bots_command_replying_to_the_bot_gets_no_help_text(service, telegram, model):
    """Telegram gives "/roll" to every bot of the group (docs: until 2026-12-07 another
    bot's command got "Unknown command" and the help text): a reply to our message with
    it is still another bot's command."""
    bot = telegram.bot_username
    entities = [{"type": "mention", "offset": 0, "length": len(bot) + 1}]
    telegram.user_message(
        OTHER_BOTS_GROUP, ALICE, f"@{bot} hello", chat_type="supergroup", entities=entities
    )
    await eventually(lambda: texts(telegram, OTHER_BOTS_GROUP))
    ours = telegram.messages(OTHER_BOTS_GROUP)[-1].message_id
    telegram.user_message(
        OTHER_BOTS_GROUP, ALICE, "/roll@dice_bot", chat_type="supergroup", reply_to_message_id=ours
    )
    telegram.user_message(
        OTHER_BOTS_GROUP, ALICE, "/roll", chat_type="supergroup", reply_to_message_id=ours
    )
    telegram.user_message(
        OTHER_BOTS_GROUP, ALICE, f"@{bot} ping", chat_type="supergroup", entities=entities
    )
    await eventually(lambda: any("ping" in t for t in texts(telegram, OTHER_BOTS_GROUP)))
    await service.adapter.drain()
    shown = texts(telegram, OTHER_BOTS_GROUP)
    assert not any("Unknown command" in t for t in shown), shown
    assert not any("roll" in t for t in shown), shown


async def test_forum_topics_are_separate_conversations(service, telegram, model):
    group = -1002
    for topic, words in ((5, "topic five"), (6, "topic six")):
        telegram.user_message(
            group,
            ALICE,
            f"@{telegram.bot_username} {words}",
            chat_type="supergroup",
            message_thread_id=topic,
            entities=[{"type": "mention", "offset": 0, "length": len(telegram.bot_username) + 1}],
        )
    await eventually(
        lambda: len([m for m in telegram.messages(group) if "echo" in (m.text or "")]) == 2
    )
    by_topic = {
        m.message_thread_id: m.text for m in telegram.messages(group) if "echo" in (m.text or "")
    }
    assert "topic five" in by_topic[5] and "topic six" in by_topic[6]
    sessions = await service.engine.store.sessions.all_sources()
    assert sessions[f"telegram:{group}:5"] != sessions[f"telegram:{group}:6"]


async def test_webhook_mode_checks_the_secret(start_service, telegram, unused_port):
    service = await start_service(
        http=True,
        http_port=unused_port,
        telegram_webhook_url="https://bot.example.org/telegram/webhook",
        telegram_webhook_secret="s3cret",
        chathub_api_token="webhook-mode-token",  # reached from outside: a token
    )
    try:
        assert telegram.webhook.url == "https://bot.example.org/telegram/webhook"
        update = {
            "update_id": 77,
            "message": {
                "message_id": 1,
                "date": 0,
                "chat": {"id": ALICE, "type": "private"},
                "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
                "text": "via webhook",
            },
        }
        url = f"http://127.0.0.1:{unused_port}/telegram/webhook"
        async with httpx.AsyncClient() as client:
            await eventually_async(lambda: client.get(f"http://127.0.0.1:{unused_port}/healthz"))
            wrong = await client.post(
                url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "nope"}
            )
            right = await client.post(
                url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "s3cret"}
            )
        assert (wrong.status_code, right.status_code) == (401, 200)
        await eventually(lambda: "echo: via webhook" in texts(telegram, ALICE))
        assert not telegram.calls_to("getUpdates")
    finally:
        await stop(service)


# -- bad input ---------------------------------------------------------------------------


async def test_malformed_and_unknown_updates_are_ignored(service, telegram, model):
    telegram.push_update({"update_id": 500, "poll": {"id": "1"}})
    telegram.push_update({"update_id": 501, "message": {"message_id": 1, "text": "no chat"}})
    telegram.push_update(
        {"update_id": 502, "message": {"chat": {"id": ALICE}, "text": "no sender"}}
    )
    telegram.user_message(ALICE, ALICE, "still alive?")
    await eventually(lambda: "echo: still alive?" in texts(telegram, ALICE))
    assert [m["content"] for m in model.requests[-1][0] if m["role"] == "user"] == ["still alive?"]


async def test_a_duplicated_update_is_handled_once(service, telegram, model):
    update = telegram.user_message(ALICE, ALICE, "once please")
    await eventually(lambda: "echo: once please" in texts(telegram, ALICE))
    telegram.push_update(update)  # Telegram redelivers the same update id
    telegram.user_message(ALICE, ALICE, "next")
    await eventually(lambda: "echo: next" in texts(telegram, ALICE))
    assert texts(telegram, ALICE).count("echo: once please") == 1


async def test_an_edited_message_never_reaches_the_model(service, telegram, model):
    sent = telegram.user_message(ALICE, ALICE, "original")
    await eventually(lambda: "echo: original" in texts(telegram, ALICE))
    telegram.edited_message(ALICE, ALICE, sent["message"]["message_id"], "edited!")
    telegram.user_message(ALICE, ALICE, "after")
    await eventually(lambda: "echo: after" in texts(telegram, ALICE))
    assert not any("edited!" in json.dumps(r[0]) for r in model.requests)


async def test_an_edit_of_a_message_still_waiting_is_what_the_agent_reads(service, telegram, model):
    """A message corrected while the agent was busy with the one before: the agent acted
    on the words taken back (until 2026-12-07; found by review)."""
    source = f"telegram:{ALICE}"
    release = held(model)
    telegram.user_message(ALICE, ALICE, "first")
    await release.asked.wait()
    sent = telegram.user_message(ALICE, ALICE, "deploy to prod")

    async def waiting() -> list[str]:
        return [row.content for row in await service.hub.waiting_messages(source)]

    await eventually_true(lambda: _equals(waiting(), ["deploy to prod"]))
    telegram.edited_message(ALICE, ALICE, sent["message"]["message_id"], "deploy to staging")
    await eventually_true(lambda: _equals(waiting(), ["deploy to staging"]))
    release.set()
    await eventually(lambda: "echo: deploy to staging" in texts(telegram, ALICE))
    assert not any("deploy to prod" in json.dumps(r[0]) for r in model.requests)


async def test_a_group_edit_that_drops_the_mention_corrects_the_waiting_message(
    service, telegram, model
):
    """ "@bot drop the prod database" edited to "never mind" while it waited: the edit,
    no longer addressed to the bot, was ignored (found by review on 2026-12-07)."""
    group = -1004242
    mention = f"@{telegram.bot_username}"
    addressed = [{"type": "mention", "offset": 0, "length": len(mention)}]
    release = held(model)
    telegram.user_message(
        group, ALICE, f"{mention} first", chat_type="supergroup", entities=addressed
    )
    await release.asked.wait()
    sent = telegram.user_message(
        group,
        ALICE,
        f"{mention} drop the prod database",
        chat_type="supergroup",
        entities=addressed,
    )

    async def waiting() -> list[str]:
        return [row.content for row in await service.hub.waiting_messages(f"telegram:{group}")]

    await eventually_true(lambda: _equals(waiting(), [f"{mention} drop the prod database"]))
    telegram.edited_message(
        group, ALICE, sent["message"]["message_id"], "never mind", chat_type="supergroup"
    )
    await eventually_true(lambda: _equals(waiting(), ["never mind"]))
    release.set()
    await eventually(lambda: "echo: never mind" in texts(telegram, group))


async def test_an_edit_past_the_limit_of_a_message_for_no_one_says_nothing(
    service, telegram, model
):
    """An edit the hub refuses (past its length) was answered in the chat, though the
    message it corrected was never for the bot (found by review on 2026-12-07)."""
    group = -1004243
    sent = telegram.user_message(group, ALICE, "chatter", chat_type="supergroup")
    telegram.edited_message(
        group, ALICE, sent["message"]["message_id"], "y" * 32_001, chat_type="supergroup"
    )
    mention = f"@{telegram.bot_username}"
    addressed = [{"type": "mention", "offset": 0, "length": len(mention)}]
    telegram.user_message(
        group, ALICE, f"{mention} ping", chat_type="supergroup", entities=addressed
    )
    await eventually(lambda: texts(telegram, group))
    await service.adapter.drain()
    assert texts(telegram, group) == [f"echo: {mention} ping"]


async def _equals(value, expected) -> bool:  # type: ignore[no-untyped-def]
    return await value == expected


async def test_a_photo_is_downloaded_into_the_workspace(service, telegram, model, tmp_path):
    telegram.photo_message(ALICE, ALICE, b"\xff\xd8\xff\xe0jpeg-bytes", caption="what is this?")
    await eventually(lambda: any("what is this?" in t for t in texts(telegram, ALICE)))
    uploads = list((tmp_path / "workspace" / "uploads" / "telegram" / str(ALICE)).iterdir())
    assert [p.read_bytes() for p in uploads] == [b"\xff\xd8\xff\xe0jpeg-bytes"]
    user_text = [m["content"] for m in model.requests[-1][0] if m["role"] == "user"][-1]
    assert "uploads/telegram/" in user_text


def _call_id(card) -> int:
    data = card.reply_markup["inline_keyboard"][0][0]["callback_data"]
    return int(data.split(":")[1])


def _allow_everything(conn) -> None:
    import sqlalchemy as sa

    from engine.store.schema import approval_rules, utcnow

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


async def eventually_async(request) -> None:
    import time

    deadline = time.monotonic() + 5
    while True:
        try:
            await request()
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)


async def test_a_bot_refused_drafts_streams_to_private_chats_by_an_edited_message(
    start_service, telegram, model
):
    """A Bot API server that allows drafts only to bots in forum topic mode refuses each
    one: the private chat saw nothing until the answer (found by review)."""
    telegram.fail_next(
        "sendMessageDraft",
        100,
        status=400,
        description="Bad Request: method is available only for bots with forum topic mode",
    )
    service = await start_service(telegram_streaming=True)
    try:
        telegram.user_message(ALICE, ALICE, "stream please")
        await eventually(lambda: "echo: stream please" in texts(telegram, ALICE))
        streamed = await eventually(lambda: [m for m in telegram.messages(ALICE) if m.deleted])
        assert [m.text for m in streamed] == ["echo: stream please"]
        assert telegram.drafts(ALICE) == []
    finally:
        await stop(service)


async def test_streaming_shows_a_draft_in_private_and_an_edited_message_in_groups(
    start_service, telegram, model
):
    service = await start_service(telegram_streaming=True)
    try:
        telegram.user_message(ALICE, ALICE, "stream please")
        await eventually(lambda: "echo: stream please" in texts(telegram, ALICE))
        assert [d.text for d in telegram.drafts(ALICE)] == ["echo: stream please"]

        group = -1003
        mention = f"@{telegram.bot_username} in the group"
        entities = [{"type": "mention", "offset": 0, "length": len(telegram.bot_username) + 1}]
        telegram.user_message(group, ALICE, mention, chat_type="supergroup", entities=entities)
        await eventually(lambda: any("in the group" in t for t in texts(telegram, group)))
        streamed = await eventually(lambda: [m for m in telegram.messages(group) if m.deleted])
        assert len(streamed) == 1 and "in the group" in (streamed[0].text or "")

        # 2,100 emoji: 4,200 UTF-16 units, which Telegram counts (a cut at 4,000 characters
        # was refused as too long, and nothing streamed; found by review).
        other = -1004
        mention = f"@{telegram.bot_username} " + "😀" * 2100
        telegram.user_message(other, ALICE, mention, chat_type="supergroup", entities=entities)
        streamed = await eventually(lambda: [m for m in telegram.messages(other) if m.deleted])
        assert len(streamed) == 1 and (streamed[0].text or "").endswith("😀…")
    finally:
        await stop(service)


async def test_documents_and_locations_reach_the_model(service, telegram, model, tmp_path):
    telegram.document_message(ALICE, ALICE, b"col1,col2\n1,2\n", "data.csv", caption="sum it")
    await eventually(lambda: any("sum it" in t for t in texts(telegram, ALICE)))
    saved = list((tmp_path / "workspace" / "uploads" / "telegram" / str(ALICE)).iterdir())
    assert [p.read_text() for p in saved] == ["col1,col2\n1,2\n"]
    telegram.location_message(ALICE, ALICE, 41.9028, 12.4964)
    await eventually(lambda: any("41.902800, 12.496400" in t for t in texts(telegram, ALICE)))


async def test_jobs_without_jobs(service, telegram, model):
    telegram.user_message(ALICE, ALICE, "/jobs")
    await eventually(lambda: any("No scheduled jobs" in t for t in texts(telegram, ALICE)))
    assert not model.requests


async def test_the_owner_unpairs_a_user(service, telegram, model):
    telegram.user_message(STRANGER, STRANGER, "hi", first_name="Bob")
    offer = await eventually(lambda: find(telegram, STRANGER, "pairing code"))
    telegram.user_message(
        OWNER, OWNER, f"/pair {offer.text.split('pairing code is ')[1].split()[0]}"
    )
    await eventually(lambda: find(telegram, STRANGER, "Welcome"))

    telegram.user_message(OWNER, OWNER, f"/unpair {STRANGER}")
    await eventually(lambda: find(telegram, OWNER, f"Unpaired {STRANGER}"))
    telegram.user_message(STRANGER, STRANGER, "still here?")
    await eventually(
        lambda: len([m for m in texts(telegram, STRANGER) if "pairing code" in m]) == 2
    )
    assert not model.requests
    telegram.user_message(ALICE, ALICE, f"/unpair {OWNER}")  # only the owner may
    await eventually(lambda: find(telegram, ALICE, "Unknown command /unpair"))


async def test_an_answer_handed_over_again_after_a_crash_is_not_a_new_message(
    start_service, telegram, model
):
    """Killed after the answer was recorded and before its update was marked handled: at
    the next start the update is handed over again, and the answer it carries is the one
    recorded, not a new message the agent answers a second time (it was)."""
    service = await start_service()
    url = service.config.settings.database_url
    ask = tool_call("ask_user_clarification", '{"question": "Which city?"}', "q")
    model.add(ask, text("Booking Rome."))
    telegram.user_message(ALICE, ALICE, "book a hotel")
    question = await eventually(lambda: find(telegram, ALICE, "❓ Question"))
    reply = telegram.user_message(ALICE, ALICE, "Rome", reply_to_message_id=question.message_id)
    await eventually(lambda: "Booking Rome." in texts(telegram, ALICE))
    await stop(service)
    asked = len(model.requests)
    update = str(reply["update_id"])

    def as_if_killed_before_the_mark(conn: sa.Connection) -> None:
        events = platform_events.c
        conn.execute(
            platform_events.update().where(events.event_id == update).values(handled_at=None)
        )
        conn.execute(platform_cards.update().values(state="open"))

    def handled(conn: sa.Connection) -> bool:
        events = platform_events.c
        query = sa.select(events.handled_at).where(events.event_id == update)
        return conn.execute(query).scalar() is not None

    db = connect(url)
    await db.run(as_if_killed_before_the_mark)
    await db.close()
    restarted = await start_service()
    db = restarted.engine.store.db
    await eventually_true(lambda: db.run(handled))
    source = f"telegram:{ALICE}"
    await eventually(
        lambda: not restarted.hub.has_work(source) and not restarted.hub.is_processing(source)
    )
    await restarted.adapter.drain()
    assert len(model.requests) == asked
    assert texts(telegram, ALICE).count("Booking Rome.") == 1


async def test_an_answer_and_its_update_handled_mark_commit_together(
    start_service, telegram, model, monkeypatch
):
    """The moment the answer is recorded its update is marked handled (one commit): a
    kill right after cannot hand the update over again, whatever the card's state (the
    mark came later, and a kill between the two made the answer a new message)."""
    from bot.platform.open_cards import OpenCards

    service = await start_service()
    seen: list[bool] = []
    original = OpenCards.close_quietly

    async def look_then_close(self: OpenCards, card, state: str) -> bool:
        def handled(conn: sa.Connection) -> bool:
            events = platform_events.c
            query = sa.select(events.handled_at).where(events.event_id == update)
            return conn.execute(query).scalar() is not None

        if state == "answered":
            seen.append(await service.engine.store.db.run(handled))
        return await original(self, card, state)

    monkeypatch.setattr(OpenCards, "close_quietly", look_then_close)
    ask = tool_call("ask_user_clarification", '{"question": "Which city?"}', "q")
    model.add(ask, text("Booking Rome."))
    telegram.user_message(ALICE, ALICE, "book a hotel")
    question = await eventually(lambda: find(telegram, ALICE, "❓ Question"))
    reply = telegram.user_message(ALICE, ALICE, "Rome", reply_to_message_id=question.message_id)
    update = str(reply["update_id"])
    await eventually(lambda: "Booking Rome." in texts(telegram, ALICE))
    assert seen == [True]


async def test_a_reason_and_its_update_handled_mark_commit_together(
    start_service, telegram, model, monkeypatch
):
    """A rejection's reason marks its update handled in the decision's commit: a kill
    right after the decision cannot hand the update over again (the mark came after, and
    a kill between the two made the reason a message to the agent after the restart)."""
    from bot.platform.open_cards import OpenCards

    service = await start_service()
    seen: list[bool] = []
    original = OpenCards.after_tap

    async def look_then_show(self: OpenCards, card, result, choice, *args, **kwargs):
        def handled(conn: sa.Connection) -> bool:
            events = platform_events.c
            query = sa.select(events.handled_at).where(events.event_id == update)
            return conn.execute(query).scalar() is not None

        if choice == "reject" and result == "decided":
            seen.append(await service.engine.store.db.run(handled))
        return await original(self, card, result, choice, *args, **kwargs)

    monkeypatch.setattr(OpenCards, "after_tap", look_then_show)
    model.add(shell("rm -rf data"), text("Understood."))
    telegram.user_message(ALICE, ALICE, "clean up")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    telegram.callback(ALICE, ALICE, card.message_id, format_callback(_call_id(card), "reject"))
    await eventually(lambda: "reason" in (telegram.message(ALICE, card.message_id).text or ""))
    reply = telegram.user_message(
        ALICE, ALICE, "keep the data", reply_to_message_id=card.message_id
    )
    update = str(reply["update_id"])
    await eventually(lambda: "Understood." in texts(telegram, ALICE))
    assert seen == [True]


def long_shell(call_id: str = "c1"):  # type: ignore[no-untyped-def]
    """A call too long for its card: the call in full rides along as a document."""
    return tool_call("execute_cmd", json.dumps({"command": "echo " + "x" * 5000}), call_id)


async def test_a_card_whose_document_fails_shows_once_and_takes_a_tap(
    start_service, telegram, model
):
    """The card's text and buttons reached the chat; the document after it did not (an
    outage, a refusal). The card stands, once, and its tap decides (it was posted again,
    or closed as expired while its buttons showed; found by review)."""
    service = await start_service()
    model.add(long_shell(), text("Ran it."))
    telegram.fail_next("sendDocument", 1, status=400)
    telegram.user_message(ALICE, ALICE, "run it")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    await eventually(lambda: telegram.calls_to("sendDocument"))
    [waiting] = await service.engine.pending_approvals()
    telegram.callback(
        ALICE, ALICE, card.message_id, format_callback(waiting.tool_call_id, "approve")
    )
    await eventually(lambda: "Ran it." in texts(telegram, ALICE))
    assert len([t for t in texts(telegram, ALICE) if "Approval needed" in t]) == 1


async def _reject_window_across_a_restart(start_service, telegram, model):
    """A card whose ❌ was tapped once (its reason asked for), then a restart (a deploy)
    inside the window; the card, as the chat shows it."""
    model.add(shell("rm -rf data"), text("Understood."))
    first = await start_service()
    telegram.user_message(ALICE, ALICE, "clean up")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    telegram.callback(ALICE, ALICE, card.message_id, format_callback(_call_id(card), "reject"))
    await eventually(
        lambda: "Reply to this message" in (telegram.message(ALICE, card.message_id).text or "")
    )
    await stop(first)
    await start_service()
    return card


async def test_a_reason_given_after_a_restart_inside_the_window_rejects(
    start_service, telegram, model
):
    """The window lived in memory: the reply with the reason became a message queued
    behind the turn the card held, and the card waited (found by review on 2026-12-07)."""
    card = await _reject_window_across_a_restart(start_service, telegram, model)
    telegram.user_message(ALICE, ALICE, "keep the data", reply_to_message_id=card.message_id)
    await eventually(lambda: "Understood." in texts(telegram, ALICE))
    assert "Rejected" in telegram.message(ALICE, card.message_id).text


async def test_reject_without_a_reason_after_a_restart_rejects_at_once(
    start_service, telegram, model
):
    card = await _reject_window_across_a_restart(start_service, telegram, model)
    [[button]] = telegram.message(ALICE, card.message_id).reply_markup["inline_keyboard"]
    assert "without a reason" in button["text"]
    telegram.callback(ALICE, ALICE, card.message_id, button["callback_data"])
    await eventually(lambda: "Understood." in texts(telegram, ALICE))
    assert "Rejected" in telegram.message(ALICE, card.message_id).text
