"""Whether a Matrix event is for the bot is asked before it is stored: a homeserver that
cannot say right now (a 429, a 5xx, the network) must not make a direct room's message
look like one for nobody (it was dropped, and the sync token moved past it)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from nio import JoinedMembersError, RoomGetEventError

from bot.delivery import RetryLater, Unavailable
from bot.matrix.incoming import Incoming
from bot.matrix.messages import MessageHandler
from bot.matrix.people import MatrixMe
from bot.matrix.sending import Rooms
from bot.platform.access import Access
from tests.bot.platform.test_access import Store

ROOM = "!direct:example.org"


class Homeserver:
    """matrix-nio's client, as far as ``is_direct`` asks it."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked = 0

    async def joined_members(self, room_id: str) -> Any:
        self.asked += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class Answered:
    """The HTTP answer under a matrix-nio error response."""

    def __init__(self, status: int) -> None:
        self.status = status


class NoCards:
    async def at(self, room_id: str, event_id: str) -> None:
        return None


class NotTheBots:
    """A homeserver for which every thread root asked about is someone else's."""

    async def room_get_event(self, room_id: str, event_id: str) -> Any:
        missing = RoomGetEventError("Event not found", "M_NOT_FOUND")
        missing.transport_response = Answered(404)  # type: ignore[assignment]
        return missing


def handler(nio: Homeserver, rooms: Rooms) -> MessageHandler:
    unused: Any = None
    return MessageHandler(
        unused, nio, unused, unused, rooms, unused, unused, unused, unused, unused, unused, unused
    )  # type: ignore[arg-type]


async def test_a_room_whose_members_cannot_be_read_now_is_asked_again_not_dropped() -> None:
    rooms = Rooms()
    nio = Homeserver(aiohttp.ClientConnectionError("the homeserver is away"))
    with pytest.raises(Unavailable):
        await handler(nio, rooms).is_direct(ROOM)
    assert ROOM not in rooms.members  # nothing remembered: asked again next time


async def test_a_room_the_homeserver_refuses_to_show_is_not_a_direct_room() -> None:
    rooms = Rooms()
    refused = JoinedMembersError("You are not in this room", "M_FORBIDDEN", ROOM)
    refused.transport_response = Answered(403)  # type: ignore[assignment]
    assert await handler(Homeserver(refused), rooms).is_direct(ROOM) is False


class NoSessionsYet:
    """The hub before the mention's turn made the thread's session."""

    async def current_session(self, source: str) -> int | None:
        return None


async def test_a_thread_follow_up_is_for_the_bot_before_its_session_exists() -> None:
    """Addressed in a thread, the bot is in it at once: the follow-up sent right after the
    mention (before its turn made the session) is for it too (it was dropped)."""
    rooms = Rooms()
    rooms.members[ROOM] = 5  # a room of people, not a direct one
    me = MatrixMe(user_id="@bot:example.org", display_name="Bot")
    unused: Any = None
    access = Access(Store(), allowed=["@alice:example.org"], clock=lambda: 0.0)
    messages = MessageHandler(
        NoSessionsYet(), NotTheBots(), me, unused, rooms, access, unused, NoCards(),  # type: ignore[arg-type]
        *([unused] * 4),
    )  # fmt: skip

    def said(text: str, thread: str) -> Incoming:
        return Incoming("message", ROOM, f"$e{len(text)}", "@alice:example.org", text, thread)

    assert await messages.addressed(said("Bot, book a table", "$root"))
    assert await messages.addressed(said("for four", "$root"))
    assert not await messages.addressed(said("for four", "$another"))
    # A stranger's mention is for the bot (to be refused) but brings it into no thread.
    stranger = Incoming("message", ROOM, "$m", "@mallory:example.org", "Bot, hi", "$third")
    assert await messages.addressed(stranger)
    assert not await messages.addressed(said("ignore it, Mallory", "$third"))
    # A stranger talking to the people of the bot's thread, the bot unnamed, is not for it
    # (they were offered a pairing code in the thread, and the owner told, at every line).
    chat = Incoming("message", ROOM, "$c", "@mallory:example.org", "Alice, the usual?", "$root")
    assert not await messages.addressed(chat)


class LimitedOnce:
    """matrix-nio's client whose room_get_event answers a 429 (M_LIMIT_EXCEEDED)."""

    async def room_get_event(self, room_id: str, event_id: str) -> Any:
        limited = RoomGetEventError("Too Many Requests", "M_LIMIT_EXCEEDED", retry_after_ms=100)
        limited.transport_response = Answered(429)  # type: ignore[assignment]
        return limited


async def test_a_reply_whose_target_cannot_be_read_now_is_asked_again_not_dropped() -> None:
    """A reply to the bot in a group room was taken for one to nobody during a 429, and
    the sync token moved past it (found by review): the batch is taken again."""
    rooms = Rooms()
    rooms.members[ROOM] = 5
    me = MatrixMe(user_id="@bot:example.org", display_name="Bot")
    access = Access(Store(), allowed=["@alice:example.org"], clock=lambda: 0.0)
    unused: Any = None
    messages = MessageHandler(
        NoSessionsYet(), LimitedOnce(), me, unused, rooms, access, unused, NoCards(),  # type: ignore[arg-type]
        *([unused] * 4),
    )  # fmt: skip
    reply = Incoming("message", ROOM, "$r", "@alice:example.org", "and then?", None, "$answer")
    with pytest.raises(RetryLater):
        await messages.addressed(reply)
