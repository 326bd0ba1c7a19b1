"""Every kind of message a person sends gets one sensible answer, on both bindings.

Real-shaped Bot API payloads (fields as Telegram sends them) go through the fake Bot API,
the binding, the adapter and the hub; the echo model shows what the model received.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from engine.llm.scripted import text, tool_call
from tests.bot.telegram_contract.conftest import (
    ALICE,
    TOKEN,
    eventually,
    eventually_true,
    stop,
    texts,
)
from tests.engine.hub.conftest import held

_MESSAGE_IDS = itertools.count(5000)
BOT_ID = 123456  # the fake's bot, from the token's prefix
GROUP = -1004242


def sender() -> dict[str, Any]:
    return {"id": ALICE, "is_bot": False, "first_name": "Alice", "language_code": "en"}


def private(telegram, **content: Any) -> None:
    message = {
        "message_id": next(_MESSAGE_IDS),
        "from": sender(),
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "date": int(time.time()),
        **content,
    }
    telegram.push_update({"message": message})


def received(model) -> str:
    """The user message the model was sent before the closing "ping"."""
    messages = model.requests[-2][0]
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


async def only_reply(telegram) -> str:
    """The one message the bot sent back. A text sent after it is answered after it (one
    chat is handled in order), so once that answer is there a doubled one would be too."""
    await eventually(lambda: texts(telegram, ALICE))
    private(telegram, text="ping")  # after the answer: sent during the turn it would steer it
    await eventually(lambda: "echo: ping" in texts(telegram, ALICE))
    *replies, last = texts(telegram, ALICE)
    assert last == "echo: ping"
    assert len(replies) == 1, f"not exactly one answer: {replies}"
    return replies[0]


DESCRIBED = [
    (
        "contact",
        {
            "contact": {
                "phone_number": "+15550123",
                "first_name": "Bob",
                "last_name": "Builder",
                "user_id": 222,
                "vcard": "BEGIN:VCARD\nEND:VCARD",
            }
        },
        "📇 Contact: Bob Builder, phone +15550123, Telegram user 222",
    ),
    (
        "venue",
        {
            "location": {"latitude": 48.8584, "longitude": 2.2945},
            "venue": {
                "location": {"latitude": 48.8584, "longitude": 2.2945},
                "title": "Eiffel Tower",
                "address": "Champ de Mars, Paris",
                "foursquare_id": "4adcda09f964a520d83421e3",
            },
        },
        "📍 Venue: Eiffel Tower, Champ de Mars, Paris (48.858400, 2.294500)",
    ),
    (
        "location",
        {"location": {"latitude": 45.0, "longitude": -7.5, "horizontal_accuracy": 20}},
        "📍 Location: 45.000000, -7.500000",
    ),
    (
        "poll",
        {
            "poll": {
                "id": "5123",
                "question": "Lunch?",
                "options": [
                    {"text": "Pizza", "voter_count": 0},
                    {"text": "Sushi", "voter_count": 0},
                ],
                "total_voter_count": 0,
                "is_closed": False,
                "is_anonymous": True,
                "type": "regular",
                "allows_multiple_answers": False,
            }
        },
        "📊 Poll: Lunch?\n- Pizza\n- Sushi",
    ),
    ("dice", {"dice": {"emoji": "🎯", "value": 6}}, "🎲 The user rolled 🎯 and got 6."),
    (
        "sticker",
        {
            "sticker": {
                "file_id": "CAACAgIAAxkBAAEB",
                "file_unique_id": "AgADxyz",
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
                "emoji": "😂",
                "set_name": "FunnyFaces",
                "file_size": 23000,
            }
        },
        "[Sticker 😂]",
    ),
    (
        "game",
        {
            "game": {
                "title": "Lumberjack",
                "description": "Chop the tree",
                "photo": [{"file_id": "g1", "file_unique_id": "g1u", "width": 1, "height": 1}],
            }
        },
        "🎮 Game: Lumberjack — Chop the tree",
    ),
    (
        "invoice",
        {
            "invoice": {
                "title": "Coffee",
                "description": "One cup",
                "start_parameter": "coffee",
                "currency": "EUR",
                "total_amount": 350,
            }
        },
        "🧾 Invoice: Coffee, 350 EUR (in the currency's smallest unit)",
    ),
    (
        "successful_payment",
        {
            "successful_payment": {
                "currency": "XTR",
                "total_amount": 5,
                "invoice_payload": "order-1",
                "telegram_payment_charge_id": "tg-1",
                "provider_payment_charge_id": "",
            }
        },
        "💳 Payment received: 5 XTR (in the currency's smallest unit)",
    ),
]


@pytest.mark.parametrize(("kind", "content", "expected"), DESCRIBED, ids=[d[0] for d in DESCRIBED])
async def test_a_described_kind_reaches_the_model_as_text(
    service, telegram, model, kind, content, expected
):
    private(telegram, **content)
    reply = await only_reply(telegram)
    assert reply.startswith("echo: ")
    assert received(model) == expected


MEDIA = [
    (
        "audio",
        {
            "audio": {
                "file_id": "aud1",
                "file_unique_id": "aud1u",
                "duration": 183,
                "performer": "Band",
                "title": "Song",
                "file_name": "song.mp3",
                "mime_type": "audio/mpeg",
                "file_size": 12,
            },
            "caption": "listen to this",
        },
        "aud1",
        ["listen to this", "song.mp3 (audio/mpeg, 183 s, 12)"],
    ),
    (
        "video",
        {
            "video": {
                "file_id": "vid1",
                "file_unique_id": "vid1u",
                "width": 640,
                "height": 360,
                "duration": 9,
                "mime_type": "video/mp4",
                "file_size": 12,
            },
            "caption": "look",
        },
        "vid1",
        ["look", "video_vid1u.mp4 (video/mp4, 9 s, 12)"],
    ),
    (
        "video_note",
        {
            "video_note": {
                "file_id": "vn1",
                "file_unique_id": "vn1u",
                "length": 240,
                "duration": 4,
                "file_size": 12,
            }
        },
        "vn1",
        ["video_note_vn1u.mp4 (video/mp4, 4 s, 12)"],
    ),
    (
        "animation",
        {
            "animation": {
                "file_id": "gif1",
                "file_unique_id": "gif1u",
                "width": 320,
                "height": 240,
                "duration": 2,
                "file_name": "fun.gif.mp4",
                "mime_type": "video/mp4",
                "file_size": 12,
            },
            "document": {
                "file_id": "gif1",
                "file_unique_id": "gif1u",
                "file_name": "fun.gif.mp4",
                "mime_type": "video/mp4",
                "file_size": 12,
            },
        },
        "gif1",
        ["fun.gif.mp4 (video/mp4, 2 s, 12)"],
    ),
]


@pytest.mark.parametrize(("kind", "content", "file_id", "shown"), MEDIA, ids=[m[0] for m in MEDIA])
async def test_a_media_file_is_downloaded_and_attached(
    service, telegram, model, tmp_path, kind, content, file_id, shown
):
    telegram.add_file(file_id, b"media-bytes!")
    private(telegram, **content)
    reply = await only_reply(telegram)
    assert reply.startswith("echo: ")
    text = received(model)
    assert "attached files" in text
    for part in shown:
        assert part in text
    assert text.count("uploads/telegram/") == 1  # an animation's document is the same file
    saved = list((tmp_path / "workspace" / "uploads" / "telegram" / str(ALICE)).iterdir())
    assert [p.read_bytes() for p in saved] == [b"media-bytes!"]


async def test_a_voice_note_without_transcription_says_how_to_set_it_up(service, telegram, model):
    telegram.add_file("v1", b"OggS-voice")
    voice = {"file_id": "v1", "file_unique_id": "v1u", "duration": 3, "mime_type": "audio/ogg"}
    private(telegram, voice=voice)
    reply = await only_reply(telegram)
    assert reply.startswith("⚠️ 🎤 I cannot transcribe voice messages")
    assert len(model.requests) == 1  # the ping alone


async def test_a_huge_document_gets_one_warning(service, telegram, model):
    document = {
        "file_id": "big1",
        "file_unique_id": "big1u",
        "file_name": "backup.tar",
        "mime_type": "application/x-tar",
        "file_size": 1_900_000_000,
    }
    private(telegram, document=document)
    reply = await only_reply(telegram)
    assert reply.startswith("⚠️ backup.tar is too large to download (the limit is 20 MB).")
    assert len(model.requests) == 1  # the ping alone


async def test_a_document_without_file_size_is_checked_by_get_file(service, telegram, model):
    telegram.add_file("doc1", b"hello")
    document = {"file_id": "doc1", "file_unique_id": "doc1u", "file_name": "notes.txt"}
    private(telegram, document=document)
    await only_reply(telegram)
    assert "notes.txt (5)" in received(model)


async def test_a_message_of_no_known_kind_gets_a_plain_sentence(service, telegram, model):
    private(telegram, story={"chat": {"id": 5, "type": "private"}, "id": 1})
    reply = await only_reply(telegram)
    assert reply == "I cannot read this kind of message yet; please send text, a photo or a file."
    assert len(model.requests) == 1  # the ping alone


async def test_a_message_starting_with_a_path_reaches_the_model(service, telegram, model):
    """Any text starting with "/" was a command: "/etc/hosts is broken" got "Unknown
    command" and the help, and never reached the model (found by review)."""
    private(telegram, text="/etc/hosts is broken")
    assert await only_reply(telegram) == "echo: /etc/hosts is broken"


