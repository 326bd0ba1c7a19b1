"""bot/telegram/inbound/updates.py: every malformed field of an update, one at a time (issue 16).

A malformed optional field is dropped (and named) and the rest of the message is handled;
text is repaired so that every encoder after the edge accepts it; only an update with no
usable chat, sender or message id (or a callback without an id) is ``Ignored``.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from bot.telegram.inbound.updates import Callback, ChatMove, Ignored, Message, parse_update
from engine.text import clean_text
from tests.bot.junk import JSON_VALUES, Users, junk_message_fields, junk_update

ALICE = 111
USERS = Users(wellformed=[ALICE], junk=[ALICE, 222], strangers=[555], owner=999)


def message(**fields: Any) -> dict[str, Any]:
    """A well-formed private text message update; ``fields`` replace (None removes)."""
    body: dict[str, Any] = {
        "message_id": 7,
        "date": 1_700_000_000,
        "from": {"id": ALICE, "is_bot": False, "first_name": "Alice", "username": "alice"},
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "text": "hello",
    }
    for key, value in fields.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return {"update_id": 1, "message": body}


def callback(**fields: Any) -> dict[str, Any]:
    query: dict[str, Any] = {
        "id": "cb-1",
        "from": {"id": ALICE, "first_name": "Alice"},
        "message": {"message_id": 9, "chat": {"id": ALICE, "type": "private"}},
        "chat_instance": "42",
        "data": "ap1:5:a",
    }
    for key, value in fields.items():
        if value is None:
            query.pop(key, None)
        else:
            query[key] = value
    return {"update_id": 2, "callback_query": query}


def parsed(update: dict[str, Any]) -> Message:
    result = parse_update(update)
    assert isinstance(result, Message), result
    return result


def parsed_callback(update: dict[str, Any]) -> Callback:
    result = parse_update(update)
    assert isinstance(result, Callback), result
    return result


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


# --- text repair -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "repaired"),
    [
        ("\ud800", "\ufffd"),  # the chaos run's message: JSON "\ud800"
        ("a\udc00b", "a\ufffdb"),
        ("x\ud83d", "x\ufffd"),  # the first half of an emoji, alone
        ("\ud83d\ude00!", "😀!"),  # a pair split over two characters is one emoji again
        ("nul\x00here", "nul\ufffdhere"),  # PostgreSQL refuses NUL in text
        ("plain ascii", "plain ascii"),
        ("ünïcödé 😀", "ünïcödé 😀"),
    ],
)
def test_clean_text(raw: str, repaired: str) -> None:
    assert clean_text(raw) == repaired
    assert utf16_len(clean_text(raw)) == len(raw.encode("utf-16-le", "surrogatepass")) // 2


def test_a_lone_surrogate_in_the_text_is_repaired() -> None:
    m = parsed(message(text="hi \ud800 there"))
    assert m.text == "hi \ufffd there"
    m.text.encode("utf-8")  # what failed in the database and the model request


def test_entity_offsets_stay_right_after_repair() -> None:
    # "\ud800" is one UTF-16 unit, and so is U+FFFD: the bold "there" stays where it was.
    m = parsed(message(text="\ud800 there", entities=[{"type": "bold", "offset": 2, "length": 5}]))
    (bold,) = m.entities
    assert m.text.encode("utf-16-le")[4:14].decode("utf-16-le") == "there"
    assert bold == {"type": "bold", "offset": 2, "length": 5}


def test_a_lone_surrogate_in_the_caption_is_repaired() -> None:
    m = parsed(message(text=None, caption="pic \udfff", photo=[{"file_id": "p1"}]))
    assert m.text == "pic \ufffd"


@pytest.mark.parametrize("field", ["first_name", "last_name", "username"])
def test_names_are_repaired(field: str) -> None:
    sender = {"id": ALICE, field: "A\ud800"}
    m = parsed(message(**{"from": sender}))
    assert "\ufffd" in m.user_name
    m.user_name.encode("utf-8")


def test_a_document_name_and_mime_type_are_repaired() -> None:
    document = {"file_id": "d1", "file_name": "r\ud800.txt", "mime_type": "text/\udc00"}
    (ref,) = parsed(message(text=None, caption="doc", document=document)).files
    assert (ref.name, ref.mime_type) == ("r\ufffd.txt", "text/\ufffd")


def test_callback_data_is_repaired() -> None:
    assert parsed_callback(callback(data="ap1:5:\ud800")).data == "ap1:5:\ufffd"


# --- entities ----------------------------------------------------------------------


@pytest.mark.parametrize("junk", [5, "bold", {"type": "bold"}, True, 1.5])
def test_entities_that_are_not_a_list_are_dropped(junk: Any) -> None:
    # The chaos run: "entities": 5 raised TypeError and the message got no answer at all.
    m = parsed(message(entities=junk))
    assert (m.text, m.entities) == ("hello", ())
    assert m.dropped == ("message.entities (not a list)",)


@pytest.mark.parametrize(
    "junk",
    [
        5,
        "bold",
        None,
        [],
        {"offset": 0, "length": 2},  # no type
        {"type": 3, "offset": 0, "length": 2},
        {"type": "bold", "offset": "0", "length": 2},
        {"type": "bold", "offset": 0, "length": True},
        {"type": "bold", "offset": -1, "length": 2},
        {"type": "bold", "offset": 0, "length": 0},
        {"type": "bold", "offset": 3, "length": 3},  # past the end of "hello"
        {"type": "bold", "offset": 2**70, "length": 1},
    ],
)
def test_a_malformed_entity_is_dropped_and_the_others_kept(junk: Any) -> None:
    good = {"type": "italic", "offset": 0, "length": 5}
    m = parsed(message(entities=[junk, good]))
    assert m.entities == (good,)
    assert m.dropped == ("message.entities[0] (not an entity inside the text)",)


def test_an_entity_keeps_only_well_typed_fields() -> None:
    entity = {
        "type": "text_mention",
        "offset": 0,
        "length": 5,
        "user": "not a user",
        "url": 5,
        "language": "py",
    }
    (kept,) = parsed(message(entities=[entity])).entities
    assert kept == {"type": "text_mention", "offset": 0, "length": 5, "language": "py"}


def test_a_text_mention_keeps_its_user_id() -> None:
    entity = {"type": "text_mention", "offset": 0, "length": 5, "user": {"id": 1, "x": [1]}}
    (kept,) = parsed(message(entities=[entity])).entities
    assert kept["user"] == {"id": 1}


def test_caption_entities_are_checked_against_the_caption() -> None:
    m = parsed(
        message(
            text=None,
            caption="ab",
            caption_entities=[{"type": "bold", "offset": 0, "length": 3}, 7],
        )
    )
    assert (m.text, m.entities) == ("ab", ())
    assert len(m.dropped) == 2


# --- text, chat, sender, ids ---------------------------------------------------------


@pytest.mark.parametrize("junk", [5, ["a"], {"t": 1}, True])
def test_a_text_that_is_not_a_string_is_dropped(junk: Any) -> None:
    m = parsed(message(text=junk))
    assert m.text == "" and m.dropped == ("message.text (not a string)",)


def test_a_text_that_is_not_a_string_falls_back_to_the_caption() -> None:
    assert parsed(message(text=5, caption="the caption")).text == "the caption"


@pytest.mark.parametrize(("chat_id", "expected"), [(ALICE, "private"), (-100123, "group")])
@pytest.mark.parametrize("junk", [5, ["private"], "castle"])
def test_a_malformed_chat_type_is_inferred_from_the_id(
    junk: Any, chat_id: int, expected: str
) -> None:
    # Never "private" for a group: there the bot answers only when it is addressed.
    m = parsed(message(chat={"id": chat_id, "type": junk}))
    assert m.chat_type == expected and len(m.dropped) == 1


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"chat": 5}, "message without a chat id"),
        ({"chat": {"id": "111"}}, "message without a chat id"),
        ({"chat": {"id": 2**63}}, "message without a chat id"),  # would overflow the store
        ({"from": "alice"}, "message without a sender (channel post or anonymous admin)"),
        ({"from": {"id": True}}, "message without a sender (channel post or anonymous admin)"),
        ({"from": {"id": -(2**64)}}, "message without a sender (channel post or anonymous admin)"),
        ({"message_id": "7"}, "message without a message_id"),
        ({"message_id": 2**64 + 1}, "message without a message_id"),
    ],
)
def test_without_a_usable_chat_sender_or_id_a_message_is_ignored(
    fields: dict[str, Any], reason: str
) -> None:
    result = parse_update(message(**fields))
    assert isinstance(result, Ignored) and result.reason == reason


GROUP, SUPERGROUP = -4242, -1_000_000_004_242


@pytest.mark.parametrize(
    ("chat", "fields"),
    [
        (GROUP, {"migrate_to_chat_id": SUPERGROUP}),
        (SUPERGROUP, {"migrate_from_chat_id": GROUP}),
        (SUPERGROUP, {"migrate_from_chat_id": GROUP, "from": None}),  # nobody named
    ],
)
def test_a_group_made_a_supergroup_is_a_chat_move(chat: int, fields: dict[str, Any]) -> None:
    update = message(chat={"id": chat, "type": "group"}, text=None, **fields)
    assert parse_update(update) == ChatMove(1, GROUP, SUPERGROUP)


@pytest.mark.parametrize("junk", ["-100", True, 2**64, [], 4.5])
def test_a_chat_move_naming_no_usable_chat_is_ignored(junk: Any) -> None:
    update = message(chat={"id": GROUP, "type": "group"}, text=None, migrate_to_chat_id=junk)
    result = parse_update(update)
    assert isinstance(result, Ignored)
    assert result.reason == "chat move without an integer chat id"


def test_a_sender_name_that_is_junk_falls_back_to_the_id() -> None:
    m = parsed(message(**{"from": {"id": ALICE, "first_name": 5, "username": ["a"]}}))
    assert m.user_name == str(ALICE)
    assert len(m.dropped) == 2


@pytest.mark.parametrize(
    "junk",
    ["5", 5, [], {"message_id": "5"}, {"message_id": 5, "from": "bot"}, {"from": {"id": "x"}}],
)
def test_a_malformed_reply_is_dropped(junk: Any) -> None:
    m = parsed(message(reply_to_message=junk))
    assert m.text == "hello" and m.dropped
    assert m.reply_to_message_id in (None, 5) and m.reply_to_user_id is None


@pytest.mark.parametrize(
    ("flag", "thread"),
    [("yes", 3), (1, 3), (True, "3"), (True, 2**64), (True, [3])],
)
def test_a_malformed_topic_is_no_topic(flag: Any, thread: Any) -> None:
    m = parsed(message(is_topic_message=flag, message_thread_id=thread))
    assert m.thread_id is None and m.source == f"telegram:{ALICE}" and m.dropped


def test_a_topic_message_keeps_its_thread() -> None:
    assert parsed(message(is_topic_message=True, message_thread_id=3)).thread_id == 3


# --- location, photo, document -------------------------------------------------------


@pytest.mark.parametrize(
    "junk",
    [
        "here",
        {"latitude": "1", "longitude": 2},
        {"latitude": 1},
        {"latitude": True, "longitude": False},
        {"latitude": float("nan"), "longitude": 0.0},
        {"latitude": float("inf"), "longitude": 0.0},
        {"latitude": 91.0, "longitude": 0.0},
        {"latitude": 0.0, "longitude": 10**400},  # too big for a float
    ],
)
def test_a_malformed_location_is_dropped(junk: Any) -> None:
    m = parsed(message(location=junk))
    assert m.location is None and m.text == "hello" and m.dropped


def test_a_location_is_kept() -> None:
    assert parsed(message(location={"latitude": 45, "longitude": -7.5})).location == (45.0, -7.5)


@pytest.mark.parametrize(
    "junk",
    ["photo", 5, [5, "x"], [{"file_id": 5}], [{"file_id": ""}], [{"width": 3}]],
)
def test_a_malformed_photo_is_dropped(junk: Any) -> None:
    m = parsed(message(photo=junk))
    assert m.files == () and m.dropped


def test_junk_sizes_of_a_photo_are_skipped_and_the_largest_good_one_kept() -> None:
    sizes = [
        {"file_id": "small", "width": 10, "height": 10},
        {"file_id": "big", "width": "1000", "height": [1], "file_size": "x"},
        {"file_id": "mid", "width": 50, "height": 50, "file_unique_id": 9},
        7,
    ]
    (ref,) = parsed(message(photo=sizes)).files
    assert (ref.file_id, ref.unique_id, ref.size) == ("mid", "mid", None)


@pytest.mark.parametrize(
    "junk",
    ["doc", [1], {"file_id": 5}, {"file_name": "a.txt"}],
)
def test_a_malformed_document_is_dropped(junk: Any) -> None:
    m = parsed(message(document=junk))
    assert m.files == () and m.dropped


def test_junk_fields_of_a_document_are_left_out() -> None:
    document = {"file_id": "d", "file_name": 5, "mime_type": [], "file_size": -3}
    (ref,) = parsed(message(document=document)).files
    assert (ref.name, ref.mime_type, ref.size) == ("d", None, None)


# --- callbacks ---------------------------------------------------------------------


@pytest.mark.parametrize("junk", [None, 5, "", ["cb"]])
def test_a_callback_without_an_id_cannot_be_answered_and_is_ignored(junk: Any) -> None:
    result = parse_update(callback(id=junk))
    assert isinstance(result, Ignored) and result.reason == "callback query without an id"


@pytest.mark.parametrize("junk", [None, "alice", {"id": "111"}, {"first_name": "A"}])
def test_a_callback_without_a_sender_is_still_answered(junk: Any) -> None:
    # It used to be Ignored: the button kept spinning until Telegram's timeout.
    c = parsed_callback(callback(**{"from": junk}))
    assert c.user_id is None and c.callback_id == "cb-1" and c.dropped


@pytest.mark.parametrize("junk", [5, ["ap1:5:a"], {"d": 1}, True])
def test_callback_data_that_is_not_a_string_is_empty(junk: Any) -> None:
    c = parsed_callback(callback(data=junk))
    assert c.data == "" and c.dropped == ("callback_query.data (not a string)",)


@pytest.mark.parametrize(
    "junk",
    [5, "msg", {"message_id": "9", "chat": 5}, {"message_id": 9, "chat": {"id": 2**63}}],
)
def test_a_callback_with_a_malformed_message_has_no_chat(junk: Any) -> None:
    c = parsed_callback(callback(message=junk))
    assert c.chat_id is None and c.source is None and c.dropped


# --- whole updates -----------------------------------------------------------------


@pytest.mark.parametrize(
    "junk",
    [5, "update", [], None, {"update_id": "1"}, {"update_id": True}, {"message": {}}],
)
def test_not_an_update(junk: Any) -> None:
    result = parse_update(junk)
    assert isinstance(result, Ignored) and result.update_id is None


@pytest.mark.parametrize("kind", ["message", "edited_message", "callback_query"])
@pytest.mark.parametrize("junk", [5, "x", [1], True])
def test_a_kind_that_is_not_an_object_is_ignored(kind: str, junk: Any) -> None:
    result = parse_update({"update_id": 3, kind: junk})
    assert isinstance(result, Ignored) and result.reason == f"{kind} is not an object"


def test_what_was_dropped_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="bot.telegram.inbound.updates"):
        parsed(message(entities=5, location="x"))
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        "update 1: dropped malformed message.entities (not a list); "
        "message.location (not an object)"
    )


def test_a_well_formed_message_drops_nothing_and_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="bot.telegram.inbound.updates"):
        m = parsed(message(entities=[{"type": "bold", "offset": 0, "length": 5}]))
    assert m.dropped == () and caplog.records == []


# --- generated junk ----------------------------------------------------------------


def check_clean(m: Message) -> None:
    """What the adapter may rely on for any parsed message."""
    for text in (m.text, m.user_name, *(f.name for f in m.files)):
        text.encode("utf-8")
        assert "\x00" not in text
    size = utf16_len(m.text)
    for entity in m.entities:
        assert isinstance(entity["type"], str)
        assert 0 <= entity["offset"] < entity["offset"] + entity["length"] <= size


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES)
def test_parse_update_never_raises_on_random_json(value: Any) -> None:
    for kind in ("message", "edited_message", "callback_query"):
        result = parse_update({"update_id": 1, kind: value})
        if isinstance(result, Message):
            check_clean(result)
    parse_update(value)


@settings(max_examples=500, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(junk_update(USERS))
def test_parse_update_never_raises_on_junk_in_any_field(body: dict[str, Any]) -> None:
    result = parse_update({"update_id": 1, **body})
    if isinstance(result, Message):
        check_clean(result)


@settings(max_examples=400, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(junk_message_fields())
def test_junk_in_optional_fields_never_costs_the_message(fields: dict[str, Any]) -> None:
    update = message(text="T1 keep me")
    update["message"].update(copy.deepcopy(fields))
    m = parsed(update)
    check_clean(m)
    assert m.text == "T1 keep me" and m.chat_id == ALICE and m.user_id == ALICE


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("/search\nholiday plans", ("search", "holiday plans")),  # any space ends the name
        ("/model@MyBot\n2", ("model", "2")),
        ("/Help", ("help", "")),
        ("/model@OtherBot 2", None),  # another bot's
        ("/home/alice/project", None),  # a path, as Telegram marks no command in it
        ("/etc/hosts is broken", None),
        ("/", None),
        ("/ search", None),
    ],
)
def test_a_command_is_what_telegram_marks_as_one(text: str, command: Any) -> None:
    """A path was "Unknown command", and so was ``/search`` then a line break (review)."""
    assert parsed(message(text=text)).command("MyBot") == command


@pytest.mark.parametrize(
    ("origin", "line"),
    [
        (
            {"type": "user", "date": 1, "sender_user": {"id": 5, "first_name": "Bob"}},
            "[Forwarded message from Bob]",
        ),
        (
            {"type": "hidden_user", "date": 1, "sender_user_name": "Carol"},
            "[Forwarded message from Carol]",
        ),
        (
            {"type": "channel", "date": 1, "chat": {"id": -100, "title": "News"}, "message_id": 3},
            "[Forwarded message from News]",
        ),
        (
            {"type": "chat", "date": 1, "sender_chat": {"id": -5, "title": "Team"}},
            "[Forwarded message from Team]",
        ),
        ({"type": "user", "date": 1, "sender_user": "junk"}, "[Forwarded message]"),
        ("junk", "[Forwarded message]"),
    ],
)
def test_a_forward_says_it_was_forwarded_and_is_no_command(origin: Any, line: str) -> None:
    """A forwarded "please delete X" reached the model as the sender's own instruction,
    and a forwarded "/new" ran as their command (found by review)."""
    m = parsed(message(text="/new please delete X", forward_origin=origin, forward_date=1))
    assert m.forwarded == line
    assert not m.is_command and m.command(None) is None
    own = parsed(message(text="/new please delete X"))
    assert own.forwarded is None and own.command(None) == ("new", "please delete X")


def test_a_hidden_links_address_follows_its_words_for_the_model() -> None:
    """ "summarize [this article](https://…)": the model got the words alone (found by
    review on 2026-12-07). Offsets count UTF-16 units: an emoji before the link is two."""
    text = "🔥 read this article and that one: https://b.example"
    links = [
        {"type": "text_link", "offset": 8, "length": 12, "url": "https://a.example/42"},
        {"type": "text_link", "offset": 25, "length": 8, "url": "https://b.example"},
    ]
    m = parsed(message(text=text, entities=links))
    assert m.text_with_links == (
        "🔥 read this article (https://a.example/42) and that one: https://b.example"
    )
    assert parsed(message(text="plain")).text_with_links == "plain"
