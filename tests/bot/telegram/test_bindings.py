"""One contract suite for both ``BotApi`` bindings (python-telegram-bot and aiogram).

Both run against the fake Bot API server over real HTTP, so what is checked is what
each library actually puts on the wire and how it reports Telegram's answers.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from bot.delivery import Gone, Refused
from bot.telegram.bindings.factory import make_bot_api
from bot.telegram.sending.api import (
    ALLOWED_UPDATES,
    BadRequest,
    BotApi,
    Forbidden,
    NetworkError,
    RetryAfter,
    ServerError,
    is_not_modified,
)
from tests.fakes.telegram_server import FakeTelegramServer, entity, inline_keyboard

TOKEN = "123456:TEST-token"
CHAT = 42
USER = 42


async def test_get_me(api: BotApi) -> None:
    me = await api.get_me()
    assert me["id"] == 123456
    assert me["is_bot"] is True
    assert me["username"] == "chathub_test_bot"


async def test_get_updates_with_offset_and_wake_up(api: BotApi, fake: FakeTelegramServer) -> None:
    pushed = fake.user_message(CHAT, USER, "/start", username="bob", first_name="Bob")
    updates = await api.get_updates(None, timeout=0)
    assert updates == [pushed]  # plain Bot API JSON, exactly as Telegram sent it
    message = updates[0]["message"]
    assert message["from"]["username"] == "bob"
    assert message["chat"] == {
        "id": CHAT,
        "type": "private",
        "first_name": "Bob",
        "username": "bob",
    }
    assert message["entities"] == [entity("bot_command", 0, 6)]
    assert fake.calls_to("getUpdates")[-1].params["allowed_updates"] == list(ALLOWED_UPDATES)

    offset = updates[-1]["update_id"] + 1
    loop = asyncio.get_running_loop()
    loop.call_later(0.1, fake.callback, CHAT, USER, message["message_id"], "go")
    started = time.monotonic()
    updates = await api.get_updates(offset, timeout=5)
    assert time.monotonic() - started < 2
    assert [set(u) for u in updates] == [{"update_id", "callback_query"}]
    query = updates[0]["callback_query"]
    assert (query["from"]["id"], query["data"]) == (USER, "go")
    assert [u["update_id"] for u in fake.pending_updates()] == [offset]  # the first confirmed


async def test_send_message_with_entities_keyboard_thread_and_reply(
    api: BotApi, fake: FakeTelegramServer
) -> None:
    question = fake.user_message(-100, USER, "q", chat_type="supergroup", message_thread_id=5)
    entities = [entity("bold", 0, 5), entity("pre", 6, 5, language="python")]
    keyboard = inline_keyboard([("Yes", "y:1"), ("No", "n:1")], [("Help", "help")])
    sent = await api.send_message(
        -100,
        "Hello print",
        entities=entities,
        reply_markup=keyboard,
        message_thread_id=5,
        reply_to_message_id=question["message"]["message_id"],
    )
    assert sent["message_id"] == 2
    assert sent["from"]["is_bot"] is True
    assert sent["chat"]["id"] == -100
    assert sent["text"] == "Hello print"
    assert sent["entities"] == entities
    assert sent["reply_markup"] == keyboard
    params = fake.calls_to("sendMessage")[0].params
    assert params["entities"] == entities
    assert params["reply_markup"] == keyboard
    assert params["message_thread_id"] == 5
    [seen] = fake.messages(-100)
    assert (seen.text, seen.entities, seen.reply_markup) == ("Hello print", entities, keyboard)
    assert (seen.message_thread_id, seen.reply_to_message_id) == (5, 1)


async def test_force_reply_markup(api: BotApi, fake: FakeTelegramServer) -> None:
    markup = {"force_reply": True, "input_field_placeholder": "Your answer"}
    await api.send_message(CHAT, "Name?", reply_markup=markup)
    assert fake.messages(CHAT)[0].reply_markup == markup


async def test_edit_and_not_modified(api: BotApi, fake: FakeTelegramServer) -> None:
    keyboard = inline_keyboard([("A", "a")])
    sent = await api.send_message(CHAT, "v1", reply_markup=keyboard)
    await api.edit_message_text(CHAT, sent["message_id"], "v2", reply_markup=keyboard)
    with pytest.raises(BadRequest) as caught:
        await api.edit_message_text(CHAT, sent["message_id"], "v2", reply_markup=keyboard)
    assert is_not_modified(caught.value)
    await api.edit_message_text(CHAT, sent["message_id"], "v3", entities=[entity("italic", 0, 2)])
    message = fake.message(CHAT, sent["message_id"])
    assert (message.text, message.reply_markup) == ("v3", None)
    assert [edit.text for edit in message.edits] == ["v1", "v2"]
    with pytest.raises(BadRequest) as caught:
        await api.edit_message_text(CHAT, 999, "x")
    assert not is_not_modified(caught.value)
    assert "message to edit not found" in caught.value.description


async def test_bad_request_keeps_telegrams_description(api: BotApi) -> None:
    with pytest.raises(BadRequest) as caught:
        await api.send_message(CHAT, "x" * 4097)
    assert caught.value.description == "Bad Request: message is too long"


async def test_429_raises_retry_after(api: BotApi, fake: FakeTelegramServer) -> None:
    fake.fail_next("sendMessage", retry_after=7)
    with pytest.raises(RetryAfter) as caught:
        await api.send_message(CHAT, "hi")
    assert caught.value.seconds == 7
    await api.send_message(CHAT, "hi")  # the next one goes through


@pytest.mark.parametrize(
    ("status", "description"), [(500, "Internal Server Error"), (502, "Bad Gateway")]
)
async def test_5xx_raises_server_error(
    api: BotApi, fake: FakeTelegramServer, status: int, description: str
) -> None:
    # ptb alone would report a 5xx as a NetworkError; the binding classifies the status.
    fake.fail_next("sendMessage", status=status)
    with pytest.raises(ServerError) as caught:
        await api.send_message(CHAT, "hi")
    assert caught.value.description == description


async def test_403_raises_forbidden(api: BotApi, fake: FakeTelegramServer) -> None:
    fake.fail_next("sendChatAction", status=403)
    with pytest.raises(Forbidden) as caught:
        await api.send_chat_action(CHAT)
    assert caught.value.description == "Forbidden: bot was blocked by the user"


@pytest.mark.parametrize(
    ("status", "description", "gone"),
    [
        (403, "Forbidden: bot was kicked from the group chat", True),
        (400, "Bad Request: chat not found", True),
        (400, "Bad Request: message is too long", False),
        (400, "Bad Request: TOPIC_CLOSED", False),
    ],
)
async def test_a_chat_that_refuses_the_bot_for_good_is_told_from_a_refused_message(
    api: BotApi, fake: FakeTelegramServer, status: int, description: str, gone: bool
) -> None:
    """Blocked, removed, deleted: ``Gone`` (the chat's scheduled jobs pause on it); a
    refusal of this one message is not."""
    fake.fail_next("sendMessage", status=status, description=description)
    with pytest.raises(Refused) as caught:
        await api.send_message(CHAT, "hi")
    assert isinstance(caught.value, Gone) is gone
    assert "chat not found" not in description or isinstance(caught.value, BadRequest)


async def test_unreachable_server_raises_network_error(
    request: pytest.FixtureRequest, api: BotApi
) -> None:
    library = request.node.callspec.params["api"]
    dead = make_bot_api(library, TOKEN, "http://127.0.0.1:9")  # discard port: refused
    try:
        with pytest.raises(NetworkError):
            await dead.send_message(CHAT, "hi")
    finally:
        await dead.close()


async def test_delete_message(api: BotApi, fake: FakeTelegramServer) -> None:
    sent = await api.send_message(CHAT, "bye")
    await api.delete_message(CHAT, sent["message_id"])
    assert fake.messages(CHAT)[0].deleted
    with pytest.raises(BadRequest):
        await api.delete_message(CHAT, sent["message_id"])


async def test_answer_callback_query(api: BotApi, fake: FakeTelegramServer) -> None:
    sent = await api.send_message(CHAT, "menu", reply_markup=inline_keyboard([("A", "a")]))
    update = fake.callback(CHAT, USER, sent["message_id"], "a")
    query_id = update["callback_query"]["id"]
    await api.answer_callback_query(query_id, text="Done", show_alert=True)
    answer = fake.callback_answers[-1]
    assert (answer["callback_query_id"], answer["text"], answer["show_alert"]) == (
        query_id,
        "Done",
        True,
    )
    with pytest.raises(BadRequest):  # a query can be answered once
        await api.answer_callback_query(query_id)


async def test_send_chat_action_in_a_thread(api: BotApi, fake: FakeTelegramServer) -> None:
    await api.send_chat_action(-100, message_thread_id=12)
    await api.send_chat_action(CHAT, "upload_document")
    assert fake.chat_actions == [
        {"chat_id": -100, "action": "typing", "message_thread_id": 12},
        {"chat_id": CHAT, "action": "upload_document"},
    ]


async def test_set_my_commands(api: BotApi, fake: FakeTelegramServer) -> None:
    await api.set_my_commands([("start", "Start"), ("new", "A new conversation")])
    assert fake.commands["default/"] == [
        {"command": "start", "description": "Start"},
        {"command": "new", "description": "A new conversation"},
    ]


async def test_set_and_delete_webhook(api: BotApi, fake: FakeTelegramServer) -> None:
    await api.set_webhook("https://bot.example.org/telegram", secret_token="s3cret-_X")
    assert fake.webhook.url == "https://bot.example.org/telegram"
    assert fake.webhook.secret_token == "s3cret-_X"
    assert fake.webhook.allowed_updates == list(ALLOWED_UPDATES)
    await api.delete_webhook()
    assert fake.webhook.url == ""
    assert await api.get_updates(None, timeout=0) == []  # polling works again


async def test_get_file_and_download(api: BotApi, fake: FakeTelegramServer, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4
    update = fake.document_message(CHAT, USER, data, "notes.bin", mime_type="application/pdf")
    file_id = update["message"]["document"]["file_id"]
    file = await api.get_file(file_id)
    assert file["file_id"] == file_id
    assert file["file_size"] == len(data)
    assert not file["file_path"].startswith("http")  # Telegram's path, not a URL
    destination = tmp_path / "a" / "b" / "notes.bin"
    await api.download_file(file["file_path"], destination)
    assert destination.read_bytes() == data


async def test_send_document(api: BotApi, fake: FakeTelegramServer) -> None:
    data = b"col1,col2\r\n1,2\r\n\x00\xff"
    sent = await api.send_document(
        CHAT,
        "résumé.csv",
        data,
        caption="Your export",
        message_thread_id=3,
        reply_markup=inline_keyboard([("Again", "again")]),
    )
    assert sent["document"]["file_name"] == "résumé.csv"
    assert sent["caption"] == "Your export"
    [seen] = fake.messages(CHAT)
    assert seen.document is not None
    assert (seen.document.filename, seen.document.data) == ("résumé.csv", data)
    assert (seen.caption, seen.message_thread_id) == ("Your export", 3)
    assert seen.reply_markup == inline_keyboard([("Again", "again")])


async def test_send_message_draft(api: BotApi, fake: FakeTelegramServer) -> None:
    await api.send_message_draft(CHAT, 7, "Thinking", entities=[entity("italic", 0, 8)])
    await api.send_message_draft(CHAT, 7, "Thinking harder", message_thread_id=4)
    drafts = fake.drafts(CHAT)
    assert [(d.draft_id, d.text, d.message_thread_id) for d in drafts] == [
        (7, "Thinking", None),
        (7, "Thinking harder", 4),
    ]
    assert drafts[0].entities == [entity("italic", 0, 8)]


async def test_close_twice(api: BotApi) -> None:
    await api.get_me()
    await api.close()
    await api.close()


def test_factory_rejects_unknown_libraries() -> None:
    with pytest.raises(ValueError, match="'ptb', 'aiogram'"):
        make_bot_api("telebot", TOKEN, "http://127.0.0.1:1")
