"""Parsing a file message's caption (MSC2530: ``filename`` names the file, ``body`` is
then its caption)."""

from __future__ import annotations

from bot.matrix.incoming import Incoming

ME = "@bot:example.org"
ROOM = "!room:example.org"


def parsed(**content) -> Incoming:
    audio = {"msgtype": "m.audio", "url": "mxc://hs/abc", "info": {"mimetype": "audio/ogg"}}
    event = {
        "type": "m.room.message",
        "sender": "@alice:example.org",
        "event_id": "$e1",
        "content": {**audio, **content},
    }
    m = Incoming.of(event, ROOM, ME)
    assert m is not None
    return m


def test_a_captioned_audio_message_keeps_its_caption_as_its_text() -> None:
    """Until 2026-12-07 every file message's text was empty: the caption Element X sends
    in ``body`` (the file named in ``filename``) never reached the model (found by
    review)."""
    m = parsed(body="Translate this into French", filename="standup.ogg")
    assert m.text == "Translate this into French"
    assert m.files == 1 and m.audio is not None and m.audio["name"] == "standup.ogg"


def test_a_file_whose_body_is_its_name_has_no_text() -> None:
    assert parsed(body="standup.ogg", filename="standup.ogg").text == ""
    assert parsed(body="Voice message").text == ""  # Element's voice message: no filename


def test_a_captioned_reply_loses_its_quoted_fallback() -> None:
    m = parsed(
        body="> <@bob:example.org> the plan\n\nsummarise this",
        filename="standup.ogg",
        **{"m.relates_to": {"m.in_reply_to": {"event_id": "$card"}}},
    )
    assert m.text == "summarise this" and m.relates_to == "$card"