async def test_a_service_message_is_not_answered(service, telegram):
    private(telegram, pinned_message={"message_id": 1, "date": 0, "chat": {"id": ALICE}})
    private(telegram, text="after the pin")
    await eventually(lambda: "echo: after the pin" in texts(telegram, ALICE))
    assert texts(telegram, ALICE) == ["echo: after the pin"]


# -- forum topics ------------------------------------------------------------------------


def topic_message(telegram, text: str, *, reply_to: dict[str, Any], user_id: int = ALICE) -> None:
    telegram.push_update(
        {
            "message": {
                "message_id": next(_MESSAGE_IDS),
                "message_thread_id": 77,
                "is_topic_message": True,
                "from": {**sender(), "id": user_id},
                "chat": {"id": GROUP, "type": "supergroup", "title": "Team", "is_forum": True},
                "date": int(time.time()),
                "reply_to_message": reply_to,
                "text": text,
            }
        }
    )


def topic_created_by_bot() -> dict[str, Any]:
    return {
        "message_id": 77,
        "message_thread_id": 77,
        "from": {"id": BOT_ID, "is_bot": True, "first_name": "Bot", "username": "test_bot"},
        "chat": {"id": GROUP, "type": "supergroup", "title": "Team", "is_forum": True},
        "date": int(time.time()) - 60,
        "forum_topic_created": {"name": "Ops", "icon_color": 7322096},
        "is_topic_message": True,
    }


