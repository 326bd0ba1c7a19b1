"""Issue 16, defects 5 and 6, through each binding and the fake Bot API.

Every callback query gets exactly one answerCallbackQuery, whatever its data; junk in an
update's fields costs the field, not the message; a failure of ours is one plain sentence
with an error id (the log line with the traceback carries the same id), never the
exception.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest

from bot.delivery import CardStore
from bot.platform.cards import EXPIRED
from bot.platform.failures import SORRY_MESSAGE, SORRY_TAP
from bot.telegram.rendering.cards import format_callback
from engine.llm.scripted import tool_call
from tests.bot.junk import JunkTelegramServer, exception_texts
from tests.bot.telegram_contract.conftest import (
    ALICE,
    OWNER,
    STRANGER,
    eventually,
    find,
    texts,
)

NOT_ALLOWED = "You are not allowed to decide here."
ERROR_ID = re.compile(r"\(error ([0-9a-f]{6})\)")


@pytest.fixture
def telegram() -> Any:
    """A fake Bot API relaying junk, lone surrogates included."""
    server = JunkTelegramServer().start()
    yield server
    server.stop()


def push_query(telegram: JunkTelegramServer, query_id: str, **fields: Any) -> None:
    """A callback query from ``fields`` (``None`` leaves a field out)."""
    query = {
        "id": query_id,
        "from": {"id": ALICE, "first_name": "Alice"},
        "message": {"message_id": 1, "chat": {"id": ALICE, "type": "private"}},
        "chat_instance": "1",
        "data": "ap1:1:a",
        **fields,
    }
    telegram.push_update({"callback_query": {k: v for k, v in query.items() if v is not None}})


def answer_texts(telegram: JunkTelegramServer, query_id: str) -> list[str | None]:
    return [
        call.params.get("text")
        for call in telegram.calls_to("answerCallbackQuery")
        if call.params.get("callback_query_id") == query_id
    ]


async def answered(telegram: JunkTelegramServer, *query_ids: str) -> None:
    await eventually(lambda: all(answer_texts(telegram, q) for q in query_ids) or None)


def shell(command: str) -> Any:
    return tool_call("execute_cmd", json.dumps({"command": command}), "c1")


def card_id(card: Any) -> int:
    return int(card.reply_markup["inline_keyboard"][0][0]["callback_data"].split(":")[1])


# --- defect 6: callbacks ------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    ["ap1:" + "9" * 58 + ":a", f"ap1:{2**64 + 1}:a", f"ap1:{2**63}:a"],
    ids=["58-nines", "2^64+1", "2^63"],
)
async def test_the_chaos_runs_taps_are_answered_expired(
    service, telegram, data: str, caplog: pytest.LogCaptureFixture
) -> None:
    # They were never answered: the lookup overflowed SQLite's INTEGER first.
    push_query(telegram, "big", data=data)
    await answered(telegram, "big")
    await service.adapter.drain()
    assert answer_texts(telegram, "big") == [EXPIRED]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


JUNK_QUERIES: dict[str, dict[str, Any]] = {
    "no data": {"data": None},
    "data a number": {"data": 5},
    "data a list": {"data": ["ap1:1:a"]},
    "empty data": {"data": ""},
    "oversized": {"data": "ap1:1:a" + "x" * 300},
    "unknown prefix": {"data": "zz9:1:a"},
    "negative id": {"data": "ap1:-1:a"},
    "zero id": {"data": "ap1:0:a"},
    "junk choice": {"data": "ap1:1:💥"},
    "lone surrogate": {"data": "ap1:1:\ud800"},
    "jobs, junk": {"data": "jb1:x:p"},
    "jobs, past 64 bits": {"data": f"jb1:{2**64}:p"},
    "no message": {"message": None},
    "message junk": {"message": "gone"},
    "no sender": {"from": None},
    "sender junk": {"from": {"id": "alice"}},
    "a stranger": {"from": {"id": STRANGER, "first_name": "Mallory"}},
}


async def test_every_junk_callback_gets_exactly_one_answer(service, telegram) -> None:
    for name, fields in JUNK_QUERIES.items():
        push_query(telegram, name, **fields)
    await answered(telegram, *JUNK_QUERIES)
    await service.adapter.drain()
    for name in JUNK_QUERIES:
        assert answer_texts(telegram, name) == [EXPIRED], name


async def test_a_real_card_answers_each_tap_once(service, telegram, model) -> None:
    model.add(shell("echo x"))
    telegram.user_message(ALICE, ALICE, "go")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    tool_call_id = card_id(card)
    message = {"message_id": card.message_id, "chat": {"id": ALICE, "type": "private"}}
    approve = format_callback(tool_call_id, "approve")

    push_query(telegram, "stranger", data=approve, message=message, **{"from": {"id": STRANGER}})
    push_query(telegram, "nobody", data=approve, message=message, **{"from": None})
    push_query(telegram, "elsewhere", data=approve)  # the right id, another message
    push_query(telegram, "choice", data=f"ap1:{tool_call_id}:q", message=message)
    await answered(telegram, "stranger", "nobody", "elsewhere", "choice")
    push_query(telegram, "alice", data=approve, message=message)
    await answered(telegram, "alice")
    await eventually(lambda: "Approved" in (telegram.message(ALICE, card.message_id).text or ""))
    push_query(telegram, "again", data=approve, message=message)  # resolved meanwhile
    await answered(telegram, "again")
    await service.adapter.drain()

    assert answer_texts(telegram, "stranger") == [NOT_ALLOWED]
    assert answer_texts(telegram, "nobody") == [NOT_ALLOWED]
    assert answer_texts(telegram, "elsewhere") == [EXPIRED]
    assert answer_texts(telegram, "choice") == [EXPIRED]
    assert answer_texts(telegram, "alice") == [None]
    assert answer_texts(telegram, "again") == [EXPIRED]


async def test_a_failure_before_the_answer_is_the_answer_with_an_error_id(
    service, telegram, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(_store: CardStore, tool_call_id: int) -> None:
        raise RuntimeError("database detail nobody should see")

    monkeypatch.setattr(CardStore, "get", broken)  # whichever object holds the store
    push_query(telegram, "q")
    await answered(telegram, "q")
    await service.adapter.drain()

    [text] = answer_texts(telegram, "q")
    assert text is not None and ERROR_ID.search(text)
    error = ERROR_ID.search(text).group(1)  # type: ignore[union-attr]
    assert text == SORRY_TAP.format(error=error)
    assert_logged_with_traceback(caplog, error, "database detail nobody should see")


async def test_a_failure_after_the_answer_is_said_in_the_chat(
    service, telegram, model, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    model.add(shell("echo x"))
    telegram.user_message(ALICE, ALICE, "go")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("hub detail nobody should see")

    monkeypatch.setattr(service.hub, "decide", broken)
    telegram.callback(ALICE, ALICE, card.message_id, format_callback(card_id(card), "approve"))

    sorry = await eventually(lambda: find(telegram, ALICE, "Sorry, something went wrong"))
    await service.adapter.drain()
    assert len(telegram.calls_to("answerCallbackQuery")) == 1  # at once, and only once
    error = ERROR_ID.search(sorry.text).group(1)  # type: ignore[union-attr]
    assert sorry.text == SORRY_TAP.format(error=error)
    assert_logged_with_traceback(caplog, error, "hub detail nobody should see")
    assert not exception_texts(texts(telegram, ALICE))


# --- defect 5: messages -------------------------------------------------------------


async def test_a_lone_surrogate_is_repaired_and_the_message_answered(service, telegram) -> None:
    # It got "⚠️ Your message could not be processed: UnicodeEncodeError: ...".
    telegram.user_message(ALICE, ALICE, "\ud800 hi", first_name="Al\udc00ice")
    await eventually(lambda: "echo: \ufffd hi" in texts(telegram, ALICE))
    assert not exception_texts(texts(telegram, ALICE))


async def test_a_stranger_with_a_lone_surrogate_in_the_name_gets_a_code(service, telegram) -> None:
    telegram.user_message(STRANGER, STRANGER, "hi", first_name="B\ud800b")
    offer = await eventually(lambda: find(telegram, STRANGER, "pairing code"))
    assert "B\ufffdb" in offer.text


@pytest.mark.parametrize("junk", [5, True, 1.5])
async def test_entities_that_are_junk_cost_only_the_entities(service, telegram, junk) -> None:
    # "entities": 5 raised TypeError in the adapter: the message got no answer at all.
    telegram.user_message(ALICE, ALICE, "hello", entities=junk)
    await eventually(lambda: "echo: hello" in texts(telegram, ALICE))


async def test_junk_in_many_fields_at_once_still_gets_the_answer(service, telegram) -> None:
    message = {
        "message_id": 5,
        "from": {"id": ALICE, "first_name": ["A"], "username": 7},
        "chat": {"id": ALICE, "type": 3},
        "text": "still here",
        "entities": 5,
        "reply_to_message": "nope",
        "location": {"latitude": "north"},
        "photo": "a photo",
        "document": [1, 2],
        "is_topic_message": "yes",
        "message_thread_id": 2**70,
    }
    telegram.push_update({"message": message})
    await eventually(lambda: "echo: still here" in texts(telegram, ALICE))


async def test_a_failure_while_handling_a_message_is_one_sentence_with_an_id(
    service, telegram, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("internal detail nobody should see")

    monkeypatch.setattr(service.hub, "send_message", broken)
    telegram.user_message(ALICE, ALICE, "hello")
    sorry = await eventually(lambda: find(telegram, ALICE, "Sorry"))
    error = ERROR_ID.search(sorry.text).group(1)  # type: ignore[union-attr]
    assert sorry.text == SORRY_MESSAGE.format(error=error)
    assert_logged_with_traceback(caplog, error, "internal detail nobody should see")

    telegram.user_message(ALICE, ALICE, "/help")  # the service goes on
    await eventually(lambda: any("/stop" in t for t in texts(telegram, ALICE)))
    assert not exception_texts(texts(telegram, ALICE))


@pytest.mark.parametrize(
    ("sender", "command", "reply"),
    [
        (ALICE, "/model ²", "not configured"),  # str.isdigit("²"), int("²") raised
        (ALICE, "/model " + "9" * 5000, "not configured"),  # int() refuses 5000 digits
        (OWNER, "/unpair " + "9" * 25, "Usage: /unpair <user_id>"),  # overflowed SQLite
        (OWNER, "/unpair ²", "Usage: /unpair <user_id>"),
    ],
)
async def test_numeric_command_arguments_that_are_junk(
    service, telegram, sender: int, command: str, reply: str
) -> None:
    telegram.user_message(sender, sender, command)
    await eventually(lambda: any(reply in t for t in texts(telegram, sender)))


def assert_logged_with_traceback(caplog: pytest.LogCaptureFixture, error: str, detail: str) -> None:
    """The id the person was told names one log line, and it carries the exception."""
    [record] = [r for r in caplog.records if f"(error {error})" in r.getMessage()]
    assert record.exc_info is not None and detail in str(record.exc_info[1])
