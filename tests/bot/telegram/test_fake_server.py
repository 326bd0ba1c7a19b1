"""The fake Bot API server: Telegram's limits, long polling and bookkeeping, over raw HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.telegram_server import FakeTelegramServer, entity, inline_keyboard

TOKEN = "123456:TEST-token"
CHAT = 42


@pytest.fixture
def client(fake: FakeTelegramServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{fake.base_url}/bot{TOKEN}/", timeout=10) as http:
        yield http


def call(client: httpx.Client, method: str, **params: Any) -> dict[str, Any]:
    """POST ``params`` as JSON; returns Telegram's answer (ok or not)."""
    return client.post(method, json=params).json()


def description(answer: dict[str, Any]) -> str:
    assert answer["ok"] is False, answer
    return answer["description"]


def send(client: httpx.Client, text: str = "hello", **params: Any) -> dict[str, Any]:
    answer = call(client, "sendMessage", chat_id=CHAT, text=text, **params)
    assert answer["ok"], answer
    return answer["result"]


# -- limits --------------------------------------------------------------------------------


def test_get_me_takes_the_bot_id_from_the_token(client: httpx.Client) -> None:
    me = call(client, "getMe")["result"]
    assert me["id"] == 123456
    assert me["is_bot"] is True
    assert me["username"] == "chathub_test_bot"


def test_text_length_is_counted_in_utf16_code_units(client: httpx.Client) -> None:
    assert send(client, "x" * 4096)["text"] == "x" * 4096
    assert send(client, "😀" * 2048)["message_id"] == 2  # 4096 code units
    answer = call(client, "sendMessage", chat_id=CHAT, text="😀" * 2049)
    assert answer["error_code"] == 400
    assert description(answer) == "Bad Request: message is too long"
    answer = call(client, "sendMessage", chat_id=CHAT, text="x" * 4097)
    assert description(answer) == "Bad Request: message is too long"


@pytest.mark.parametrize("params", [{"text": ""}, {"text": "  \n "}, {}])
def test_empty_text_is_refused(client: httpx.Client, params: dict[str, Any]) -> None:
    answer = call(client, "sendMessage", chat_id=CHAT, **params)
    assert description(answer) == "Bad Request: message text is empty"


def test_callback_data_is_limited_to_64_bytes(client: httpx.Client) -> None:
    send(client, reply_markup=inline_keyboard([("ok", "a" * 64), ("é", "é" * 32)]))
    for data in ("a" * 65, "é" * 33, ""):
        answer = call(
            client,
            "sendMessage",
            chat_id=CHAT,
            text="menu",
            reply_markup=inline_keyboard([("bad", data)]),
        )
        assert description(answer) == "Bad Request: BUTTON_DATA_INVALID", data


@pytest.mark.parametrize(
    "bad",
    [
        entity("bold", 3, 3),  # ends after the text
        entity("bold", -1, 2),
        entity("bold", 0, 0),
        entity("blink", 0, 1),
        entity("code", 0, 1, language="python"),  # only pre carries a language
        entity("text_link", 0, 1),  # without url
    ],
)
def test_invalid_entities_are_refused(client: httpx.Client, bad: dict[str, Any]) -> None:
    answer = call(client, "sendMessage", chat_id=CHAT, text="abcd"[:4], entities=[bad])
    assert description(answer).startswith("Bad Request: can't parse entities: ")


def test_entity_bounds_use_utf16_offsets(client: httpx.Client) -> None:
    text = "😀 hi"  # 5 code units
    ok = [entity("bold", 3, 2), entity("pre", 0, 5, language="python")]
    assert send(client, text, entities=ok)["entities"] == ok
    answer = call(client, "sendMessage", chat_id=CHAT, text=text, entities=[entity("bold", 3, 3)])
    assert description(answer).startswith("Bad Request: can't parse entities")