async def test_talk_in_a_topic_the_bot_created_is_not_addressed_to_it(service, telegram):
    topic_message(telegram, "just chatting among colleagues", reply_to=topic_created_by_bot())
    bots_message = {
        "message_id": 90,
        "message_thread_id": 77,
        "from": {"id": BOT_ID, "is_bot": True, "first_name": "Bot"},
        "chat": {"id": GROUP, "type": "supergroup", "title": "Team", "is_forum": True},
        "date": int(time.time()) - 5,
        "text": "an earlier answer",
        "is_topic_message": True,
    }
    topic_message(telegram, "a real reply to the bot", reply_to=bots_message)
    await eventually(lambda: any("a real reply" in t for t in texts(telegram, GROUP)))
    assert not any("among colleagues" in t for t in texts(telegram, GROUP))


async def test_a_file_over_telegrams_download_limit_whose_size_was_not_said_gets_why(
    service, telegram, model
):
    """getFile refuses it ("file is too big"): the person read "I could not download",
    not why (found by review)."""
    telegram.add_file("huge1", b"x" * (20 * 1024 * 1024 + 1))
    document = {"file_id": "huge1", "file_unique_id": "huge1u", "file_name": "holiday.mp4"}
    private(telegram, document=document)
    reply = await only_reply(telegram)
    assert reply.startswith("⚠️ holiday.mp4 is too large to download (Telegram hands bots")


