"""Talking to the agent on Discord: DMs, mentions in guild channels, threads, strangers."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

import bot.discord.messages as messages_module
from bot.delivery import Refused
from bot.discord.incoming import FORWARDED
from bot.discord.messages import ROLE_ONLY_MESSAGE, UNREADABLE_MESSAGE
from bot.discord.sending import DiscordClient
from bot.platform.voice_out import VOICE
from engine.hub import Notification
from engine.llm.scripted import text, tool_call
from tests.bot.discord.conftest import (
    ALICE,
    GENERAL,
    GUILD,
    OWNER,
    MakeService,
    discord_of,
    stored,
    texts,
    until,
)
from tests.engine.hub.conftest import held
from tests.fakes.discord_server import DOWNLOAD, INTENT_MESSAGE_CONTENT, FakeDiscordServer

HOUR = timedelta(hours=1)
MESSAGES = "POST /channels/{channel_id}/messages"


async def test_a_dm_is_answered_once(fake: FakeDiscordServer, make_service: MakeService) -> None:
    service = await make_service()
    assert (await service.health())["discord"] == "ok"
    pushed = fake.dm(ALICE, "hello there")
    channel = pushed["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: hello there"])


async def test_a_mention_in_a_guild_channel_is_answered_there(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    asked = fake.channel_message(GUILD, GENERAL, ALICE, "what time is it", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["echo: what time is it"])
    # In a server channel the answer replies to the message that asked; in a DM it need not.
    assert fake.messages(GENERAL)[0].reply_to == asked["id"]
    dm = fake.dm(ALICE, "and here?")["channel_id"]
    await until(lambda: texts(fake, dm) == ["echo: and here?"])
    assert fake.messages(dm)[0].reply_to is None


def forward_of(pushed: dict[str, Any], content: str, embeds: list[Any]) -> dict[str, Any]:
    """Discord's forward of a message from elsewhere: an empty message of ``pushed``'s
    author and channel whose snapshot holds what was forwarded."""
    elsewhere = {"type": 1, "message_id": "1234567890123456789", "channel_id": "1234567890"}
    said = {
        **{"content": content, "type": 0, "flags": 0, "embeds": embeds},
        **{"attachments": [], "mentions": [], "mention_roles": [], "edited_timestamp": None},
    }
    return {
        **pushed,
        "id": str(int(pushed["id"]) + 10),
        "content": "",
        "message_reference": elsewhere,
        "message_snapshots": [{"message": {**said, "timestamp": pushed["timestamp"]}}],
    }


async def test_a_forwarded_message_is_read_as_what_it_forwards(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """Discord's forward: an empty message whose snapshot holds what was forwarded. It
    was "a kind of message I cannot read" (found by review)."""
    await make_service()
    pushed = fake.dm(ALICE, "first")
    channel = pushed["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: first"])
    fake.dispatch("MESSAGE_CREATE", forward_of(pushed, "the meeting moved to 3pm", []))
    await until(lambda: len(texts(fake, channel)) == 2)
    assert texts(fake, channel)[1] == f"echo: {FORWARDED}\nthe meeting moved to 3pm"
    assert fake.messages(channel)[1].reply_to is None


async def test_a_forward_of_nothing_readable_gets_the_plain_sentence(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A forward of only an embed (a link preview, another bot's card) reached the model as
    an empty "[Forwarded message]" (found by review on 2026-12-07): like an embed-only
    message, it gets the one sentence that says what the bot cannot read."""
    await make_service()
    pushed = fake.dm(ALICE, "first")
    channel = pushed["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: first"])
    embed = {"type": "rich", "title": "Build #42 passed"}
    fake.dispatch("MESSAGE_CREATE", forward_of(pushed, "", [embed]))
    await until(lambda: len(texts(fake, channel)) == 2)
    assert texts(fake, channel)[1] == UNREADABLE_MESSAGE


