"""bot/telegram/inbound/media.py: each non-text kind, and its malformed cases, at the edge."""

from __future__ import annotations

from typing import Any

import pytest

from bot.telegram.inbound.fields import Drops
from bot.telegram.inbound.media import MEDIA_FIELDS, descriptions_of, files_of
from tests.bot.telegram_unit.test_update_validation import message, parsed


def without_text(**fields: Any) -> dict[str, Any]:
    return message(text=None, **fields)


@pytest.mark.parametrize(
    ("field", "junk"),
    [
        ("contact", {"vcard": "x"}),  # neither a phone nor a name
        ("contact", "not an object"),
        ("poll", {"options": [{"text": "a"}]}),  # no question
        ("dice", {"emoji": "🎲"}),  # no value
        ("dice", {"emoji": "🎲", "value": "six"}),
        ("game", {"description": "no title"}),
        ("venue", {"location": {"latitude": 1, "longitude": 2}}),  # no title or address
    ],
)
def test_a_malformed_described_kind_is_dropped(field: str, junk: Any) -> None:
    m = parsed(message(**{field: junk}))
    assert m.described == () and m.text == "hello" and m.dropped


def test_poll_options_that_are_junk_are_skipped() -> None:
    poll = {"question": "Q?", "options": [{"text": "yes"}, 5, {"text": 7}, {"text": ""}, None]}
    assert parsed(without_text(poll=poll)).described == ("📊 Poll: Q?\n- yes",)


def test_a_long_poll_is_cut() -> None:
    options = [{"text": f"option {i}" + "x" * 400} for i in range(30)]
    [line] = parsed(without_text(poll={"question": "Q" * 1000, "options": options})).described
    assert line.count("\n- ") == 12 and len(line) < 12 * 320 + 400


def test_a_venue_shows_its_point_once() -> None:
    venue = {"title": "Cafe", "address": "Main St", "location": {"latitude": 1.5, "longitude": 2}}
    m = parsed(without_text(venue=venue, location={"latitude": 1.5, "longitude": 2}))
    assert m.described == ("📍 Venue: Cafe, Main St (1.500000, 2.000000)",)
    assert m.location is None


def test_a_sticker_without_emoji() -> None:
    sticker = {"file_id": "s", "file_unique_id": "su", "type": "regular"}
    assert parsed(without_text(sticker=sticker)).described == ("[Sticker]",)


@pytest.mark.parametrize("kind", ["audio", "video", "video_note", "animation"])
def test_a_media_file_without_file_id_is_dropped(kind: str) -> None:
    m = parsed(message(**{kind: {"file_unique_id": "u", "duration": 3}}))
    assert m.files == () and any(kind in d for d in m.dropped)


def test_media_duration_and_defaults() -> None:
    m = parsed(without_text(video_note={"file_id": "vn", "file_unique_id": "vnu", "duration": -4}))
    [ref] = m.files
    assert (ref.kind, ref.name, ref.mime_type, ref.duration, ref.size) == (
        "video_note",
        "video_note_vnu.mp4",
        "video/mp4",
        None,  # a negative duration is junk
        None,  # file_size missing: the download checks getFile's size
    )


def test_an_animation_is_one_file_not_two() -> None:
    gif = {"file_id": "g", "file_unique_id": "gu", "file_name": "a.mp4", "duration": 1}
    m = parsed(without_text(animation=gif, document=dict(gif)))
    assert [f.kind for f in m.files] == ["animation"]


def test_a_voice_note_is_a_file_to_transcribe() -> None:
    voice = {"file_id": "v", "file_unique_id": "vu", "duration": 2}
    (ref,) = parsed(without_text(voice=voice)).files
    assert (ref.kind, ref.name, ref.mime_type, ref.duration) == (
        "voice",
        "voice_vu.ogg",
        "audio/ogg",
        2,
    )


def test_a_reply_to_the_topic_creation_is_not_a_reply() -> None:
    created = {
        "message_id": 77,
        "from": {"id": 123456, "is_bot": True, "first_name": "Bot"},
        "chat": {"id": -100, "type": "supergroup"},
        "forum_topic_created": {"name": "Ops", "icon_color": 1},
    }
    m = parsed(
        message(
            chat={"id": -100, "type": "supergroup", "is_forum": True},
            message_thread_id=77,
            is_topic_message=True,
            reply_to_message=created,
        )
    )
    assert m.thread_id == 77 and m.reply_to_message_id is None and m.reply_to_user_id is None
    # The same without the service field: the topic's root message id counts too.
    created.pop("forum_topic_created")
    m = parsed(
        message(
            chat={"id": -100, "type": "supergroup", "is_forum": True},
            message_thread_id=77,
            is_topic_message=True,
            reply_to_message=created,
        )
    )
    assert m.reply_to_user_id is None


def test_a_service_message_is_ignored() -> None:
    from bot.telegram.inbound.updates import Ignored, parse_update

    result = parse_update(without_text(new_chat_members=[{"id": 5, "first_name": "Eve"}]))
    assert isinstance(result, Ignored) and "new_chat_members" in result.reason


def test_every_field_the_media_readers_touch_is_a_media_field() -> None:
    """A text message skips the media readers (``MEDIA_FIELDS``); a field they read but the
    set lacked would be silently ignored. Record every field they read on a message that
    has all of them, and compare."""
    read: set[str] = set()

    class Recording(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            read.add(key)
            return super().get(key, default)

        def __getitem__(self, key: str) -> Any:
            read.add(key)
            return super().__getitem__(key)

        def __contains__(self, key: object) -> bool:
            read.add(str(key))
            return super().__contains__(key)

    drops = Drops("message")
    files_of(Recording(), drops)
    descriptions_of(Recording(), drops)
    assert read and read <= MEDIA_FIELDS
    assert parsed(message()).files == () and parsed(message()).described == ()