def _album_photo(
    telegram: Any,
    message_id: int,
    file_id: str,
    caption: str | None,
    chat: dict[str, Any] | None = None,
    album: str = "13579",
    **extra: Any,
) -> None:
    stored = telegram.add_file(file_id, b"\xff\xd8\xff\xe0jpeg-" + file_id.encode())
    size = {"width": 800, "height": 600, "file_size": 20}
    chat = chat or {"id": GROUP, "type": "supergroup", "title": "Team"}
    message: dict[str, Any] = {
        "message_id": message_id,
        "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
        "chat": chat,
        "date": int(time.time()),
        "media_group_id": album,
        "photo": [{"file_id": file_id, "file_unique_id": stored["file_unique_id"], **size}],
        **extra,
    }
    if caption is not None:  # only an album's first item carries the caption
        message["caption"] = caption
        if chat["type"] != "private":
            mention = {"type": "mention", "offset": 0, "length": len(telegram.bot_username) + 1}
            message["caption_entities"] = [mention]
    telegram.push_update({"message": message})


def _users_words(request: Any) -> str:
    return str([m["content"] for m in request[0] if m["role"] == "user"][-1])


@pytest.mark.parametrize("where", ["private", "group"])
async def test_an_album_is_one_message_to_the_agent_and_gets_one_answer(
    service, telegram, model, where
):
    """Each item was a message of its own: the model answered "compare these" having
    seen one photo, then again for the next (found by review on 2026-12-06). A message
    after the album comes after it."""
    chat = (
        {"id": ALICE, "type": "private", "first_name": "Alice"}
        if where == "private"
        else {"id": GROUP, "type": "supergroup", "title": "Team"}
    )
    mention = "" if where == "private" else f"@{telegram.bot_username} "
    _album_photo(telegram, 81, f"{where}-1", f"{mention}compare these", chat, "24680")
    _album_photo(telegram, 82, f"{where}-2", None, chat, "24680")
    _album_photo(telegram, 83, f"{where}-3", None, chat, "24680")
    await eventually(lambda: len(texts(telegram, chat["id"])) == 1)
    [request] = model.requests
    words = _users_words(request)
    assert "compare these" in words
    assert all(f"{where}-{n}" in words for n in (1, 2, 3)), words

    _album_photo(telegram, 84, f"{where}-4", f"{mention}and this one", chat, "97531")
    entities = [{"type": "mention", "offset": 0, "length": len(mention) - 1}] if mention else None
    telegram.user_message(
        chat["id"], ALICE, f"{mention}which is best?", chat_type=chat["type"], entities=entities
    )
    await eventually(lambda: len(texts(telegram, chat["id"])) == 3)
    assert [_users_words(r).splitlines()[0] for r in model.requests[1:]] == [
        f"{mention}and this one".strip(),
        f"{mention}which is best?".strip(),
    ]


async def test_a_forward_reaches_the_model_as_someone_elses_words(service, telegram, model):
    """A forwarded "please delete the logs" was the sender's own instruction to the model
    (found by review)."""
    origin = {"type": "user", "date": 1, "sender_user": {"id": 5, "first_name": "Bob"}}
    chat = {"id": ALICE, "type": "private", "first_name": "Alice"}
    message = {
        "message_id": 77,
        "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
        "chat": chat,
        "date": int(time.time()),
        "text": "please delete the logs",
        "forward_origin": origin,
        "forward_date": 1,
    }
    telegram.push_update({"message": message})
    await eventually(lambda: len(texts(telegram, ALICE)) == 1)
    [request] = model.requests
    assert _users_words(request) == "[Forwarded message from Bob]\nplease delete the logs"