async def test_a_reply_to_the_bots_question_with_its_ping_off_answers_it(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    """Discord's client lets a person switch a reply's @ mention off: the reply then lists
    no mention, and with the MESSAGE CONTENT intent it was read and dropped, so the
    question waited for good (found by review on 2026-12-07)."""
    fake.allowed_intents |= INTENT_MESSAGE_CONTENT
    ask = tool_call("ask_user_clarification", '{"question": "Which city?"}', "q")
    model.add(ask, text("Booking Rome."))
    await make_service(discord_message_content="true")
    fake.channel_message(GUILD, GENERAL, ALICE, "book a hotel", mentions_bot=True)
    await until(lambda: any(m.content.startswith("**❓") for m in fake.messages(GENERAL)))
    question = next(m for m in fake.messages(GENERAL) if m.content.startswith("**❓"))
    fake.channel_message(GUILD, GENERAL, ALICE, "Rome", reply_to=question.id, ping=False)
    await until(lambda: "Booking Rome." in texts(fake, GENERAL))


async def test_a_mention_of_the_bots_role_is_a_mention_of_the_bot(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """Discord makes the bot a role of its own where it is added, and people pick it
    from the mention list as often as the bot's name: it was not taken for a mention, and
    the question went unanswered. The model reads the question without it."""
    fake.allowed_intents |= INTENT_MESSAGE_CONTENT
    await make_service(discord_message_content="true")
    role = fake.bot_role(GUILD)
    fake.channel_message(GUILD, GENERAL, ALICE, f"<@&{role}> what time is it")
    await until(lambda: texts(fake, GENERAL) == ["echo: what time is it"])
    fake.channel_message(GUILD, GENERAL, ALICE, "<@&999999999999999999> and another role?")
    fake.channel_message(GUILD, GENERAL, ALICE, f"<@{fake.bot_id}> only this")
    await until(lambda: texts(fake, GENERAL) == ["echo: what time is it", "echo: only this"])
    # The role alone, its text read: nothing to answer, and nothing was withheld.
    fake.channel_message(GUILD, GENERAL, ALICE, f"<@&{role}>")
    await until(lambda: texts(fake, GENERAL)[2:] == [UNREADABLE_MESSAGE])


async def test_without_message_content_a_role_mention_asks_for_a_mention_by_name(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """Without the message content intent Discord may send a message that mentions the
    bot's role, not the bot, without its text (the fake does): the person is told how to
    be read, not that the message's kind is unknown."""
    await make_service()
    fake.channel_message(GUILD, GENERAL, ALICE, f"<@&{fake.bot_role(GUILD)}> what time is it")
    await until(lambda: texts(fake, GENERAL) == [ROLE_ONLY_MESSAGE])


async def test_in_a_busy_channel_each_answer_replies_to_the_message_it_answers(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    """The owner asks while Alice's turn runs: Alice's answer replies to Alice's message,
    the owner's to the owner's (both replied to the newest message taken in, the owner's;
    found by review)."""
    service = await make_service()
    release = held(model)
    alice = fake.channel_message(GUILD, GENERAL, ALICE, "what is 2+2?", mentions_bot=True)
    await release.asked.wait()  # Alice's turn asks the model: her message alone
    owner = fake.channel_message(GUILD, GENERAL, OWNER, "and the weather?", mentions_bot=True)
    await stored(service, owner["id"])
    await discord_of(service).drain()  # the owner's message handed to the hub, behind Alice's
    release.set()
    await until(lambda: len(texts(fake, GENERAL)) == 2)
    replies = {m.content: m.reply_to for m in fake.messages(GENERAL)}
    assert replies["echo: what is 2+2?"] == alice["id"]
    assert replies["echo: and the weather?"] == owner["id"]


async def test_where_replies_are_refused_the_answer_comes_as_a_plain_message(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A channel that denies the bot Read Message History refuses every reply (160002)
    and takes a plain message: each answer there was lost until 2026-12-07 (found by
    review)."""
    await make_service()
    fake.fail_next(
        "POST /channels/{channel_id}/messages",
        10,
        status=403,
        code=160002,
        message="Cannot reply without permission to read message history",
        matching="message_reference",
    )
    fake.channel_message(GUILD, GENERAL, ALICE, "hello there", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["echo: hello there"])
    assert [m.reply_to for m in fake.messages(GENERAL)] == [None]


@pytest.mark.parametrize(
    ("code", "message", "gone"),
    [
        (50007, "Cannot send messages to this user", True),
        (50001, "Missing Access", True),
        (50013, "Missing Permissions", False),  # a file where only text may go says it too
    ],
)
async def test_a_dm_that_refuses_the_bot_for_good_is_noted_for_its_jobs(
    fake: FakeDiscordServer, make_service: MakeService, code: int, message: str, gone: bool
) -> None:
    """Alice closed her DMs to the bot: the refusal is noted (``Gone``), so her scheduled
    jobs pause instead of running at every fire for answers Discord refuses."""
    service = await make_service()
    channel = fake.dm(ALICE, "one")["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: one"])
    route = "POST /channels/{channel_id}/messages"
    fake.fail_next(route, 10, status=403, code=code, message=message)
    outbox = discord_of(service).outbound.store
    before = len(fake.calls_to(route))
    fake.dm(ALICE, "two")
    await until(lambda: len(fake.calls_to(route)) > before)
    for _ in range(500):  # the refused reply's row settles (failed)
        if not await outbox.pending():
            break
        await asyncio.sleep(0.01)
    reason = await outbox.gone_reason(str(channel))
    assert (reason is not None) is gone
    assert reason is None or message in reason
    assert await service.scheduler.runner.chat_gone(f"discord:{channel}") == reason


def test_a_voice_reply_refused_as_a_reply_falls_back_to_text_replying_to_nothing() -> None:
    """Its text kept the reference Discord refused, and was refused too (found by review)."""
    client = DiscordClient(None)  # type: ignore[arg-type]
    payload = {VOICE: "Hello.", "content": "Hello.", "reply_to": "5"}
    refused = Refused("Cannot reply without permission to read message history")
    assert client.fallback(payload, refused) == {"content": "Hello."}
    unspoken = client.fallback(payload, Refused("speech failed"))
    assert unspoken == {"content": "Hello.", "reply_to": "5"}  # a reply still


async def test_a_notification_told_in_a_channel_replies_to_no_old_message(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    """Alice asked in #general and was answered; later the agent tells a background
    notification there. It replies to no one (it replied to Alice's old question, as if
    answering her; found by review)."""
    model.add(text("It is 4."), text("Heads up: the nightly backup failed."))
    service = await make_service()
    asked = fake.channel_message(GUILD, GENERAL, ALICE, "what is 2+2?", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["It is 4."])
    assert fake.messages(GENERAL)[0].reply_to == asked["id"]
    service.hub.notify(
        Notification(
            source="backup",
            event_type="job_failed",
            summary="backup failed",
            target=f"discord:{GENERAL}",
        )
    )
    await until(lambda: len(texts(fake, GENERAL)) == 2)
    assert fake.messages(GENERAL)[1].reply_to is None


async def test_a_dm_answer_looks_up_no_message_to_reply_to(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """A DM's answer replies to no message, so its commit reads no history for one (a
    third of the path from the gateway to a DM's reply, measured by
    bench/discord_e2e.py); a server channel's still does (the test above)."""
    statements: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
        statements.append(statement)

    await make_service()
    event.listen(Engine, "before_cursor_execute", seen)
    try:
        channel = fake.dm(ALICE, "hello there")["channel_id"]
        await until(lambda: texts(fake, channel) == ["echo: hello there"])
    finally:
        event.remove(Engine, "before_cursor_execute", seen)
    assert statements  # the listener hears this service's database
    assert not [s for s in statements if "FROM chat_history AS said" in s]
    assert fake.messages(channel)[0].reply_to is None


async def test_in_a_thread_channel_a_mention_starts_a_thread_the_talk_goes_on_in(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    await make_service(discord_thread_channel_ids=str(GENERAL))
    pushed = fake.channel_message(GUILD, GENERAL, ALICE, "plan my week", mentions_bot=True)
    thread = pushed["id"]  # Discord names a message's thread after it
    await until(lambda: texts(fake, thread) == ["echo: plan my week"])
    assert texts(fake, GENERAL) == []
    fake.channel_message(GUILD, thread, ALICE, "and monday?", mentions_bot=True)
    await until(lambda: texts(fake, thread) == ["echo: plan my week", "echo: and monday?"])
    said = [m["content"] for m in model.requests[-1][0] if m["role"] == "user"]
    assert said[-2:] == ["plan my week", "and monday?"]  # one conversation


async def test_a_failure_after_a_thread_began_is_told_in_the_thread(
    fake: FakeDiscordServer, make_service: MakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conversation went on in the thread, and the sorry went to the channel (found
    by review on 2026-12-06)."""

    async def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the hub broke")

    monkeypatch.setattr(messages_module, "hand_over", broken)
    await make_service(discord_thread_channel_ids=str(GENERAL))
    thread = fake.channel_message(GUILD, GENERAL, ALICE, "plan my week", mentions_bot=True)["id"]
    await until(lambda: texts(fake, thread))
    [sorry] = texts(fake, thread)
    assert sorry.startswith("Sorry, something went wrong") and "RuntimeError" not in sorry
    assert texts(fake, GENERAL) == []


async def test_with_message_content_its_own_thread_needs_no_mention(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    fake.allowed_intents |= INTENT_MESSAGE_CONTENT  # switched on in the portal
    await make_service(discord_thread_channel_ids=str(GENERAL), discord_message_content="true")
    thread = fake.channel_message(GUILD, GENERAL, ALICE, "hello", mentions_bot=True)["id"]
    await until(lambda: texts(fake, thread) == ["echo: hello"])
    fake.channel_message(GUILD, thread, ALICE, "no mention needed here")
    await until(lambda: texts(fake, thread) == ["echo: hello", "echo: no mention needed here"])
    fake.channel_message(GUILD, GENERAL, ALICE, "but not in the channel itself")
    fake.channel_message(GUILD, thread, ALICE, "last")
    await until(lambda: len(texts(fake, thread)) == 3)
    assert texts(fake, GENERAL) == []


async def test_asking_for_message_content_without_the_portal_s_switch_is_one_line(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    service = await make_service(ready=False, discord_message_content="true")
    await until(lambda: service.refused.done())
    assert "MESSAGE CONTENT" in service.refused.result()


async def test_with_discord_alone_notifications_go_to_the_owner_s_dm(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    service = await make_service()
    home = f"discord:{fake.dm_channel_id(OWNER)}"
    await until(lambda: service.hub.home == home)


async def test_a_reply_whose_answer_was_lost_is_posted_once(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    """Discord took the reply, its answer was lost (a 503 after the fact), and the send
    was tried again with a new nonce of discord.py's: the reply came twice (found by
    review). The nonce is the outbox row's: Discord knows the second try."""
    await make_service()
    fake.lose_answer_next(MESSAGES)
    channel = fake.dm(ALICE, "hi")["channel_id"]
    await until(lambda: len(fake.calls_to(MESSAGES)) >= 2)
    await until(lambda: texts(fake, channel) == ["echo: hi"])
    nonces = {(call.body or {}).get("nonce") for call in fake.calls_to(MESSAGES)}
    assert len(nonces) == 1 and None not in nonces


async def test_an_edit_of_a_dm_still_waiting_is_what_the_agent_reads(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    """A DM corrected while the agent was busy with the one before: the agent acted on
    the words taken back (until 2026-12-07; found by review)."""
    service = await make_service()
    release = held(model)
    channel = fake.dm(ALICE, "first")["channel_id"]
    await release.asked.wait()
    waiting = fake.dm(ALICE, "deploy to prod")
    source = f"discord:{channel}"

    async def says(expected: list[str]) -> None:
        for _ in range(500):
            rows = await service.hub.waiting_messages(source)
            if [row.content for row in rows] == expected:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"never {expected}")

    await says(["deploy to prod"])
    edited = {**waiting, "content": "deploy to staging", "edited_timestamp": waiting["timestamp"]}
    fake.dispatch("MESSAGE_UPDATE", edited)
    await says(["deploy to staging"])
    release.set()
    await until(lambda: texts(fake, channel) == ["echo: first", "echo: deploy to staging"])


async def test_a_message_deleted_while_it_waits_for_its_turn_is_not_read(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    """A password pasted by mistake while the agent was busy, and deleted at once, was
    still read and answered (found by review on 2026-12-07)."""
    service = await make_service()
    release = held(model)
    channel = fake.dm(ALICE, "first")["channel_id"]
    await release.asked.wait()
    waiting = fake.dm(ALICE, "my password is hunter2")
    source = f"discord:{channel}"
    deadline = asyncio.get_running_loop().time() + 10
    while not await service.hub.waiting_messages(source):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    fake.dispatch("MESSAGE_DELETE", {"id": waiting["id"], "channel_id": channel})
    while await service.hub.waiting_messages(source):
        assert asyncio.get_running_loop().time() < deadline, "the deleted message still waits"
        await asyncio.sleep(0.01)
    release.set()
    fake.dm(ALICE, "sentinel")
    await until(lambda: "echo: sentinel" in texts(fake, channel))
    assert not any("hunter2" in t for t in texts(fake, channel)), texts(fake, channel)


async def test_an_edit_of_a_waiting_message_with_a_file_is_what_the_agent_reads(
    fake: FakeDiscordServer, make_service: MakeService, model
) -> None:
    """ "delete every row of this table" with rows.csv, corrected to "count the rows…"
    while the agent was busy, still ran as first written: an edit of a message with files
    was ignored (found by review on 2026-12-07). The file stays; the words change."""
    service = await make_service()
    release = held(model)
    channel = fake.dm(ALICE, "first")["channel_id"]
    await release.asked.wait()
    csv = ("rows.csv", b"a,b\n1,2\n", "text/csv")
    waiting = fake.dm(ALICE, "delete every row of this table", attachments=[csv])
    source = f"discord:{channel}"

    async def says(expected: list[str]) -> None:
        deadline = asyncio.get_running_loop().time() + 10
        while [row.content for row in await service.hub.waiting_messages(source)] != expected:
            assert asyncio.get_running_loop().time() < deadline, f"never {expected}"
            await asyncio.sleep(0.01)

    await says(["delete every row of this table"])
    edited = {**waiting, "content": "count the rows of this table"}
    fake.dispatch("MESSAGE_UPDATE", {**edited, "edited_timestamp": waiting["timestamp"]})
    await says(["count the rows of this table"])
    release.set()
    await until(lambda: any("count the rows" in t for t in texts(fake, channel)))
    [answer] = [t for t in texts(fake, channel) if "count the rows" in t]
    assert "rows.csv" in answer  # the file still came with it


async def test_an_edit_that_overtakes_its_message_waits_for_it(
    fake: FakeDiscordServer, make_service: MakeService, model, caplog: pytest.LogCaptureFixture
) -> None:
    """The message was still in its channel's lane (behind a file being downloaded) when
    its edit came: the edit found nothing waiting, and the message was queued as first
    written (found by review on 2026-12-07). The edit follows it."""
    service = await make_service()
    release = held(model)
    channel = fake.dm(ALICE, "first")["channel_id"]
    await release.asked.wait()
    downloads = fake.hold_answers(DOWNLOAD)
    fake.dm(ALICE, "read this", attachments=[("notes.txt", b"the milk", "text/plain")])
    await until(lambda: fake.downloads)
    waiting = fake.dm(ALICE, "deploy to prod")
    edited = {**waiting, "content": "deploy to staging", "edited_timestamp": waiting["timestamp"]}
    caplog.set_level(logging.INFO, logger="bot")
    fake.dispatch("MESSAGE_UPDATE", edited)
    await until(lambda: "edit of discord message" in caplog.text)  # taken: in the lane
    downloads.set()
    source = f"discord:{channel}"
    waiting_now: list[str] = []
    deadline = asyncio.get_running_loop().time() + 10
    while waiting_now[-1:] != ["deploy to prod"] and waiting_now[-1:] != ["deploy to staging"]:
        assert asyncio.get_running_loop().time() < deadline, waiting_now
        await asyncio.sleep(0.01)
        waiting_now = [row.content for row in await service.hub.waiting_messages(source)]
    assert waiting_now[-1] == "deploy to staging", waiting_now
    release.set()
    await until(lambda: "staging" in " ".join(texts(fake, channel)))
    assert "prod" not in " ".join(texts(fake, channel)), texts(fake, channel)
