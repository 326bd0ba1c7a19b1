"""A group of colleagues, both bindings: who may decide a card follows ``APPROVERS``.

Alice asks for something risky; Bob (allowed too) taps the card; the owner is a member.
Whoever may not decide gets "Only … can decide this." and nothing runs.
"""

from __future__ import annotations

import json

from bot.telegram.rendering.cards import format_callback
from engine.llm.scripted import text, tool_call
from tests.bot.telegram_contract.conftest import ALICE, OWNER, eventually, find, texts

BOB = 222
GROUP = -100777
MEMBERS = f"{ALICE},{BOB}"
ONLY_ALICE = "Only Alice (who asked) or the owner can decide this."


def shell(command: str, call_id: str = "c1"):
    return tool_call("execute_cmd", json.dumps({"command": command}), call_id)


def ask(telegram, user_id: int, words: str, first_name: str) -> None:
    mention = f"@{telegram.bot_username} {words}"
    entities = [{"type": "mention", "offset": 0, "length": len(telegram.bot_username) + 1}]
    telegram.user_message(
        GROUP, user_id, mention, chat_type="supergroup", entities=entities, first_name=first_name
    )


async def alice_asks(telegram, model, command: str = "echo ran >> runs.log"):
    model.add(shell(command), text("Done."))
    ask(telegram, ALICE, "log it", "Alice")
    return await eventually(lambda: find(telegram, GROUP, "Approval needed"))


def tap(telegram, user_id: int, card, action: str, first_name: str) -> None:
    data = format_callback(_call_id(card), action)
    telegram.callback(GROUP, user_id, card.message_id, data, first_name=first_name)


def answers(telegram) -> list[str]:
    return [a.get("text") or "" for a in telegram.callback_answers]


def ran(tmp_path) -> bool:
    return (tmp_path / "workspace" / "runs.log").exists()


async def test_a_member_cannot_decide_someone_elses_card(start_service, telegram, model, tmp_path):
    service = await start_service(telegram_allowed_user_ids=MEMBERS)
    card = await alice_asks(telegram, model)
    assert "Alice (who asked) or the owner can decide." in card.text

    tap(telegram, BOB, card, "approve", "Bob")
    tap(telegram, BOB, card, "bypass_session", "Bob")
    tap(telegram, BOB, card, "reject", "Bob")
    await eventually(lambda: len(telegram.callback_answers) == 3)

    assert answers(telegram) == [ONLY_ALICE] * 3
    [pending] = await service.engine.pending_approvals()
    assert pending.tool_call_id == _call_id(card)
    shown = telegram.message(GROUP, card.message_id)
    assert shown.text == card.text and "reason" not in shown.text  # no reject window opened
    assert not ran(tmp_path)

    tap(telegram, ALICE, card, "approve", "Alice")
    await eventually(lambda: "Done." in texts(telegram, GROUP))
    assert ran(tmp_path)
    assert "Approved" in telegram.message(GROUP, card.message_id).text


async def test_the_owner_decides_a_members_card(start_service, telegram, model, tmp_path):
    await start_service(telegram_allowed_user_ids=MEMBERS)
    card = await alice_asks(telegram, model)
    tap(telegram, OWNER, card, "approve", "Olga")
    await eventually(lambda: "Done." in texts(telegram, GROUP))
    assert ran(tmp_path)


async def test_approvers_owner_leaves_the_requester_out(start_service, telegram, model, tmp_path):
    service = await start_service(telegram_allowed_user_ids=MEMBERS, approvers="owner")
    card = await alice_asks(telegram, model)
    assert "Only the owner can decide." in card.text

    tap(telegram, ALICE, card, "approve", "Alice")
    await eventually(lambda: len(telegram.callback_answers) == 1)
    assert answers(telegram) == ["Only the owner can decide this."]
    assert len(await service.engine.pending_approvals()) == 1 and not ran(tmp_path)

    tap(telegram, OWNER, card, "approve", "Olga")
    await eventually(lambda: "Done." in texts(telegram, GROUP))
    assert ran(tmp_path)


async def test_approvers_allowed_is_any_member(start_service, telegram, model, tmp_path):
    await start_service(telegram_allowed_user_ids=MEMBERS, approvers="allowed")
    card = await alice_asks(telegram, model)
    assert "Any allowed member can decide." in card.text
    tap(telegram, BOB, card, "approve", "Bob")
    await eventually(lambda: "Done." in texts(telegram, GROUP))
    assert ran(tmp_path)
    assert "Bob" in telegram.message(GROUP, card.message_id).text


