"""Alice talks to the bot in a direct room on a real Synapse."""

from __future__ import annotations

from tests.bot.matrix.conftest import bodies, direct_room, joined, until


async def test_an_invite_from_alice_is_joined_and_she_gets_an_answer(make_service, accounts):
    await make_service()
    room = direct_room(accounts)
    await until(lambda: joined(accounts.alice, room, accounts.bot.user_id))

    accounts.alice.say(room, "hello there")

    await until(lambda: "echo: hello there" in bodies(accounts.alice, room, accounts.bot.user_id))