def test_edit_identical_is_not_modified_and_changes_are_recorded(
    client: httpx.Client, fake: FakeTelegramServer
) -> None:
    keyboard = inline_keyboard([("A", "a")])
    sent = send(client, "v1", reply_markup=keyboard)
    same = {"chat_id": CHAT, "message_id": sent["message_id"], "text": "v1"}
    answer = call(client, "editMessageText", **same, reply_markup=keyboard)
    assert description(answer).startswith("Bad Request: message is not modified: ")
    # Without reply_markup the keyboard goes away: that is a modification.
    assert call(client, "editMessageText", **same)["ok"]
    answer = call(client, "editMessageText", **same)
    assert "message is not modified" in description(answer)
    bold = [entity("bold", 0, 2)]
    edited = call(client, "editMessageText", **same, entities=bold)["result"]
    assert edited["entities"] == bold
    message = fake.message(CHAT, sent["message_id"])
    assert (message.text, message.entities, message.reply_markup) == ("v1", bold, None)
    assert [edit.reply_markup for edit in message.edits] == [keyboard, None]


def test_unknown_or_deleted_messages_cannot_be_edited_or_deleted(
    client: httpx.Client, fake: FakeTelegramServer
) -> None:
    answer = call(client, "editMessageText", chat_id=CHAT, message_id=99, text="x")
    assert description(answer) == "Bad Request: message to edit not found"
    answer = call(client, "deleteMessage", chat_id=CHAT, message_id=99)
    assert description(answer) == "Bad Request: message to delete not found"
    sent = send(client)
    assert call(client, "deleteMessage", chat_id=CHAT, message_id=sent["message_id"])["ok"]
    assert fake.messages(CHAT)[0].deleted
    assert fake.messages(CHAT, include_deleted=False) == []
    answer = call(client, "editMessageText", chat_id=CHAT, message_id=sent["message_id"], text="y")
    assert description(answer) == "Bad Request: message to edit not found"
    user = fake.user_message(CHAT, CHAT, "mine")["message"]
    answer = call(client, "editMessageText", chat_id=CHAT, message_id=user["message_id"], text="y")
    assert description(answer) == "Bad Request: message can't be edited"


def test_reply_to_an_unknown_message_is_refused(
    client: httpx.Client, fake: FakeTelegramServer
) -> None:
    answer = call(client, "sendMessage", chat_id=CHAT, text="x", reply_to_message_id=7)
    assert description(answer) == "Bad Request: message to be replied not found"
    user = fake.user_message(CHAT, CHAT, "question")["message"]
    sent = send(client, reply_parameters={"message_id": user["message_id"]})
    assert sent["reply_to_message"]["text"] == "question"
    assert fake.messages(CHAT)[0].reply_to_message_id == user["message_id"]


def test_fail_next_answers_429_then_5xx_then_recovers(
    client: httpx.Client, fake: FakeTelegramServer
) -> None:
    fake.fail_next("sendMessage", 2, retry_after=5)
    fake.fail_next("sendMessage", status=500)
    for _ in range(2):
        answer = call(client, "sendMessage", chat_id=CHAT, text="x")
        assert answer["error_code"] == 429
        assert answer["parameters"] == {"retry_after": 5}
        assert description(answer).startswith("Too Many Requests: retry after 5")
    answer = client.post("sendMessage", json={"chat_id": CHAT, "text": "x"})
    assert answer.status_code == 500
    assert answer.json() == {
        "ok": False,
        "error_code": 500,
        "description": "Internal Server Error",
    }
    assert call(client, "getMe")["ok"]  # other methods are unaffected
    assert send(client)["message_id"] == 1
    assert len(fake.calls_to("sendmessage")) == 4  # failed calls are recorded too