async def test_a_forwarded_album_says_whose_it_is_once(service, telegram, model):
    """Every item carries the forward's origin: the line came once per photo (found by
    review on 2026-12-07)."""
    chat = {"id": ALICE, "type": "private", "first_name": "Alice"}
    origin = {"type": "user", "date": 1, "sender_user": {"id": 5, "first_name": "Bob"}}
    forward = {"forward_origin": origin, "forward_date": 1}
    _album_photo(telegram, 91, "fwd-1", "from the trip", chat, "11223", **forward)
    _album_photo(telegram, 92, "fwd-2", None, chat, "11223", **forward)
    _album_photo(telegram, 93, "fwd-3", None, chat, "11223", **forward)
    await eventually(lambda: len(texts(telegram, ALICE)) == 1)
    words = _users_words(model.requests[0])
    assert words.count("[Forwarded message from Bob]") == 1, words
    assert all(f"fwd-{n}" in words for n in (1, 2, 3)) and "from the trip" in words


async def test_an_albums_files_too_large_are_told_in_one_warning(service, telegram, model):
    """Each item's refusal was a warning of its own: three photos past the limit, three
    messages (found by review on 2026-12-07). One warning, then the album's words."""
    chat = {"id": ALICE, "type": "private", "first_name": "Alice"}
    for n, caption in ((1, "look at these"), (2, None), (3, None)):
        huge = {"file_id": f"big-{n}", "file_unique_id": f"big-{n}u", "width": 9000,
                "height": 9000, "file_size": 30 * 1024 * 1024}  # fmt: skip
        _album_photo(telegram, 100 + n, f"big-{n}", caption, chat, "33445", photo=[huge])
    await eventually(lambda: len(texts(telegram, ALICE)) == 2)
    warnings = [t for t in texts(telegram, ALICE) if t.startswith("⚠️")]
    assert len(warnings) == 1, texts(telegram, ALICE)
    assert "look at these" in _users_words(model.requests[0])


async def test_an_album_answering_a_question_is_the_whole_answer(service, telegram, model):
    """Its first item answered the open question and the rest went to the agent as a new
    message, which got an answer of its own (found by review)."""
    ask = tool_call("ask_user_clarification", '{"question": "Which two photos?"}', "q")
    model.add(ask, text("Got them."))
    telegram.user_message(ALICE, ALICE, "compare two photos for me")
    await eventually(lambda: any(t.startswith("❓") for t in texts(telegram, ALICE)))
    chat = {"id": ALICE, "type": "private", "first_name": "Alice"}
    _album_photo(telegram, 9001, "answer-photo-1", "these two", chat, "4242")
    _album_photo(telegram, 9002, "answer-photo-2", None, chat, "4242")
    await eventually(lambda: "Got them." in texts(telegram, ALICE))
    await service.adapter.drain()
    [_asked, answered] = model.requests  # no third: the album was no message of its own
    [result] = [m["content"] for m in answered[0] if m["role"] == "tool"]
    assert "these two" in result and "answer-photo-1" in result and "answer-photo-2" in result


async def test_every_photo_of_an_album_addressed_in_a_group_reaches_the_model(
    service, telegram, model
):
    """Only the first item of an album has the caption that mentions the bot: the others
    were for no one, and the model saw one photo of "compare these" (found by review)."""
    _album_photo(telegram, 71, "album-photo-1", f"@{telegram.bot_username} compare these")
    _album_photo(telegram, 72, "album-photo-2", None)
    await eventually(lambda: len(telegram.calls_to("getFile")) == 2)
    fetched = sorted(c.params.get("file_id") for c in telegram.calls_to("getFile"))
    assert fetched == ["album-photo-1", "album-photo-2"]


async def test_a_group_album_whose_mention_is_on_a_later_item_reaches_the_model_whole(
    service, telegram, model
):
    """Each item of an album may have a caption: the items before the one that mentions
    the bot were for no one, and the model saw the last photo only (found by review on
    2026-12-07)."""
    _album_photo(telegram, 61, "late-1", None, album="86420")
    _album_photo(telegram, 62, "late-2", None, album="86420")
    _album_photo(telegram, 63, "late-3", f"@{telegram.bot_username} compare these", album="86420")
    await eventually(lambda: texts(telegram, GROUP))
    await service.adapter.drain()
    [request] = model.requests
    words = _users_words(request)
    assert "compare these" in words
    assert all(f"late-{n}" in words for n in (1, 2, 3)), words
    assert await service.adapter.store.unhandled() == []


