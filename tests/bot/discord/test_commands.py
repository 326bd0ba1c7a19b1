"""Slash commands: registered once from the shared registry, each answered once."""

from __future__ import annotations

import httpx

from bot.discord.gateway import UNKNOWN_COMMAND
from bot.discord.interactions import NOT_HERE, NOT_PAIRED
from bot.discord.messages import IN_ITS_THREAD
from bot.platform.access import ASKED_ALREADY
from tests.bot.discord.conftest import (
    ALICE,
    BOB,
    GENERAL,
    GUILD,
    OTHER_CHANNEL,
    OWNER,
    TOKEN,
    MakeService,
    until,
)
from tests.fakes.discord_server import FakeDiscordServer

PUT_COMMANDS = "PUT /applications/{application_id}/commands"
FOLLOWUPS = "POST /webhooks/{webhook_id}/{webhook_token}"
CALLBACKS = "POST /interactions/{webhook_id}/{webhook_token}/callback"


async def test_the_shared_commands_are_registered_once_across_restarts(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    service = await make_service()
    await until(lambda: {"new", "stop", "model", "jobs", "memory", "search"} <= _names(fake))
    assert "pair" not in _names(fake)  # the owner's: typed, never in everyone's menu
    model = next(c for c in fake.commands if c["name"] == "model")
    assert [o["name"] for o in model.get("options", [])] == ["text"]
    await service.stop()
    await make_service()
    await until(lambda: len(fake.calls_to("GET /applications/{application_id}/commands")) == 2)
    assert len(fake.calls_to(PUT_COMMANDS)) == 1  # unchanged: not written again


async def test_a_slash_command_is_deferred_then_answered_in_place(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    await until(lambda: "model" in _names(fake))
    channel = fake.dm_channel_id(ALICE)
    fake.slash(channel, ALICE, "model", {"text": "1"})
    await until(lambda: any(m.content == "Model: primary." for m in fake.messages(channel)))
    assert [r.type for r in fake.interaction_responses] == [5]
    answer = next(m for m in fake.messages(channel) if m.content == "Model: primary.")
    assert answer.interaction_id is not None  # the deferral, edited: one message


async def test_forget_me_is_confirmed_through_its_slash_command(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """It asked for "/forget_me yes", which its slash command could not say: Discord's
    client sends only the options a command declares, and it declared none (found by
    review on 2026-12-06)."""
    await make_service()
    await until(lambda: "forget_me" in _names(fake))
    dm = fake.dm_channel_id(ALICE)
    fake.slash(dm, ALICE, "forget_me")
    await until(lambda: any("/forget_me yes" in m.content for m in fake.messages(dm)))
    fake.slash(dm, ALICE, "forget_me", {"text": "yes"})
    await until(lambda: any(m.content.startswith("Done: I deleted") for m in fake.messages(dm)))


async def test_in_her_own_dm_a_member_switches_memory_off_and_on(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A DM's source reads as a server channel's: memory took it for a group, where only
    the owner may switch it off, and showed only what was learned there (found by review;
    until 2026-12-07). The DM is recorded as hers when she writes there (its slash
    commands then take it so: an interaction without a guild may be a group DM's)."""
    service = await make_service()
    await until(lambda: "memory" in _names(fake))
    dm = fake.dm_channel_id(ALICE)
    fake.dm(ALICE, "/memory off")
    await until(lambda: any(m.content.startswith("Memory is off") for m in fake.messages(dm)))
    fake.slash(dm, ALICE, "memory", {"text": "on"})
    await until(
        lambda: any(m.content == "Memory is on in this chat again." for m in fake.messages(dm))
    )
    assert service.memory is not None and service.memory.is_personal(f"discord:{dm}")
    assert not service.memory.is_personal(f"discord:{GENERAL}")
    assert not any("only the bot's owner" in m.content for m in fake.messages(dm))


async def test_a_command_without_a_reply_leaves_no_thinking_message(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    await until(lambda: "new" in _names(fake))
    channel = fake.dm_channel_id(ALICE)
    fake.slash(channel, ALICE, "new")
    await until(lambda: any("New conversation" in m.content for m in fake.messages(channel)))
    await until(
        lambda: all(not m.interaction_id for m in fake.messages(channel, include_deleted=False))
    )


async def test_a_stranger_s_slash_command_in_their_dm_asks_for_access_to_them_alone(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """As a message in their DM does: a pairing code for them, the owner told (until
    2026-12-06 they were told to send a direct message, in one; found by review). A
    second one within the reminder window says the owner has the request."""
    await make_service()
    await until(lambda: "new" in _names(fake))
    dm = fake.dm_channel_id(BOB)
    fake.slash(dm, BOB, "new")
    await until(lambda: any("/pair" in m.content for m in fake.messages(fake.dm_channel_id(OWNER))))
    [deferred] = fake.interaction_responses
    assert deferred.type == 5 and deferred.data is not None and deferred.data["flags"] & 64
    code = next(m for m in fake.messages(dm) if m.interaction_id)
    assert "code" in code.content.lower() and code.ephemeral
    fake.slash(dm, BOB, "help")
    await until(lambda: any(m.content == ASKED_ALREADY for m in fake.messages(dm)))
    assert not any("New conversation" in m.content for m in fake.messages(dm))


async def test_a_stranger_s_slash_command_in_a_server_is_refused_to_them_alone(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    await until(lambda: "new" in _names(fake))
    fake.slash(GENERAL, BOB, "new")
    await until(lambda: len(fake.interaction_responses) == 1)
    response = fake.interaction_responses[0]
    assert response.type == 4 and response.data is not None
    assert response.data["content"] == NOT_PAIRED and response.data["flags"] & 64


def _names(fake: FakeDiscordServer) -> set[str]:
    return {c["name"] for c in fake.commands}


async def test_a_slash_command_from_a_server_outside_the_list_is_answered_once_and_refused(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    await until(lambda: "new" in _names(fake))
    fake.slash(OTHER_CHANNEL, ALICE, "new")
    await until(lambda: len(fake.interaction_responses) == 1)
    assert fake.interaction_responses[0].data["content"] == NOT_HERE
    channel = fake.dm_channel_id(ALICE)  # a later command, answered in full...
    fake.slash(channel, ALICE, "model", {"text": "1"})
    await until(lambda: any(m.content == "Model: primary." for m in fake.messages(channel)))
    # ...and no second answer to the first: one callback each, no follow-up.
    assert len(fake.calls_to(CALLBACKS)) == 2 and fake.calls_to(FOLLOWUPS) == []


async def test_a_command_an_older_version_registered_is_answered_not_left_hanging(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    await until(lambda: "new" in _names(fake))
    app = fake.calls_to(PUT_COMMANDS)[0].params["application_id"]
    async with httpx.AsyncClient() as http:  # as an older version registered it
        created = await http.post(
            f"{fake.base_url}/applications/{app}/commands",
            json={"name": "weather", "description": "gone since", "type": 1},
            headers={"Authorization": f"Bot {TOKEN}"},
        )
    assert created.status_code in (200, 201)
    fake.slash(fake.dm_channel_id(ALICE), ALICE, "weather")
    await until(lambda: len(fake.interaction_responses) == 1)
    response = fake.interaction_responses[0]
    assert response.data is not None and response.data["content"] == UNKNOWN_COMMAND


async def test_a_conversations_command_in_a_thread_channel_names_the_thread_instead(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """Each mention there starts a thread, its own conversation: "/voice on" in the
    channel set the channel's source, which no conversation uses, and said replies would
    come as voice; the next thread was answered in text (found by review on 2026-12-07)."""
    await make_service(discord_thread_channel_ids=str(GENERAL))
    await until(lambda: "voice" in _names(fake))
    fake.slash(GENERAL, ALICE, "voice", {"text": "on"})
    told = IN_ITS_THREAD.format(name="voice")
    await until(lambda: any(m.content == told and m.ephemeral for m in fake.messages(GENERAL)))
    fake.channel_message(GUILD, GENERAL, ALICE, "/new", mentions_bot=True)
    await until(
        lambda: IN_ITS_THREAD.format(name="new") in [m.content for m in fake.messages(GENERAL)]
    )
    thread = fake.channel_message(GUILD, GENERAL, ALICE, "plan my week", mentions_bot=True)["id"]
    await until(lambda: "echo: plan my week" in [m.content for m in fake.messages(thread)])
    fake.slash(thread, ALICE, "model", {"text": "1"})  # in the thread: its conversation's
    await until(lambda: any(m.content == "Model: primary." for m in fake.messages(thread)))