def test_other_checks(client: httpx.Client, fake: FakeTelegramServer) -> None:
    assert client.post("noSuchMethod").json()["error_code"] == 404
    answer = call(client, "sendChatAction", chat_id=CHAT, action="dancing")
    assert description(answer) == "Bad Request: wrong parameter action in request"
    answer = call(client, "answerCallbackQuery", callback_query_id="404")
    assert "query ID is invalid" in description(answer)
    answer = call(client, "setMyCommands", commands=[{"command": "Bad!", "description": "x"}])
    assert description(answer) == "Bad Request: BOT_COMMAND_INVALID"
    assert description(call(client, "getFile", file_id="nope")) == "Bad Request: invalid file_id"


# -- long polling ----------------------------------------------------------------------------


def test_get_updates_wakes_as_soon_as_an_update_is_pushed(
    client: httpx.Client, fake: FakeTelegramServer
) -> None:
    result: list[Any] = []
    poller = threading.Thread(
        target=lambda: result.append(call(client, "getUpdates", timeout=5)["result"])
    )
    started = time.monotonic()
    poller.start()
    time.sleep(0.1)
    pushed = fake.user_message(CHAT, 7, "hi", username="bob", first_name="Bob")
    poller.join(timeout=5)
    assert time.monotonic() - started < 2
    assert result == [[pushed]]
    message = result[0][0]["message"]
    assert message["from"] == {
        "id": 7,
        "is_bot": False,
        "first_name": "Bob",
        "username": "bob",
        "language_code": "en",
    }
    assert message["chat"]["id"] == CHAT
    assert call(client, "getUpdates", timeout=0)["result"] == [pushed]  # not confirmed yet


def test_offset_confirms_earlier_updates(client: httpx.Client, fake: FakeTelegramServer) -> None:
    ids = [fake.user_message(CHAT, CHAT, f"m{n}")["update_id"] for n in range(4)]
    assert ids == sorted(ids) and len(set(ids)) == 4
    message_ids = [u["message"]["message_id"] for u in fake.pending_updates()]
    assert message_ids == [1, 2, 3, 4]
    assert len(call(client, "getUpdates", offset=0, timeout=0)["result"]) == 4
    assert len(call(client, "getUpdates", offset=0, timeout=0, limit=2)["result"]) == 2
    got = call(client, "getUpdates", offset=ids[2], timeout=0)["result"]
    assert [u["update_id"] for u in got] == ids[2:]
    # The first two are forgotten for good.
    assert [u["update_id"] for u in call(client, "getUpdates", timeout=0)["result"]] == ids[2:]
    assert [u["update_id"] for u in call(client, "getUpdates", offset=-1)["result"]] == ids[3:]
    assert call(client, "getUpdates", offset=ids[3] + 1, timeout=0)["result"] == []
    assert fake.pending_updates() == []


def test_allowed_updates_filter_and_persist(client: httpx.Client, fake: FakeTelegramServer) -> None:
    fake.user_message(CHAT, CHAT, "dropped")
    sent = send(client, "menu", reply_markup=inline_keyboard([("A", "a")]))
    query = fake.callback(CHAT, CHAT, sent["message_id"], "a")
    got = call(client, "getUpdates", timeout=0, allowed_updates=["callback_query"])["result"]
    assert got == [query]
    assert got[0]["callback_query"]["message"]["reply_markup"] == sent["reply_markup"]
    fake.user_message(CHAT, CHAT, "also dropped")
    assert call(client, "getUpdates", timeout=0)["result"] == [query]  # the setting persists


def test_get_updates_conflicts_with_a_webhook(
    client: httpx.Client, fake: FakeTelegramServer
) -> None:
    fake.user_message(CHAT, CHAT, "pending")
    assert call(client, "setWebhook", url="https://example.org/hook", secret_token="s-1")["ok"]
    assert fake.webhook.url == "https://example.org/hook"
    assert fake.webhook.secret_token == "s-1"
    assert call(client, "getWebhookInfo")["result"]["pending_update_count"] == 1
    answer = call(client, "getUpdates", timeout=0)
    assert answer["error_code"] == 409
    assert call(client, "deleteWebhook", drop_pending_updates=True)["ok"]
    assert call(client, "getUpdates", timeout=0)["result"] == []


