"""A group Telegram makes a supergroup (a new chat id), both bindings: the conversation
goes on where it was, and whatever was meant for the group reaches the supergroup.
"""

from __future__ import annotations

import json
import time

import sqlalchemy as sa

from bot.telegram.tables import telegram_chat_moves
from engine.llm.scripted import text, tool_call
from tests.bot.telegram_contract.conftest import ALICE, eventually, find, texts

GROUP = -4242  # a basic group's id
SUPERGROUP = -1_000_000_004_242  # what Telegram makes it: -100…


def ask(telegram, chat_id: int, words: str, chat_type: str) -> None:
    mention = f"@{telegram.bot_username} {words}"
    entities = [{"type": "mention", "offset": 0, "length": len(telegram.bot_username) + 1}]
    telegram.user_message(chat_id, ALICE, mention, chat_type=chat_type, entities=entities)


def said_to_the_model(model) -> str:
    return json.dumps([m for m in model.requests[-1][0] if m["role"] == "user"])


async def sources(service) -> list[str]:
    def read(conn):
        return sorted(conn.execute(sa.text("SELECT DISTINCT source FROM chat_sessions")).scalars())

    return await service.engine.store.db.run(read)


async def test_the_supergroup_goes_on_with_the_groups_conversation(start_service, telegram, model):
    service = await start_service()
    model.add(text("Noted: the launch is on Friday."))
    ask(telegram, GROUP, "remember the launch is on Friday", "group")
    await eventually(lambda: find(telegram, GROUP, "Noted"))

    moved_at = time.monotonic()
    assert telegram.migrate_group(GROUP, ALICE) == SUPERGROUP
    model.add(text("It is on Friday."))
    ask(telegram, SUPERGROUP, "when is the launch?", "supergroup")

    await eventually(lambda: find(telegram, SUPERGROUP, "It is on Friday."))
    assert "the launch is on Friday" in said_to_the_model(model)  # the group's history
    assert await sources(service) == [f"telegram:{GROUP}"]  # one conversation, not two
    to_the_group = [c for c in telegram.calls if c.params.get("chat_id") in (GROUP, str(GROUP))]
    assert all(c.time < moved_at for c in to_the_group)  # nothing to the old id since


async def test_a_card_decided_after_the_move_answers_in_the_supergroup(
    start_service, telegram, model, tmp_path
):
    await start_service()
    model.add(
        tool_call("execute_cmd", json.dumps({"command": "echo ran >> runs.log"}), "c1"),
        text("Logged."),
    )
    ask(telegram, GROUP, "log it", "group")
    card = await eventually(lambda: find(telegram, GROUP, "Approval needed"))
    telegram.migrate_group(GROUP, ALICE)

    # The card stays in the old group's history, and its buttons still work there.
    buttons = [b for row in card.reply_markup["inline_keyboard"] for b in row]
    data = next(b["callback_data"] for b in buttons if b["text"].startswith("✅"))
    telegram.callback(GROUP, ALICE, card.message_id, data)

    await eventually(lambda: "Logged." in texts(telegram, SUPERGROUP))
    assert (tmp_path / "workspace" / "runs.log").read_text() == "ran\n"
    await eventually(lambda: len(telegram.calls_to("editMessageText")) == 2)  # card, progress
    # The group's messages cannot change any more; the supergroup's message with the same
    # number (here the answer, 2 as the group's progress line) is another message.
    assert telegram.message(GROUP, card.message_id).text == card.text
    assert texts(telegram, SUPERGROUP) == ["Logged."]


async def test_a_card_shown_in_the_supergroup_is_decided_there(
    start_service, telegram, model, tmp_path
):
    await start_service()
    model.add(text("Hello."))
    ask(telegram, GROUP, "hello", "group")
    await eventually(lambda: find(telegram, GROUP, "Hello."))
    telegram.migrate_group(GROUP, ALICE)
    model.add(
        tool_call("execute_cmd", json.dumps({"command": "echo ran >> runs.log"}), "c1"),
        text("Logged."),
    )
    ask(telegram, SUPERGROUP, "log it", "supergroup")
    card = await eventually(lambda: find(telegram, SUPERGROUP, "Approval needed"))

    buttons = [b for row in card.reply_markup["inline_keyboard"] for b in row]
    data = next(b["callback_data"] for b in buttons if b["text"].startswith("✅"))
    telegram.callback(SUPERGROUP, ALICE, card.message_id, data)

    await eventually(lambda: "Logged." in texts(telegram, SUPERGROUP))
    await eventually(lambda: "Approved" in telegram.message(SUPERGROUP, card.message_id).text)
    assert (tmp_path / "workspace" / "runs.log").read_text() == "ran\n"
    assert [a.get("text") for a in telegram.callback_answers] == [None]


async def test_a_move_nobody_told_is_learnt_from_telegrams_answer(start_service, telegram, model):
    """The move's messages never came (the bot was not in the chat then, or they were
    lost): the first reply to the old id is refused naming the new one, and goes there."""
    service = await start_service()
    model.add(text("First."))
    ask(telegram, GROUP, "hello", "group")
    await eventually(lambda: find(telegram, GROUP, "First."))
    telegram.migrate_group(GROUP, ALICE, announced=False)

    await service.adapter.sender.say(f"telegram:{GROUP}", "The morning briefing.")

    assert "The morning briefing." in texts(telegram, SUPERGROUP)
    moves = await service.engine.store.db.run(
        lambda conn: conn.execute(sa.select(telegram_chat_moves)).all()
    )
    assert [(row.old_chat_id, row.new_chat_id) for row in moves] == [(GROUP, SUPERGROUP)]


async def test_the_move_holds_after_a_restart(start_service, telegram, model):
    first = await start_service()
    model.add(text("Noted."))
    ask(telegram, GROUP, "remember the code word is heron", "group")
    await eventually(lambda: find(telegram, GROUP, "Noted."))
    telegram.migrate_group(GROUP, ALICE)
    await eventually(lambda: telegram.pending_updates() == [])
    await first.adapter.drain()
    await first.stop()

    second = await start_service()
    model.add(text("Heron."))
    ask(telegram, SUPERGROUP, "what is the code word?", "supergroup")

    await eventually(lambda: find(telegram, SUPERGROUP, "Heron."))
    assert "heron" in said_to_the_model(model)
    assert await sources(second) == [f"telegram:{GROUP}"]


async def test_a_refusal_naming_no_usable_chat_fails_the_reply_once(start_service, telegram, model):
    """Telegram's 400 names junk (a string, a private chat's id, the group itself): the
    reply fails with Telegram's reason, as any 400, and is not sent again."""
    service = await start_service()
    model.add(text("First."))
    ask(telegram, GROUP, "hello", "group")
    await eventually(lambda: find(telegram, GROUP, "First."))
    for junk in ("abc", 555, GROUP, True):
        telegram.migrate_group(GROUP, ALICE, announced=False, named=junk)
        before = len(telegram.calls_to("sendMessage"))

        await service.adapter.sender.say(f"telegram:{GROUP}", "Anyone there?")

        assert len(telegram.calls_to("sendMessage")) == before + 1  # asked once, not again
    shown = telegram.messages(GROUP) + telegram.messages(SUPERGROUP)
    assert "Anyone there?" not in [m.text for m in shown]
