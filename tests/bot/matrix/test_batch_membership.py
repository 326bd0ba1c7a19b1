"""A room's members as of each event, not as of the end of the /sync batch it came in.

A person's message in their direct room, then (in the same batch: the bot was down, or
slow) a third member's join: the message was judged by the room's members at the batch's
end (three), taken for a group room's message to nobody, dropped, and the sync token moved
past it. The person was never answered. The other way round, a group room's chatter
followed in the same batch by a member's leave was taken for a direct message, and
answered. Both run on a real Synapse (``tests/bot/matrix/conftest.py``), the bot stopped
while the room changes so that its next sync brings the message and the membership change
together.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest

from tests.bot.matrix.conftest import bodies, direct_room, joined, until
from tests.bot.telegram_contract.conftest import stop


def _said(people, room):
    return "\n".join(bodies(people.alice, room, people.bot.user_id))


@pytest.mark.parametrize("timeline_limit", [50, 2], ids=["one-answer", "gap-read-back"])
async def test_a_direct_message_followed_by_a_join_in_the_same_batch_is_answered(
    make_service,
    accounts,
    timeline_limit,
):
    """Alice writes in her direct room; before the bot reads it, she asks Bob in. The
    message was to the bot (the room held the two of them): it is answered. What is said
    after Bob joined is a group room's, answered when it names the bot. ``gap-read-back``:
    the message is not in the sync's timeline but read back through ``/messages``."""
    alice, bob, bot = accounts.alice, accounts.bob, accounts.bot
    service = await make_service(timeline_limit=timeline_limit)
    room = direct_room(accounts)
    await until(lambda: joined(alice, room, bot.user_id))
    alice.say(room, "hi")
    await until(lambda: "echo: hi" in _said(accounts, room))
    await stop(service)

    alice.say(room, "are you there?")  # two members: the bot's direct room with Alice
    alice.invite(room, bob.user_id)
    bob.join(room)  # three members from here on
    await make_service(timeline_limit=timeline_limit)

    await until(lambda: "echo: are you there?" in _said(accounts, room))
    alice.say(room, "Bob, this is the bot")  # a group room now: not for the bot
    alice.say(room, "bot, ping", **{"m.mentions": {"user_ids": [bot.user_id]}})
    await until(lambda: "echo: bot, ping" in _said(accounts, room))
    await asyncio.sleep(0.5)
    said = _said(accounts, room)
    assert "this is the bot" not in said
    assert said.count("echo: are you there?") == 1


async def test_group_chatter_followed_by_a_leave_in_the_same_batch_is_not_answered(
    make_service,
    accounts,
):
    """The mirror case: Alice talks to the owner in a room of three; the owner leaves
    before the bot reads it. The chatter was not to the bot (it was answered as a direct
    message: the room held two at the batch's end). After the leave the room is Alice's
    and the bot's, and answered."""
    alice, owner, bot = accounts.alice, accounts.owner, accounts.bot
    service = await make_service()
    room = alice.create_room(invite=[bot.user_id, owner.user_id])
    await until(lambda: joined(alice, room, bot.user_id))
    owner.join(room)
    alice.say(room, "bot, hello", **{"m.mentions": {"user_ids": [bot.user_id]}})
    await until(lambda: "echo: bot, hello" in _said(accounts, room))
    await stop(service)

    alice.say(room, "chatter among people")  # three members: not for the bot
    owner.request("POST", f"/_matrix/client/v3/rooms/{quote(room, safe='')}/leave", {})
    await make_service()

    alice.say(room, "now just us")  # two members: answered without a mention
    await until(lambda: "echo: now just us" in _said(accounts, room))
    await asyncio.sleep(0.5)
    assert "chatter" not in _said(accounts, room)


def _member(event_id, user, membership, before=None, **unsigned):
    if before is not None:
        unsigned["prev_content"] = {"membership": before}
    return {
        "type": "m.room.member",
        "event_id": event_id,
        "state_key": user,
        "sender": user,
        "content": {"membership": membership},
        "unsigned": unsigned,
    }


def test_each_events_members_are_walked_back_from_the_batchs_end():
    """The count at the batch's end (the summary's) less what the member events after
    each event changed; a member event whose previous membership is not shown stops the
    walk (the earlier events' rooms are asked, as before the fix)."""
    from types import SimpleNamespace

    from bot.matrix.sync import _members_when_sent  # the fix's (absent before it)

    said = {"type": "m.room.message", "content": {"msgtype": "m.text", "body": "hi"}}
    timeline = [
        {**said, "event_id": "$1", "sender": "@ann:hs"},
        _member("$2", "@bob:hs", "invite"),
        _member("$3", "@bob:hs", "join", before="invite"),
        {**said, "event_id": "$4", "sender": "@ann:hs"},
        _member("$5", "@bob:hs", "join", before="join"),  # a new display name
        _member("$6", "@cy:hs", "join"),  # no earlier membership: a first join
        _member("$7", "@bob:hs", "leave", before="join"),
        {**said, "event_id": "$8", "sender": "@ann:hs"},
    ]
    summary = SimpleNamespace(joined_member_count=3)
    assert _members_when_sent(timeline, summary) == {"$1": 2, "$4": 3, "$8": 3}
    assert _members_when_sent(timeline, SimpleNamespace(joined_member_count=None)) == {}
    assert _members_when_sent(timeline[:1], summary) == {}  # no member event: as before
    unknown = _member("$3", "@bob:hs", "join", replaces_state="$2")  # no prev_content
    assert _members_when_sent([timeline[0], unknown, timeline[3]], summary) == {"$4": 3}