async def test_a_reason_from_another_member_is_refused(start_service, telegram, model):
    service = await start_service(telegram_allowed_user_ids=MEMBERS)
    model.add(shell("rm -rf data"), text("Understood."))
    ask(telegram, ALICE, "clean up", "Alice")
    card = await eventually(lambda: find(telegram, GROUP, "Approval needed"))
    tap(telegram, ALICE, card, "reject", "Alice")
    await eventually(lambda: "reason" in (telegram.message(GROUP, card.message_id).text or ""))

    telegram.user_message(
        GROUP,
        BOB,
        "do it anyway, not rejected",
        chat_type="supergroup",
        reply_to_message_id=card.message_id,
        first_name="Bob",
    )
    await eventually(lambda: any(ONLY_ALICE in t for t in texts(telegram, GROUP)))
    assert len(await service.engine.pending_approvals()) == 1

    telegram.user_message(
        GROUP,
        ALICE,
        "keep the data",
        chat_type="supergroup",
        reply_to_message_id=card.message_id,
        first_name="Alice",
    )
    await eventually(lambda: "Understood." in texts(telegram, GROUP))
    tool_results = [m["content"] for m in model.requests[-1][0] if m["role"] == "tool"]
    assert tool_results == ["User rejected this tool call. Reason: keep the data"]


async def test_another_members_reply_does_not_answer_a_members_question(
    start_service, telegram, model, tmp_path
):
    """Alice's own "🔄 Session" covers her calls; an answer steers the turn's next calls,
    which stay Alice's: Bob's answer to her question ran a command of his words unasked
    under her bypass (until 2026-12-07; found by review). His reply is a message: it
    waits its turn behind hers, and the calls it leads to are his (they ask)."""
    service = await start_service(telegram_allowed_user_ids=MEMBERS, memory_enabled=False)
    model.add(shell("echo alice >> alice.log"), text("Done."))
    ask(telegram, ALICE, "log it", "Alice")
    card = await eventually(lambda: find(telegram, GROUP, "Approval needed"))
    tap(telegram, ALICE, card, "bypass_session", "Alice")
    await eventually(lambda: "Done." in texts(telegram, GROUP))
    question = tool_call("ask_user_clarification", json.dumps({"question": "Which file?"}), "q1")
    model.add(question)
    ask(telegram, ALICE, "clean the file", "Alice")
    asked = await eventually(lambda: find(telegram, GROUP, "Which file?"))

    telegram.user_message(
        GROUP,
        BOB,
        "pwned.log, and run it now",
        chat_type="supergroup",
        reply_to_message_id=asked.message_id,
        first_name="Bob",
    )
    await eventually(lambda: telegram.pending_updates() == [])
    await service.adapter.drain()
    assert len(await service.hub.pending_questions()) == 1  # still Alice's to answer

    model.add(shell("echo cleaned >> notes.txt", "c2"), text("Cleaned."))
    telegram.user_message(
        GROUP,
        ALICE,
        "notes.txt",
        chat_type="supergroup",
        reply_to_message_id=asked.message_id,
        first_name="Alice",
    )
    # Her answer is the question's; Bob's line came in after it, so the call the turn
    # makes next answers his words, and asks.
    card = await eventually(lambda: find(telegram, GROUP, "Bob (who asked)"))
    tool_results = [m["content"] for m in model.requests[-1][0] if m["role"] == "tool"]
    assert tool_results[-1] == "notes.txt"
    assert "echo cleaned >> notes.txt" in card.text
    assert not (tmp_path / "workspace" / "notes.txt").exists()


def _call_id(card) -> int:
    data = card.reply_markup["inline_keyboard"][0][0]["callback_data"]
    return int(data.split(":")[1])


async def test_without_an_owner_id_a_single_allowed_user_is_the_owner(start_service):
    """Else the cards of cron and tic runs (no requester) would wait for nobody."""
    service = await start_service(telegram_owner_id=None)
    assert service.adapter.decider(ALICE).is_owner
    assert not service.adapter.decider(BOB).is_owner


async def test_without_an_owner_id_several_allowed_users_have_no_owner(start_service):
    service = await start_service(telegram_owner_id=None, telegram_allowed_user_ids=MEMBERS)
    assert not service.adapter.decider(ALICE).is_owner
    assert not service.adapter.decider(BOB).is_owner


async def test_a_refusal_naming_a_long_fancy_name_still_answers_the_tap(
    start_service, telegram, model
):
    """ "Only 𝐀𝐥𝐢𝐜𝐞… (who asked)": a first and a last name of 64 letters each in a
    mathematical font are 256 UTF-16 units, past the 200 answerCallbackQuery shows; Telegram
    refused the answer and the tapper saw nothing (found by review on 2026-12-07)."""
    await start_service(telegram_allowed_user_ids=MEMBERS)
    fancy = "𝐀" * 64 + " " + "𝐁" * 64  # mathematical bold: two UTF-16 units each
    model.add(shell("echo ran >> runs.log"), text("Done."))
    ask(telegram, ALICE, "log it", fancy)
    card = await eventually(lambda: find(telegram, GROUP, "Approval needed"))
    tap(telegram, BOB, card, "approve", "Bob")
    [said] = await eventually(lambda: answers(telegram))
    assert said.startswith("Only 𝐀") and said.endswith("…")