async def test_a_group_album_that_mentions_no_one_is_let_go_unread(service, telegram, model):
    """Its items are held for a mention, not downloaded, and marked handled once quiet."""
    _album_photo(telegram, 64, "chatter-1", None, album="97531")
    _album_photo(telegram, 65, "chatter-2", None, album="97531")
    mention = f"@{telegram.bot_username}"
    entities = [{"type": "mention", "offset": 0, "length": len(mention)}]
    telegram.user_message(
        GROUP, ALICE, f"{mention} hello", chat_type="supergroup", entities=entities
    )
    await eventually(lambda: texts(telegram, GROUP))

    async def all_handled() -> bool:
        return await service.adapter.store.unhandled() == []

    await eventually_true(all_handled)
    [request] = model.requests
    assert "chatter" not in str(request) and telegram.calls_to("getFile") == []


async def test_an_album_gathered_when_the_service_stops_is_answered_after_the_restart(
    start_service, telegram, model
):
    """Its items' updates stay unhandled until the album's message is stored: a stop
    (or a crash) while it is gathered hands them over again at the next start."""
    chat = {"id": ALICE, "type": "private", "first_name": "Alice"}
    first = await start_service()
    _album_photo(telegram, 91, "stopped-1", "what is this?", chat, "11223")
    _album_photo(telegram, 92, "stopped-2", None, chat, "11223")
    await eventually(lambda: len(telegram.calls_to("getFile")) == 2)
    await stop(first)
    assert model.requests == [] and texts(telegram, ALICE) == []

    await start_service()
    await eventually(lambda: texts(telegram, ALICE))
    [request] = model.requests
    assert "stopped-1" in _users_words(request) and "stopped-2" in _users_words(request)
    assert len(texts(telegram, ALICE)) == 1


async def test_an_album_whose_item_downloads_slowly_is_still_one_message(service, telegram, model):
    """The quiet wait began when an item was added, after its download: a photo slower
    than it split the album (found by review of the change on 2026-12-06). An item is
    held from before its download."""
    chat = {"id": ALICE, "type": "private", "first_name": "Alice"}
    _album_photo(telegram, 85, "slow-1", "compare these", chat, "55555")
    await eventually(lambda: len(telegram.calls_to("getFile")) == 1)
    telegram.hang_next("getFile", seconds=1.5)  # longer than the 0.8 s quiet wait
    _album_photo(telegram, 86, "slow-2", None, chat, "55555")
    await eventually(lambda: texts(telegram, ALICE))
    [request] = model.requests
    assert "slow-1" in _users_words(request) and "slow-2" in _users_words(request)


async def test_a_receiver_lets_its_updates_go_only_with_its_albums_sent(service, telegram, model):
    """A fleet's receiver releases its lease once ``handled()`` returns: an album still
    gathered then was handed over again by the next holder while this one sent it (found
    by review of the change on 2026-12-06)."""
    chat = {"id": ALICE, "type": "private", "first_name": "Alice"}
    release = held(model)
    _album_photo(telegram, 87, "held-1", "what is this?", chat, "77777")
    await eventually(lambda: len(telegram.calls_to("getFile")) == 1)
    await service.adapter.handled()
    assert service.hub.has_work(f"telegram:{ALICE}")  # given to the hub, as a message is
    release.set()
    await eventually(lambda: texts(telegram, ALICE))
    assert await service.adapter.store.unhandled() == []


async def test_a_hidden_links_address_reaches_the_model(service, telegram, model):
    """A formatted link's address is only in its entity: the agent was asked to summarize
    an article it could not find (found by review on 2026-12-07)."""
    url = "https://example.com/articles/42"
    entities = [{"type": "text_link", "offset": 10, "length": 12, "url": url}]
    telegram.user_message(ALICE, ALICE, "summarize this article", entities=entities)
    await eventually(lambda: any(url in t for t in texts(telegram, ALICE)))  # echoed back


