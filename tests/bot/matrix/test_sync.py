"""The sync loop's own steps, without a homeserver: how long it waits after a failure."""

from __future__ import annotations

from typing import Any

import pytest
from nio.responses import SyncError

from bot.matrix.people import MatrixMe
from bot.matrix.sending import Rooms
from bot.matrix.sync import SyncLoop, _as_edited


class _Stopped(Exception):
    """Ends the loop after the wait it chose."""


class _Limited:
    """A homeserver whose every /sync answers 429 with a wait of 7 s."""

    async def sync(self, **_: Any) -> SyncError:
        return SyncError("Too Many Requests", "M_LIMIT_EXCEEDED", 7000)


class _Settings:
    async def get(self, key: str) -> str:
        return "s1"


async def test_a_limited_sync_waits_what_the_homeserver_asked() -> None:
    """It came back after its own half a second, into the same limit (found by review)."""
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)
        raise _Stopped

    loop = SyncLoop(
        _Limited(),  # type: ignore[arg-type]
        MatrixMe(user_id="@bot:hs"),
        Rooms(),
        _Settings(),  # type: ignore[arg-type]
        take=lambda events: None,  # type: ignore[arg-type,return-value]
        sleep=sleep,
    )
    with pytest.raises(_Stopped):
        await loop.run()
    assert waited == [7.0]


def _message(event_id: str, sender: str, body: str, **content: Any) -> dict[str, Any]:
    return {
        "type": "m.room.message",
        "event_id": event_id,
        "sender": sender,
        "content": {"msgtype": "m.text", "body": body, **content},
    }


def _edit(event_id: str, sender: str, of: str, new: dict[str, Any]) -> dict[str, Any]:
    replace = {"rel_type": "m.replace", "event_id": of}
    return _message(event_id, sender, "* edited", **{"m.new_content": new, "m.relates_to": replace})


def test_a_message_is_read_as_its_own_senders_last_whole_edit_in_the_batch() -> None:
    """Another member's "edit" (a client lets anyone send one) or one without its words
    must not become the message (found by review)."""
    timeline = [
        _message("$1", "@ann:hs", "delete the staging database"),
        _edit("$2", "@ann:hs", "$1", {"msgtype": "m.text", "body": "delete the staging cache"}),
        _edit("$3", "@eve:hs", "$1", {"msgtype": "m.text", "body": "delete everything"}),
        _edit("$4", "@ann:hs", "$1", {"body": "no type: not a message"}),
        _message("$5", "@bob:hs", "hello"),
    ]
    read = _as_edited(timeline)
    assert read[0]["content"]["body"] == "delete the staging cache"
    assert read[4] == timeline[4] and read[1:4] == timeline[1:4]
    assert _as_edited(timeline[:1]) == timeline[:1]


def test_a_deleted_message_takes_no_edit_of_the_batch() -> None:
    """Written, edited, then deleted while the bot was away: it was answered as edited
    (found by review on 2026-12-07). Synapse serves it empty with ``redacted_because``, or
    the redaction comes in the batch."""
    change = {"msgtype": "m.text", "body": "delete all my files now"}
    redacted = {
        "type": "m.room.message",
        "event_id": "$1",
        "sender": "@ann:hs",
        "content": {},
        "unsigned": {"redacted_because": {"type": "m.room.redaction", "redacts": "$1"}},
    }
    timeline = [redacted, _edit("$2", "@ann:hs", "$1", change)]
    assert _as_edited(timeline) == timeline
    later = [
        _message("$1", "@ann:hs", "delete the logs"),
        _edit("$2", "@ann:hs", "$1", change),
        {"type": "m.room.redaction", "event_id": "$3", "sender": "@ann:hs", "redacts": "$1"},
    ]
    read = _as_edited(later)
    assert read[0]["content"] == {} and read[1:] == later[1:]  # nothing left to answer
