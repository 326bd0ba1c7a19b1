"""The gateway and the REST API failing in the ways Discord fails, and the bot coping."""

from __future__ import annotations

import asyncio

import pytest

from bot.discord import adapter as discord_adapter
from bot.discord import gateway as discord_gateway
from bot.discord.service import RECONNECT_BACKOFF
from bot.platform.chunks import split_markdown
from bot.platform.lanes import Lanes
from engine.llm.scripted import text
from tests.bot.discord.conftest import (
    ALICE,
    GENERAL,
    GUILD,
    MakeService,
    answered_then_down,
    discord_of,
    stored,
    texts,
    until,
)
from tests.fakes.discord_server import (
    GATEWAY_PATH,
    INTENT_MESSAGE_CONTENT,
    RESUME_GATEWAY_PATH,
    FakeDiscordServer,
)

MESSAGES = "POST /channels/{channel_id}/messages"


async def test_a_bad_token_is_one_line_and_no_retry_loop(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    service = await make_service(ready=False, discord_bot_token="not-the-token")
    await until(lambda: service.refused.done())
    assert service.refused.result().startswith("DISCORD_BOT_TOKEN: Discord does not accept")
    assert [c.route for c in fake.calls] == ["GET /users/@me"]


async def test_close_code_4004_ends_the_service_with_one_line(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    service = await make_service()
    fake.close_gateway(4004, "Authentication failed.")
    await until(lambda: service.refused.done())
    assert "close code 4004" in service.refused.result()
    identifies = fake.identify_count
    assert identifies == 1


async def test_after_invalid_session_it_identifies_again_at_the_gateway_it_was_given(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    fake.invalid_session(resumable=False)
    await until(lambda: fake.identify_count == 2 and fake.session is not None)
    assert [c.path for c in fake.connections] == [GATEWAY_PATH, GATEWAY_PATH]
    await until(lambda: fake.session is not None and "READY" in fake.session.event_names())
    channel = fake.dm(ALICE, "still there?")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: still there?"])


async def test_an_event_the_library_cannot_read_costs_a_reconnect_not_the_service(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """discord.py raises out of its gateway loop on an event it cannot parse (a shape
    Discord changed): the service ended with "the Discord connection failed (KeyError)".
    Now it connects again, and what was written meanwhile is read back."""
    service = await make_service()
    pushed = fake.dm(ALICE, "one")
    channel = pushed["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: one"])
    # A forward whose snapshot lacks a field discord.py reads without a default.
    odd = {**pushed, "id": str(int(pushed["id"]) + 10), "content": ""}
    odd["message_reference"] = {"type": 1, "message_id": "1", "channel_id": "1"}
    odd["message_snapshots"] = [{"message": {"content": "x"}}]
    fake.dispatch("MESSAGE_CREATE", odd)
    await until(lambda: fake.identify_count == 2)
    fake.dm(ALICE, "two")
    await until(lambda: texts(fake, channel) == ["echo: one", "echo: two"])
    assert not service.refused.done()


async def test_a_dropped_connection_resumes_and_loses_nothing(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    channel = fake.dm(ALICE, "one")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: one"])
    fake.drop_gateway()
    fake.dm(ALICE, "two")  # while the bot is away: replayed on RESUME
    await until(lambda: fake.resume_count == 1)
    await until(lambda: texts(fake, channel) == ["echo: one", "echo: two"])
    assert fake.connections[-1].path == RESUME_GATEWAY_PATH
    assert fake.identify_count == 1


async def test_a_429_storm_delays_the_reply_and_sends_it_once(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    fake.rate_limit_next(MESSAGES, 4, retry_after=0.05)
    channel = fake.dm(ALICE, "busy?")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: busy?"])
    assert fake.count_429 == 4


async def test_a_long_answer_with_a_code_fence_at_the_cut_comes_in_order_and_closed(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    answer = "Here:\n\n```python\n" + "print('x')\n" * 380 + "```\nThat is all."
    assert len(answer) > 4000
    model.add(text(answer))
    await make_service()
    channel = fake.dm(ALICE, "show me")["channel_id"]
    expected = split_markdown(answer, 2000)
    await until(lambda: texts(fake, channel) == expected)
    assert len(expected) >= 3 and all(len(part) <= 2000 for part in expected)
    assert all(part.count("```") % 2 == 0 for part in expected)


async def test_what_was_written_while_the_bot_was_down_is_answered_after_the_restart(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    service = await make_service()
    channel = fake.dm(ALICE, "one")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: one"])
    await service.stop()
    fake.dm(ALICE, "two", offline=True)  # nobody listens: only the channel keeps it
    await make_service()
    await until(lambda: texts(fake, channel) == ["echo: one", "echo: two"])
    assert fake.identify_count == 2 and fake.resume_count == 0
    fake.dm(ALICE, "four")  # and the live ones after it, once
    await until(lambda: texts(fake, channel) == ["echo: one", "echo: two", "echo: four"])


async def test_what_was_written_while_down_is_not_lost_to_a_message_right_after_ready(
    fake: FakeDiscordServer, make_service: MakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live message between READY and discord.py's ``on_ready`` (which waits for the
    guilds) was stored first, and the catch-up read after it: what was written while the
    bot was down was lost (found by review)."""
    fake.allowed_intents |= INTENT_MESSAGE_CONTENT
    service = await make_service(discord_open_channel_ids=str(GENERAL))
    channel = fake.dm(ALICE, "one")["channel_id"]
    fake.channel_message(GUILD, GENERAL, ALICE, "hello")
    await until(lambda: texts(fake, channel) == ["echo: one"])
    await until(lambda: texts(fake, GENERAL) == ["echo: hello"])
    await service.stop()
    fake.dm(ALICE, "two (while down)", offline=True)
    fake.channel_message(GUILD, GENERAL, ALICE, "are you there?", offline=True)
    # A wider wait for the guilds, so a loaded machine still lands the live message in it.
    monkeypatch.setattr(discord_gateway, "GUILD_READY_TIMEOUT_S", 5.0)
    second = await make_service(ready=False, discord_open_channel_ids=str(GENERAL))
    await until(lambda: fake.session is not None and "READY" in fake.session.event_names())
    assert not discord_of(second).bot.is_ready()  # discord.py still waits for the guilds
    fake.dm(ALICE, "three (live)")
    fake.channel_message(GUILD, GENERAL, ALICE, "hm")
    for where, before, after in ((channel, "two", "three"), (GENERAL, "are you there?", "hm")):
        await until(lambda: in_order(texts(fake, where)[1:], before, after))  # noqa: B023


async def test_a_live_message_waits_for_its_channels_catch_up(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """The catch-up's read of the channel is slow and a live message comes meanwhile: it
    was answered first, and the model read the two out of order (found by review)."""
    channel = await answered_then_down(fake, make_service)
    history = "GET /channels/{channel_id}/messages"
    read = fake.hold_answers(history)  # the catch-up's read is slow
    try:
        second = await make_service()
        await until(lambda: fake.calls_to(history))
        await stored(second, fake.dm(ALICE, "three (live)")["id"])
    finally:
        read.set()
    await until(lambda: in_order(texts(fake, channel)[1:], "two", "three"))


async def test_a_message_the_catch_up_reads_after_a_held_live_one_comes_after_it(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A live message waits for its conversation's catch-up; the catch-up's read finds a
    newer one whose live event has not come yet. That one was queued at once, before the
    held one: answered out of order (found by review)."""
    service = await make_service()
    adapter = discord_of(service)
    channel = fake.dm(ALICE, "one")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: one"])
    fake.dm(ALICE, "two (while down)", offline=True)
    adapter.session_began()  # a new session: its live messages wait for the catch-up
    await stored(service, fake.dm(ALICE, "three (live)")["id"])
    fake.dm(ALICE, "four (its event still to come)", offline=True)
    assert adapter.bot_id is not None
    adapter.ready(adapter.bot_id)
    await until(lambda: all(w in "\n".join(texts(fake, channel)) for w in ("three", "four")))
    said = "\n".join(texts(fake, channel)[1:])
    assert said.index("two") < said.index("three") < said.index("four"), said


async def test_a_message_held_for_a_catch_up_that_never_began_waits_for_the_next(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A second READY (a new session after INVALID_SESSION) cancels discord.py's wait for
    the first one's guilds: the first's on_ready never comes, nor its catch-up. A live
    message held for it waited for a restart (found by review)."""
    service = await make_service()
    adapter = discord_of(service)
    channel = fake.dm(ALICE, "one")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: one"])
    fake.dm(ALICE, "two (while down)", offline=True)
    adapter.session_began()  # READY, whose on_ready never comes
    await stored(service, fake.dm(ALICE, "three (live)")["id"])
    adapter.session_began()  # the next READY
    assert adapter.bot_id is not None
    adapter.ready(adapter.bot_id)
    await until(lambda: in_order(texts(fake, channel)[1:], "two", "three"))


async def test_ready_alone_catches_up(fake: FakeDiscordServer, make_service: MakeService) -> None:
    """Without the READY seen first (a path that skips it), ready raised a TypeError."""
    service = await make_service()
    adapter = discord_of(service)
    channel = fake.dm(ALICE, "one")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: one"])
    fake.dm(ALICE, "two", offline=True)
    assert adapter.bot_id is not None
    adapter.ready(adapter.bot_id)
    await until(lambda: texts(fake, channel) == ["echo: one", "echo: two"])


def in_order(answers: list[str], first: str, then: str) -> bool:
    """Both answered, ``first`` before ``then`` (in one turn, when they queued together)."""
    said = "\n".join(answers)
    return first in said and then in said and said.index(first) < said.index(then)


async def test_a_reply_in_the_bots_own_thread_written_during_a_restart_is_answered(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A thread channel: the mention starts a thread the bot answers in; Alice answers in
    it while the bot restarts. The thread is read after the restart (it was not: catch-up
    read only channels with a stored message, and the mention is stored in the channel;
    found by review)."""
    service = await make_service(discord_thread_channel_ids=str(GENERAL))
    thread = fake.channel_message(GUILD, GENERAL, ALICE, "plan my week", mentions_bot=True)["id"]
    await until(lambda: texts(fake, thread) == ["echo: plan my week"])
    await service.stop()
    fake.channel_message(GUILD, thread, ALICE, f"<@{fake.bot_id}> and monday?", offline=True)
    await make_service(discord_thread_channel_ids=str(GENERAL))
    await until(lambda: texts(fake, thread) == ["echo: plan my week", "echo: and monday?"])


async def test_a_message_whose_thread_was_started_before_a_crash_is_answered_in_it(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """The bot started the message's thread, then died before handing the message over;
    taken again, Discord answers "a thread has already been created": the answer goes in
    that thread (it went to the channel)."""
    service = await make_service(discord_thread_channel_ids=str(GENERAL))
    first = fake.channel_message(GUILD, GENERAL, ALICE, "plan my week", mentions_bot=True)["id"]
    await until(lambda: texts(fake, first) == ["echo: plan my week"])
    await service.stop()
    asked = fake.channel_message(
        GUILD, GENERAL, ALICE, "and my month?", mentions_bot=True, offline=True
    )["id"]
    fake.add_guild(GUILD, [{"id": asked, "type": 11, "parent_id": GENERAL}])  # its thread
    await make_service(discord_thread_channel_ids=str(GENERAL))
    await until(lambda: texts(fake, asked) == ["echo: and my month?"])
    assert texts(fake, GENERAL) == []


async def test_a_mention_among_a_busy_channels_talk_during_a_restart_is_answered(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """60 messages of people talking among themselves, then a mention, while the bot
    restarts: catch-up pages on past them (it read the first 50 after the last mention;
    found by review)."""
    service = await make_service()
    fake.channel_message(GUILD, GENERAL, ALICE, "hello bot", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["echo: hello bot"])
    await service.stop()
    for n in range(60):
        fake.channel_message(GUILD, GENERAL, ALICE, f"chatter {n}", offline=True)
    fake.channel_message(GUILD, GENERAL, ALICE, "are you back?", mentions_bot=True, offline=True)
    await make_service()
    await until(lambda: texts(fake, GENERAL) == ["echo: hello bot", "echo: are you back?"])


async def test_a_mention_of_the_bots_role_during_a_restart_is_answered(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """Catch-up reads a channel through a partial channel, which knew no guild and so no
    role of the bot's: the guild is named, and a role mention counts there too."""
    fake.allowed_intents |= INTENT_MESSAGE_CONTENT
    service = await make_service(discord_message_content="true")
    fake.channel_message(GUILD, GENERAL, ALICE, "hello bot", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["echo: hello bot"])
    await service.stop()
    fake.channel_message(GUILD, GENERAL, ALICE, f"<@&{fake.bot_role(GUILD)}> back?", offline=True)
    await make_service(discord_message_content="true")
    await until(lambda: texts(fake, GENERAL) == ["echo: hello bot", "echo: back?"])


async def test_a_reply_in_flight_when_the_service_stops_is_recorded_and_never_sent_again(
    fake: FakeDiscordServer, make_service: MakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discord took the reply but its answer had not arrived when the stop began: the stop
    lets that send finish and record it, so the restart does not send it a second time."""
    closing_replies = asyncio.Event()
    close = Lanes.close

    async def noted(lanes: Lanes, *args: object, **kwargs: object) -> None:
        if lanes.name.endswith("-out"):
            closing_replies.set()
        await close(lanes, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Lanes, "close", noted)
    service = await make_service()
    held = fake.hold_answers(MESSAGES)
    try:
        channel = fake.dm(ALICE, "one")["channel_id"]
        await until(lambda: texts(fake, channel) == ["echo: one"])  # Discord has it
        stopping = asyncio.create_task(service.stop())
        await until(closing_replies.is_set)
    finally:
        held.set()
    await stopping
    await make_service()
    fake.dm(ALICE, "two")
    await until(lambda: texts(fake, channel) == ["echo: one", "echo: two"])
    assert texts(fake, channel) == ["echo: one", "echo: two"]


async def test_a_discord_outage_at_start_is_waited_out(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    fake.fail_next("GET /gateway/bot", status=502)
    service = await make_service()
    assert not service.refused.done()
    channel = fake.dm(ALICE, "there?")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: there?"])


async def test_a_rate_limit_at_login_is_waited_out_not_the_end_of_the_service(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A 429 past discord.py's 30 s cap, then Cloudflare's (no ``Via``): until 2026-12-07
    either shut the whole service down, Telegram with it (found by review)."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    fake.rate_limit_next("GET /users/@me", retry_after=31.0)
    fake.block_next("GET /users/@me")
    service = await make_service(sleep=sleep)

    assert not service.refused.done()
    assert waits[0] == 31.0 and len(waits) == 2
    channel = fake.dm(ALICE, "there?")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: there?"])


async def test_a_busy_open_channel_hides_no_conversation_from_the_catch_up(
    fake: FakeDiscordServer, make_service: MakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open channel stores every message: its talk filled the one page of stored
    messages the catch-up read, and a DM written while the bot was away was never
    answered (found by review on 2026-12-06). Scaled down: pages of 5 for 2,000."""
    monkeypatch.setattr(discord_adapter, "CATCH_UP_EVENTS", 5)
    fake.allowed_intents |= INTENT_MESSAGE_CONTENT
    service = await make_service(discord_open_channel_ids=str(GENERAL))
    dm = fake.dm(ALICE, "one")["channel_id"]
    await until(lambda: texts(fake, dm) == ["echo: one"])
    for n in range(12):  # the open channel talks on, every message stored
        said = fake.channel_message(GUILD, GENERAL, ALICE, f"chatter {n}")
        await stored(service, said["id"])
    await service.stop()
    fake.dm(ALICE, "two (while down)", offline=True)
    await make_service(discord_open_channel_ids=str(GENERAL))
    await until(lambda: texts(fake, dm) == ["echo: one", "echo: two (while down)"])


async def test_a_session_that_fails_at_every_start_keeps_within_discords_identify_limit(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A guild discord.py cannot read (a channel without a field it requires) fails every
    new session: the service IDENTIFYs again, sooner at first, then at most every five
    minutes. Capped at 5 s it came to 17,000 IDENTIFYs a day; past Discord's 1,000 the
    token is reset and the bot is dead (found by review)."""
    odd_guild, odd_channel = 300_000_000_000_000_021, 300_000_000_000_000_022
    fake.add_guild(odd_guild, channels=[odd_channel], name="Odd")
    del fake._channels[str(odd_channel)]["name"]  # discord.py reads it without a default
    service = await make_service(ready=False)
    await until(lambda: fake.identify_count >= 3, within_s=15)  # 0.5 s, then 1 s apart
    assert not service.refused.done()
    steady = RECONNECT_BACKOFF.delay(10_000)
    assert 86_400 / steady <= 1_000 / 3  # a third of Discord's daily IDENTIFYs at most