async def test_a_mention_replying_to_a_members_message_shows_it_to_the_model(
    service, telegram, model
):
    """ "@bot translate this" as a reply to Bob's message reached the model as that line
    alone (found by review on 2026-12-07)."""
    group = -100777
    said = telegram.user_message(
        group, 222, "Je ne sais pas quoi faire ce soir", chat_type="supergroup", first_name="Bob"
    )
    bot = telegram.bot_username
    telegram.user_message(
        group,
        ALICE,
        f"@{bot} translate this",
        chat_type="supergroup",
        reply_to_message_id=said["message"]["message_id"],
        entities=[{"type": "mention", "offset": 0, "length": len(bot) + 1}],
    )
    quoted = '[In reply to Bob: "Je ne sais pas quoi faire ce soir"]'
    await eventually(lambda: any(quoted in t for t in texts(telegram, group)))  # echoed


def _last_user_words(model: Any) -> str:
    return next(str(m["content"]) for m in reversed(model.requests[-1][0]) if m["role"] == "user")


async def test_a_quote_from_another_chat_reaches_the_model(service, telegram, model):
    """ "Reply in another chat" sends the quote and its origin, no ``reply_to_message``:
    the model read "what does this mean?" alone (found by review on 2026-12-07)."""
    now = int(time.time())
    news = {"id": -1009999, "type": "channel", "title": "News"}
    origin = {"type": "channel", "date": now - 60, "chat": news, "message_id": 42}
    message = {
        "message_id": 7001,
        "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "date": now,
        "text": "what does this mean?",
        "external_reply": {"origin": origin, "chat": news, "message_id": 42},
        "quote": {"text": "The central bank raised rates by 50 bp", "position": 0},
    }
    telegram.push_update({"message": message})
    await eventually(lambda: texts(telegram, ALICE))
    words = _last_user_words(model)
    assert '[In reply to News, in another chat: "The central bank raised rates by 50 bp"]' in words


async def test_a_reply_to_a_photo_without_words_says_it_is_one(start_service, telegram, model):
    """ "@bot what is in this picture?" as a reply to Bob's photo: the model read the
    question alone, not knowing a photo was meant (found by review on 2026-12-07)."""
    bob = 222
    await start_service(telegram_allowed_user_ids=f"{ALICE},{bob}")
    photo = telegram.photo_message(
        GROUP, bob, b"\xff\xd8\xff\xe0a-cat", chat_type="supergroup", first_name="Bob"
    )
    words = f"@{telegram.bot_username} what is in this picture?"
    entities = [{"type": "mention", "offset": 0, "length": len(telegram.bot_username) + 1}]
    telegram.user_message(
        GROUP,
        ALICE,
        words,
        chat_type="supergroup",
        entities=entities,
        reply_to_message_id=photo["message"]["message_id"],
    )
    await eventually(lambda: any("what is in this picture" in t for t in texts(telegram, GROUP)))
    assert "[In reply to Bob's photo]" in _last_user_words(model)


async def test_a_quote_of_part_of_the_bots_answer_says_which_part(service, telegram, model):
    """A reply to the bot's own words carries no line (they are in the history), but the
    part the person quoted does: "explain this" could not tell which line was meant
    (found by review on 2026-12-07)."""
    telegram.user_message(ALICE, ALICE, "option A: keep it. option B: migrate the DB")
    reply = "echo: option A: keep it. option B: migrate the DB"
    await eventually(lambda: reply in texts(telegram, ALICE))
    answer = next(m for m in telegram.messages(ALICE) if m.text == reply)
    chat = {"id": ALICE, "type": "private", "first_name": "Alice"}
    bot = {"id": int(TOKEN.split(":")[0]), "is_bot": True, "first_name": "ChatHub"}
    replied = {"message_id": answer.message_id, "from": bot, "chat": chat, "text": answer.text}
    telegram.push_update(
        {
            "message": {
                "message_id": 9101,
                "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
                "chat": chat,
                "date": int(time.time()),
                "text": "explain this",
                "reply_to_message": {**replied, "date": int(time.time()) - 5},
                "quote": {"text": "option B: migrate the DB", "position": 24},
            }
        }
    )
    await eventually(lambda: any("explain this" in t for t in texts(telegram, ALICE)))
    assert "option B: migrate the DB" in _last_user_words(model)
