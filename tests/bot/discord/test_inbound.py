"""What reaches the bot from the gateway, and what it does not answer or answers once."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from typing import Any

import pytest

from bot.discord.incoming import Incoming
from bot.discord.messages import UNREADABLE_MESSAGE
from tests.bot.discord.conftest import (
    ALICE,
    BOB,
    GENERAL,
    GUILD,
    OTHER_CHANNEL,
    OTHER_GUILD,
    OWNER,
    MakeService,
    answered_then_down,
    discord_of,
    stored,
    texts,
    until,
)
from tests.engine.hub.conftest import held
from tests.fakes.discord_server import INTENT_MESSAGE_CONTENT, FakeDiscordServer

CHANNEL_PINNED_MESSAGE, THREAD_CREATED = 6, 18  # Discord's message types


async def settle(fake: FakeDiscordServer, user: int, service) -> None:
    """Until everything pushed before reached the bot and was handled: a later message of
    the same DM is answered after them (one channel's messages are handled in order)."""
    channel = fake.dm_channel_id(user)
    fake.dm(user, "sentinel")
    await until(lambda: "echo: sentinel" in texts(fake, channel))
    await discord_of(service).drain()


async def test_guilds_outside_the_list_and_unmentioned_messages_are_ignored(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    service = await make_service()
    fake.channel_message(OTHER_GUILD, OTHER_CHANNEL, ALICE, "over here", mentions_bot=True)
    fake.channel_message(GUILD, GENERAL, ALICE, "just chatting")
    fake.channel_message(GUILD, GENERAL, ALICE, "and you?", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["echo: and you?"])
    await settle(fake, ALICE, service)
    assert texts(fake, OTHER_CHANNEL) == []
    assert [m for r in model.requests for m in r[0] if "over here" in str(m.get("content"))] == []


async def test_a_message_delivered_twice_is_answered_once(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    service = await make_service()
    pushed = fake.dm(ALICE, "only once")
    channel = pushed["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: only once"])
    fake.dispatch("MESSAGE_CREATE", copy.deepcopy(pushed))  # a replay, as after a RESUME
    await settle(fake, ALICE, service)
    assert texts(fake, channel) == ["echo: only once", "echo: sentinel"]


async def test_discords_own_lines_in_an_open_channel_are_not_answered(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """Someone starts a thread and pins a message: Discord's lines for them ("started a
    thread: weekend plans", "pinned a message") are no one talking (the bot answered the
    thread's name as a prompt, and said it cannot read the pin; found by review)."""
    fake.allowed_intents |= INTENT_MESSAGE_CONTENT
    await make_service(discord_open_channel_ids=str(GENERAL))
    fake.channel_message(GUILD, GENERAL, ALICE, "weekend plans", kind=THREAD_CREATED)
    fake.channel_message(GUILD, GENERAL, ALICE, "", kind=CHANNEL_PINNED_MESSAGE)
    fake.channel_message(GUILD, GENERAL, ALICE, "hi all")
    await until(lambda: texts(fake, GENERAL)[-1:] == ["echo: hi all"])  # one lane: in order
    assert texts(fake, GENERAL) == ["echo: hi all"]


async def test_a_message_of_only_attachments_reaches_the_model_as_files(
    fake: FakeDiscordServer, make_service: MakeService, model, tmp_path
) -> None:
    await make_service()
    pushed = fake.dm(ALICE, "", attachments=[("notes.txt", b"remember the milk", "text/plain")])
    channel = pushed["channel_id"]
    await until(lambda: len(texts(fake, channel)) == 1)
    saved = list((tmp_path / "workspace" / "uploads" / "discord" / channel).iterdir())
    assert [p.read_bytes() for p in saved] == [b"remember the milk"]
    sent = str(model.requests[-1][0])
    assert "notes.txt" in sent


async def test_a_message_of_only_embeds_gets_one_plain_sentence(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    service = await make_service()
    pushed = fake.dm(ALICE, "first")
    channel = pushed["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: first"])
    embed_only = {**copy.deepcopy(pushed), "id": str(int(pushed["id"]) + 1), "content": ""}
    embed_only["embeds"] = [{"type": "link", "title": "A page", "url": "https://example.com"}]
    fake.dispatch("MESSAGE_CREATE", embed_only)
    await until(lambda: texts(fake, channel) == ["echo: first", UNREADABLE_MESSAGE])
    await settle(fake, ALICE, service)
    assert len(model.requests) == 2  # "first" and the sentinel


async def test_a_message_edited_or_deleted_while_its_turn_runs_is_answered_once(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    service = await make_service()
    release = held(model)
    pushed = fake.dm(ALICE, "think about it")
    channel = pushed["channel_id"]
    # Read: the model was asked (an edit before that corrects it, since 2026-12-07).
    await release.asked.wait()
    fake.dispatch("MESSAGE_UPDATE", {**copy.deepcopy(pushed), "content": "changed my mind"})
    fake.dispatch("MESSAGE_DELETE", {"id": pushed["id"], "channel_id": channel})
    release.set()
    await until(lambda: texts(fake, channel) == ["echo: think about it"])
    await settle(fake, ALICE, service)
    assert texts(fake, channel) == ["echo: think about it", "echo: sentinel"]


async def test_a_stranger_gets_a_pairing_code_the_owner_redeems(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    bob = fake.dm(BOB, "hi, can I use you?")["channel_id"]
    await until(lambda: any("pairing code" in t for t in texts(fake, bob)))
    code = next(t for t in texts(fake, bob) if "pairing code" in t).split("/pair ")[1][:6]
    owner = fake.dm_channel_id(OWNER)
    await until(lambda: any(code in t for t in texts(fake, owner)))
    fake.dm(OWNER, f"/pair {code}")
    await until(lambda: any(t.startswith("Paired Bob") for t in texts(fake, owner)))
    await until(lambda: any("Welcome" in t for t in texts(fake, bob)))
    fake.dm(BOB, "now?")
    await until(lambda: "echo: now?" in texts(fake, bob))


async def test_a_slow_turn_shows_typing_until_its_answer(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    await make_service()
    release = held(model)
    channel = fake.dm(ALICE, "take your time")["channel_id"]
    await until(lambda: len(fake.typing_in(channel)) >= 1)
    release.set()
    await until(lambda: texts(fake, channel) == ["echo: take your time"])


def _stored(channel: str, key: str, content: str, *, guild: str | None = None) -> Incoming:
    return Incoming(
        message_id=key,
        channel_id=channel,
        parent_id=None,
        guild_id=guild,
        user_id=str(ALICE),
        user_name="Alice",
        is_bot=False,
        content=content,
        mentions_me=guild is not None,
    )


async def test_messages_stored_before_a_stop_reach_the_hub_once_and_as_written(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """Handed over at the next start: until 2026-12-06 before the hub's recovery, which
    queued the second one again (answered "first, second, second"), and before the bot
    knew its id, so a stored "@bot /new" went to the model (found by review)."""
    channel = fake.dm_channel_id(ALICE)
    first = await make_service()
    events = discord_of(first).events
    for key, words in (("1579000000000000001", "first"), ("1579000000000000002", "second")):
        await events.record([(key, None, _stored(channel, key, words).to_json())])
    command = "1579000000000000003"
    asked = _stored(str(GENERAL), command, f"<@{fake.bot_id}> /new", guild=str(GUILD))
    await events.record([(command, None, asked.to_json())])
    await first.stop()

    second = await make_service()
    await until(lambda: texts(fake, GENERAL) and any("second" in t for t in texts(fake, channel)))
    await discord_of(second).drain()
    assert texts(fake, channel) == ["echo: first\n\nsecond"]  # one turn took both, once
    assert texts(fake, GENERAL) == ["🆕 New conversation started."]  # a command, as live


async def test_a_reply_to_the_bot_in_a_server_is_for_the_bot(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    """A reply pings its author: Discord lists the bot among its mentions (and gives it
    the text without the content intent), though no <@id> is written. It was not for the
    bot until 2026-12-06, so a question could not be answered by a reply in a server
    (found by review)."""
    await make_service()
    fake.channel_message(GUILD, GENERAL, ALICE, "first", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["echo: first"])
    answer = fake.messages(GENERAL)[0]
    pushed = fake.channel_message(GUILD, GENERAL, ALICE, "and then?", reply_to=answer.id)
    assert any(m["id"] == fake.bot_id for m in pushed["mentions"])
    assert "<@" not in pushed["content"]
    await until(lambda: len(texts(fake, GENERAL)) == 2)
    assert texts(fake, GENERAL)[1] == "echo: and then?"


async def test_two_messages_held_for_their_catch_up_keep_their_order(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """Right after a READY a live message waits for its conversation's catch-up; it was
    stored outside the channel's arrival order, so on PostgreSQL (a pool: inserts finish
    in any order) the later of two quick messages could be queued first (found by
    review). Here the first one's insert waits for the second to come, at most a second."""
    channel = await answered_then_down(fake, make_service)
    history = "GET /channels/{channel_id}/messages"
    read = fake.hold_answers(history)
    second = await make_service()
    events = discord_of(second).events
    record = events.record
    four_came = asyncio.Event()

    async def racing(batch: Any, **kw: Any) -> Any:
        contents = [payload.get("content") for _key, _at, payload in batch]
        if "four" in contents:
            four_came.set()
        elif "three" in contents:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(four_came.wait(), 1.0)
        return await record(batch, **kw)

    events.record = racing
    try:
        await until(lambda: fake.calls_to(history))
        fake.dm(ALICE, "three")
        fake.dm(ALICE, "four")
        await until(lambda: four_came.is_set() or len(texts(fake, channel)) > 1)
    finally:
        read.set()
    await until(lambda: "four" in "\n".join(texts(fake, channel)))
    said = "\n".join(texts(fake, channel)[1:])
    assert said.index("three") < said.index("four"), said


async def test_an_edit_of_a_message_held_for_its_catch_up_is_what_the_agent_reads(
    fake: FakeDiscordServer, make_service: MakeService, caplog: pytest.LogCaptureFixture
) -> None:
    """A live DM right after a READY waits for its conversation's catch-up, and was
    corrected meanwhile: the edit found nothing waiting, and the agent read the words
    taken back (found by review on 2026-12-07). The edit follows its message."""
    channel = await answered_then_down(fake, make_service)
    read = fake.hold_answers("GET /channels/{channel_id}/messages")
    try:
        second = await make_service()
        await until(lambda: fake.calls_to("GET /channels/{channel_id}/messages"))
        live = fake.dm(ALICE, "deploy to prod")
        await stored(second, live["id"])
        caplog.set_level(logging.INFO, logger="bot")
        edited = {**live, "content": "deploy to staging", "edited_timestamp": live["timestamp"]}
        fake.dispatch("MESSAGE_UPDATE", edited)
        await until(lambda: "edit of discord message" in caplog.text)
    finally:
        read.set()
    await until(lambda: "deploy" in "\n".join(texts(fake, channel)[1:]))
    said = "\n".join(texts(fake, channel)[1:])
    assert "deploy to staging" in said and "deploy to prod" not in said, said


async def test_a_mention_written_during_a_restart_is_answered_after_a_busy_day(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """The bot was mentioned in the morning; people then talked among themselves (320
    messages, heard live, none for the bot, none stored) before a restart, during which
    Alice mentioned it. The catch-up read the 300 oldest after the morning's mention, all
    talk from before the restart, and never the mention (found by review on 2026-12-07)."""
    service = await make_service()
    fake.channel_message(GUILD, GENERAL, ALICE, "good morning bot", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["echo: good morning bot"])
    for n in range(320):
        fake.channel_message(GUILD, GENERAL, BOB, f"chatter {n}")
    await service.stop()
    fake.channel_message(GUILD, GENERAL, ALICE, "are you back?", mentions_bot=True, offline=True)
    await make_service()
    await until(lambda: texts(fake, GENERAL) == ["echo: good morning bot", "echo: are you back?"])


async def test_one_message_the_catch_up_cannot_read_loses_no_other_conversation(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A message discord.py could not read in one conversation's history (a shape Discord
    changed: a forward's snapshot without its fields) ended the whole catch-up, and a
    mention written meanwhile in another channel was never answered (found by review)."""
    service = await make_service()
    fake.channel_message(GUILD, GENERAL, ALICE, "in the channel", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["echo: in the channel"])
    dm = fake.dm(ALICE, "in the dm")["channel_id"]  # stored later: read first
    await until(lambda: texts(fake, dm) == ["echo: in the dm"])
    await service.stop()
    elsewhere = {"type": 1, "message_id": "1", "channel_id": "1"}
    odd = {"message_reference": elsewhere, "message_snapshots": [{"message": {"content": "x"}}]}
    fake.dm(ALICE, "", offline=True, extra=odd)
    fake.channel_message(GUILD, GENERAL, ALICE, "while away", mentions_bot=True, offline=True)
    await make_service()
    await until(lambda: "echo: while away" in texts(fake, GENERAL))