# -- encodings and files -----------------------------------------------------------------------


def test_form_encoded_fields_are_decoded(client: httpx.Client, fake: FakeTelegramServer) -> None:
    keyboard = inline_keyboard([("A", "a")])
    form = {
        "chat_id": str(CHAT),
        "text": "123",  # a string field stays a string
        "reply_markup": json.dumps(keyboard),
        "entities": json.dumps([entity("code", 0, 3)]),
        "message_thread_id": "9",
    }
    answer = client.post("sendMessage", data=form).json()
    assert answer["ok"], answer
    recorded = fake.calls_to("sendMessage")[0]
    assert recorded.encoding == "form"
    assert recorded.params == {
        "chat_id": CHAT,
        "text": "123",
        "reply_markup": keyboard,
        "entities": [entity("code", 0, 3)],
        "message_thread_id": 9,
    }
    message = fake.messages(CHAT)[0]
    assert (message.text, message.message_thread_id, message.reply_markup) == ("123", 9, keyboard)


def test_multipart_upload_and_download(client: httpx.Client, fake: FakeTelegramServer) -> None:
    data = b"\x00\r\n--boundary-like\r\n\xff" * 10
    answer = client.post(
        "sendDocument",
        data={"chat_id": str(CHAT), "caption": "report"},
        files={"document": ("report.bin", data, "application/octet-stream")},
    ).json()
    assert answer["ok"], answer
    recorded = fake.calls_to("sendDocument")[0]
    assert recorded.encoding == "multipart"
    assert recorded.files["document"].data == data
    sent = fake.messages(CHAT)[0]
    assert sent.document is not None and sent.document.filename == "report.bin"
    assert sent.caption == "report"
    document = answer["result"]["document"]
    assert document["file_name"] == "report.bin"
    file = call(client, "getFile", file_id=document["file_id"])["result"]
    url = f"{fake.base_url}/file/bot{TOKEN}/{file['file_path']}"
    assert httpx.get(url).content == data
    assert httpx.get(f"{fake.base_url}/file/bot{TOKEN}/missing").status_code == 404


def test_builders_register_files_and_ids(client: httpx.Client, fake: FakeTelegramServer) -> None:
    photo = fake.photo_message(CHAT, CHAT, b"jpeg bytes", caption="look")["message"]
    document = fake.document_message(-100, CHAT, b"doc", "a.txt", chat_type="supergroup")
    location = fake.location_message(CHAT, CHAT, 48.85, 2.35)["message"]
    edited = fake.edited_message(CHAT, CHAT, photo["message_id"], "fixed")
    assert photo["message_id"] == 1 and location["message_id"] == 2
    assert document["message"]["message_id"] == 1  # ids are per chat
    assert document["message"]["chat"]["type"] == "supergroup"
    assert location["location"] == {"latitude": 48.85, "longitude": 2.35}
    assert edited["edited_message"]["message_id"] == 1
    assert edited["edited_message"]["text"] == "fixed"
    largest = photo["photo"][-1]
    file = call(client, "getFile", file_id=largest["file_id"])["result"]
    assert file["file_size"] == len(b"jpeg bytes")
    assert httpx.get(f"{fake.base_url}/file/bot{TOKEN}/{file['file_path']}").content == (
        b"jpeg bytes"
    )
    added = fake.add_file("f-1", b"xyz", "docs/x.txt")
    assert call(client, "getFile", file_id="f-1")["result"] == added
    assert fake.user_message(CHAT, CHAT, "/start@chathub_test_bot go")["message"]["entities"] == [
        entity("bot_command", 0, 23)
    ]


# -- rate limits (opt-in) ------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def limited(fake: FakeTelegramServer) -> Iterator[tuple[FakeTelegramServer, FakeClock]]:
    clock = FakeClock()
    fake.enforce_limits(clock=clock)
    try:
        yield fake, clock
    finally:
        fake.limits = None  # the module's server is shared: back to no limits


def test_limits_are_off_by_default(client: httpx.Client, fake: FakeTelegramServer) -> None:
    assert fake.limits is None
    for n in range(40):
        send(client, f"m{n}")


def test_private_chat_allows_a_short_burst_then_429_with_retry_after(
    client: httpx.Client, limited: tuple[FakeTelegramServer, FakeClock]
) -> None:
    fake, clock = limited
    for n in range(5):  # a burst of 5 within a second passes
        send(client, f"m{n}")
        clock.now += 0.1
    answer = call(client, "sendMessage", chat_id=CHAT, text="sixth")
    assert answer == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 1",
        "parameters": {"retry_after": 1},
    }
    assert len(fake.messages(CHAT)) == 5  # the refused call sent nothing
    assert fake.limits is not None and fake.limits.count_429 == 1
    assert fake.limits.rejected[0].rule.startswith("private")
    # Another chat, edits and chat actions have counters of their own.
    assert call(client, "sendMessage", chat_id=CHAT + 1, text="other chat")["ok"]
    assert call(client, "editMessageText", chat_id=CHAT, message_id=1, text="edited")["ok"]
    assert call(client, "sendChatAction", chat_id=CHAT, action="typing")["ok"]
    clock.now += 0.6  # the first message is more than 1 s old: one more fits
    send(client, "later")
    assert fake.limits.count_429 == 1
    assert fake.limits.peak["private 5/1s"] == 5


def test_private_chat_sustained_over_one_a_second_earns_429_within_the_minute(
    client: httpx.Client, limited: tuple[FakeTelegramServer, FakeClock]
) -> None:
    fake, clock = limited
    start = clock.now
    for burst in range(13):  # a burst of 5 every second: each second passes, 65 in all
        clock.now = start + burst
        for n in range(5):
            assert call(client, "sendMessage", chat_id=CHAT, text=f"{burst}.{n}")["ok"]
            clock.now += 0.1
    clock.now = start + 13
    answer = call(client, "sendMessage", chat_id=CHAT, text="66th within a minute")
    assert answer["error_code"] == 429
    assert answer["parameters"]["retry_after"] == 47  # the first leaves the minute then
    assert fake.limits is not None and fake.limits.rejected[0].rule.startswith("private")


def test_group_limit_is_20_per_minute(
    client: httpx.Client, limited: tuple[FakeTelegramServer, FakeClock]
) -> None:
    _, clock = limited
    group = -100_123
    for n in range(20):
        assert call(client, "sendMessage", chat_id=group, text=f"g{n}")["ok"]
        clock.now += 1.5
    answer = call(client, "sendMessage", chat_id=group, text="21st")
    assert answer["error_code"] == 429
    assert answer["parameters"]["retry_after"] == 30  # the first one leaves the minute then
    clock.now += 30
    assert call(client, "sendMessage", chat_id=group, text="21st again")["ok"]


def test_overall_limit_is_30_per_second_across_chats(
    client: httpx.Client, limited: tuple[FakeTelegramServer, FakeClock]
) -> None:
    fake, clock = limited
    for chat in range(30):
        assert call(client, "sendMessage", chat_id=1000 + chat, text="hi")["ok"]
    answer = call(client, "sendMessage", chat_id=2000, text="31st chat")
    assert answer["error_code"] == 429 and answer["parameters"]["retry_after"] == 1
    assert (
        call(client, "editMessageText", chat_id=1000, message_id=1, text="x")["error_code"] == 429
    )  # edits count towards the overall limit too
    assert fake.limits is not None and fake.limits.count_429 == 2
    clock.now += 1.0
    assert call(client, "sendMessage", chat_id=2000, text="next second")["ok"]
