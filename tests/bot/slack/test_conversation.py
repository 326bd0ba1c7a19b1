"""Talking to the agent on Slack: DMs, a mention that starts a thread, the thread going on
without a mention, strangers, what is never answered, and people's names."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.delivery import Pacing
from bot.slack.incoming import Incoming
from bot.slack.messages import (
    FILES_NOT_READ,
    NAME_RETRY_S,
    NAMES_DOWN_S,
    NOT_PAIRED,
    MessageHandler,
    SlackMe,
)
from bot.slack.sending import SlackSender
from tests.bot.slack.conftest import (
    ALICE,
    BOB,
    GENERAL,
    OWNER,
    TIMEOUT,
    MakeService,
    slack_of,
    texts,
    until,
)
from tests.engine.hub.conftest import EchoModel, held
from tests.fakes.slack_server import BOT_USER_ID, TEAM_ID, FakeSlackServer

CAROL = "U0CAROL001"


async def test_a_dm_is_answered_once(make_service: MakeService, fake: FakeSlackServer) -> None:
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "hello there")
    await until(lambda: texts(fake, dm) == ["echo: hello there"])
    answer = fake.messages(dm)[0]
    assert answer.thread_ts is None  # a DM's answer is in the DM, not in a thread
    await slack_of(service).drain()
    await until(lambda: all(d.acked for d in fake.deliveries))
    assert texts(fake, dm) == ["echo: hello there"]


async def test_a_mention_starts_a_thread_that_goes_on_without_one(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    service = await make_service()
    asked = fake.mention(GENERAL, ALICE, "what time is it?")
    await until(lambda: texts(fake, GENERAL, asked.ts) == ["echo: what time is it?"])
    assert fake.messages(GENERAL)[0].thread_ts == asked.ts
    # The mention came as two events (app_mention and message): one answer.
    assert len([d for d in fake.deliveries if d.type == "events_api"]) >= 2
    fake.thread_message(GENERAL, ALICE, "and the date?", asked.ts)
    await until(lambda: len(texts(fake, GENERAL, asked.ts)) == 2)
    assert texts(fake, GENERAL, asked.ts)[1] == "echo: and the date?"
    # Outside the thread, without a mention: not for the bot.
    fake.channel_message(GENERAL, ALICE, "lunch anyone?")
    await slack_of(service).drain()
    assert len(fake.messages(GENERAL)) == 2
    await until(lambda: all(d.acked for d in fake.deliveries))


async def test_a_thread_follow_up_sent_at_once_after_the_mention_is_answered(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """The follow-up arrives before the mention's turn made the thread's session (a person
    typing fast): it is the bot's thread already, so the agent gets it too (it was
    dropped). Both may be taken in one turn."""
    service = await make_service()
    asked = fake.mention(GENERAL, ALICE, "what time is it?")
    fake.thread_message(GENERAL, ALICE, "and the date?", asked.ts)
    await until(lambda: "and the date?" in "".join(texts(fake, GENERAL, asked.ts)))
    assert "what time is it?" in texts(fake, GENERAL, asked.ts)[0]
    await slack_of(service).drain()


@pytest.mark.parametrize(
    ("sent", "read"),
    [
        (  # what a bare domain and an e-mail address become in Slack
            "mail <mailto:bob@corp.com|bob@corp.com> about <http://example.com|example.com>",
            "mail bob@corp.com about example.com",
        ),
        (
            "<https://x.com/a?b=1&amp;c=2|the docs>, <https://y.org>",
            "[the docs](https://x.com/a?b=1&c=2), https://y.org",
        ),
        (
            "ask <@U0BOB00001|bob> in <#C0GENERAL1|general> <#C9> <!here>",
            "ask @bob in #general #C9 @here",
        ),
        ("<!subteam^S1|@devs> by <!date^1700000000^{date}|Nov 14>", "@devs by Nov 14"),
        ("a &lt;b&gt; &amp; c <not markup", "a <b> & c <not markup"),
        (  # what she typed literally, "&lt;", stays so: unescaped once
            "<https://x.com/?q=&amp;lt;b|a &amp;lt; b>",
            "[a &lt; b](https://x.com/?q=&lt;b)",
        ),
    ],
)
async def test_slacks_markup_reaches_the_model_as_the_person_typed_it(
    make_service: MakeService, fake: FakeSlackServer, model: EchoModel, sent: str, read: str
) -> None:
    """Slack sends a link, a person, a channel in its own markup: the model read it and
    repeated it, and the reply's renderer made ``<http://example.com|example.com>`` one
    link to ``http://example.com|example.com`` (found by review)."""
    await make_service()
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, sent)
    await until(lambda: texts(fake, dm))
    said = [m["content"] for m in model.requests[-1][0] if m["role"] == "user"]
    assert said[-1].endswith(read), said[-1]
    assert "%7C" not in texts(fake, dm)[0]


async def test_a_strangers_mention_brings_the_bot_into_no_thread(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """A stranger mentions the bot: told to pair, and the people who answer them in that
    thread are not answered (the thread became the bot's; found by review)."""
    service = await make_service()
    fake.add_user(CAROL, "carol", "Carol")
    asked = fake.mention(GENERAL, CAROL, "hi bot")
    await until(lambda: [m.text for m in fake.ephemerals(CAROL)] == [NOT_PAIRED])
    fake.thread_message(GENERAL, ALICE, "it only talks to paired people, Carol", asked.ts)
    await until(lambda: all(d.acked for d in fake.deliveries))
    await slack_of(service).drain()
    hub = service.hub
    source = f"slack:{GENERAL}:{asked.ts}"
    await until(lambda: not hub.has_work(source) and not hub.is_processing(source))
    assert texts(fake, GENERAL, asked.ts) == []


async def test_a_stranger_talking_in_the_bots_thread_is_not_told_off_at_every_line(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """Bob, not paired, answers Alice in the bot's thread without naming the bot: he is
    not for the bot (he got "not paired" at every line; found by review). Alice's next line
    is answered after his."""
    service = await make_service()
    asked = fake.mention(GENERAL, ALICE, "what time is it?")
    await until(lambda: texts(fake, GENERAL, asked.ts) == ["echo: what time is it?"])
    for line in ("Alice, it's noon", "and lunch is at one"):
        fake.thread_message(GENERAL, BOB, line, asked.ts)
    fake.thread_message(GENERAL, ALICE, "thanks", asked.ts)
    await until(lambda: texts(fake, GENERAL, asked.ts)[-1:] == ["echo: thanks"])
    await slack_of(service).drain()
    assert fake.ephemerals(BOB) == []


async def test_a_thread_the_bot_is_not_in_stays_unanswered(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    service = await make_service()
    parent = fake.channel_message(GENERAL, BOB, "a thread of people")
    fake.thread_message(GENERAL, ALICE, "a reply in it", parent.ts)
    mention = fake.mention(GENERAL, ALICE, "join us", thread_ts=parent.ts)
    await until(lambda: texts(fake, GENERAL, parent.ts) == ["echo: join us"])
    assert fake.messages(GENERAL)[0].thread_ts == parent.ts
    assert mention.thread_ts == parent.ts
    await slack_of(service).drain()
    assert texts(fake, GENERAL) == ["echo: join us"]


async def test_a_stranger_gets_a_pairing_code_and_the_owner_is_told(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    service = await make_service()
    fake.dm(BOB, "let me in")
    await until(lambda: any("/chathub pair" in t for t in texts(fake, fake.dm_channel(BOB))))
    await until(lambda: any("asks to talk to me" in t for t in texts(fake, fake.dm_channel(OWNER))))
    code = texts(fake, fake.dm_channel(BOB))[0].split("/chathub pair ")[1].split()[0].strip(".")
    # The owner pairs Bob from their own DM; Bob is welcomed and then answered.
    fake.dm(OWNER, f" /pair {code}")
    await until(lambda: len(texts(fake, fake.dm_channel(BOB))) == 2)
    fake.dm(BOB, "now?")
    await until(lambda: texts(fake, fake.dm_channel(BOB))[-1] == "echo: now?")
    # In a channel a stranger's mention gets a line only they see.
    fake.add_user("U0CAROL001", "carol", "Carol")
    fake.mention(GENERAL, "U0CAROL001", "hi bot")
    await until(lambda: [m.text for m in fake.ephemerals("U0CAROL001")] == [NOT_PAIRED])
    await slack_of(service).drain()
    assert texts(fake, GENERAL) == []


async def test_the_bots_own_posts_edits_and_deletions_are_never_answered(
    make_service: MakeService, fake: FakeSlackServer, model: EchoModel
) -> None:
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "one")
    await until(lambda: texts(fake, dm) == ["echo: one"])
    # Its own post came back as a message event (with bot_id): acknowledged, not answered.
    await until(lambda: all(d.acked for d in fake.deliveries))
    for event in (
        {
            "type": "message",
            "subtype": "message_changed",
            "channel": dm,
            "ts": "1.000001",
            "channel_type": "im",
            "message": {"type": "message", "user": ALICE, "text": "edited", "ts": "1.000000"},
        },
        {
            "type": "message",
            "subtype": "message_deleted",
            "channel": dm,
            "ts": "1.000002",
            "channel_type": "im",
            "deleted_ts": "1.000000",
        },
        {
            "type": "message",
            "subtype": "bot_message",
            "bot_id": "B0OTHER001",
            "channel": dm,
            "ts": "1.000003",
            "channel_type": "im",
            "text": "another bot",
        },
        {
            "type": "message",
            "user": "U0OTHERBOT",
            "bot_id": "B0OTHER002",
            "channel": dm,
            "ts": "1.000004",
            "channel_type": "im",
            "text": "a bot with a user",
        },
        {
            "type": "message",
            "user": BOT_USER_ID,
            "channel": dm,
            "ts": "1.000005",
            "channel_type": "im",
            "text": "myself",
        },
    ):
        fake.push_event(event)
    await until(lambda: all(d.acked for d in fake.deliveries))
    await slack_of(service).drain()
    assert texts(fake, dm) == ["echo: one"]


async def test_a_file_only_message_gets_a_sentence(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    fake.push_event(
        {
            "type": "message",
            "subtype": "file_share",
            "user": ALICE,
            "channel": dm,
            "ts": "1700000000.000100",
            "channel_type": "im",
            "text": "",
            "files": [{"id": "F1", "name": "a.png"}],
        }
    )
    await until(lambda: texts(fake, dm) == ["⚠️ " + FILES_NOT_READ])
    await slack_of(service).drain()
    assert texts(fake, dm) == ["⚠️ " + FILES_NOT_READ]


async def test_another_workspaces_event_and_a_retry_are_not_answered(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    event = {
        "type": "message",
        "user": ALICE,
        "channel": dm,
        "ts": "1700000000.000200",
        "channel_type": "im",
        "text": "once",
    }
    first = fake.push_event(event)
    again = fake.push_event(event)  # Slack's retry: the same message, a new envelope
    await until(lambda: texts(fake, dm) == ["echo: once"])
    await until(lambda: first.acked and again.acked)
    foreign = fake.push_event(dict(event, ts="1700000000.000300"), team_id="T0ELSEWHERE")
    await until(lambda: foreign.acked)
    await slack_of(service).drain()
    assert texts(fake, dm) == ["echo: once"]


async def test_a_thread_shows_the_bot_is_thinking_while_a_turn_runs(
    make_service: MakeService, fake: FakeSlackServer, model: EchoModel
) -> None:
    release = held(model)
    await make_service()
    asked = fake.mention(GENERAL, ALICE, "take your time")
    await until(lambda: fake.statuses)
    assert fake.statuses[0] == (GENERAL, asked.ts, "is thinking…")
    release.set()
    await until(lambda: texts(fake, GENERAL, asked.ts) == ["echo: take your time"])


async def test_a_status_slack_failed_to_set_for_a_while_is_set_again_later(
    make_service: MakeService, fake: FakeSlackServer, model: EchoModel
) -> None:
    """A 5xx on setStatus (retried, given up) turned the status off until a restart, as
    a refusal does (found by review)."""
    await make_service(pacing=Pacing.unpaced(backoff_s=(0.01,), max_attempts=2))
    fake.fail_next("assistant.threads.setStatus", "internal_error", status=500, count=2)
    release = held(model)
    first = fake.mention(GENERAL, ALICE, "one")
    await until(lambda: len(fake.calls_to("assistant.threads.setStatus")) == 2)
    release.set()
    await until(lambda: texts(fake, GENERAL, first.ts) == ["echo: one"])
    release = held(model)
    second = fake.mention(GENERAL, ALICE, "two")
    await until(lambda: any(status[1] == second.ts for status in fake.statuses))
    release.set()
    await until(lambda: texts(fake, GENERAL, second.ts) == ["echo: two"])


async def test_a_rate_limited_name_lookup_is_not_repeated_before_each_answer(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    await make_service()
    asked_before = len(fake.calls_to("users.info"))
    dm = fake.dm_channel(ALICE)
    fake.rate_limit_next("users.info", retry_after=30)
    fake.dm(ALICE, "one")
    await until(lambda: texts(fake, dm) == ["echo: one"])
    fake.dm(ALICE, "two")
    await until(lambda: texts(fake, dm) == ["echo: one", "echo: two"])
    # Answered both times (under the person's id); Slack asked once, not per message.
    assert len(fake.calls_to("users.info")) == asked_before + 1


async def test_a_refused_name_is_asked_again_only_after_a_while(fake: FakeSlackServer) -> None:
    now = [0.0]
    web = AsyncWebClient(token=fake.bot_token, base_url=fake.api_url)
    handler = MessageHandler(
        None,  # type: ignore[arg-type]  (names need Slack alone)
        SlackMe(),
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        SlackSender(web, None),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        clock=lambda: now[0],
    )
    fake.fail_next("users.info", "user_not_found")
    assert await handler.name_of(ALICE) == ALICE
    assert await handler.name_of(ALICE) == ALICE
    assert len(fake.calls_to("users.info")) == 1
    now[0] += NAME_RETRY_S
    assert await handler.name_of(ALICE) == "alice"
    assert await handler.name_of(ALICE) == "alice"  # known now: never asked again
    assert len(fake.calls_to("users.info")) == 2
    # While Slack is down, nobody's name is asked; afterwards it is.
    fake.fail_next("users.info", "internal_error", status=500)
    assert await handler.name_of(BOB) == BOB
    assert await handler.name_of(BOB) == BOB
    now[0] += NAMES_DOWN_S
    assert await handler.name_of(BOB) == "bob"
    assert len(fake.calls_to("users.info")) == 4


async def test_a_mention_stored_before_a_stop_runs_as_written_after_the_restart(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """Handed over when the bot knows who it is: until 2026-12-06 it was handled before
    auth.test answered, its mention stayed in the text, and "@chathub /new" went to the
    model (found by review)."""
    first = await make_service()
    events = fake.events
    fake.events = frozenset()  # the message is in Slack; its event was stored, not handled
    asked = fake.mention(GENERAL, ALICE, "/new")
    fake.events = events
    stored = Incoming.of(
        {
            "type": "app_mention",
            "channel": GENERAL,
            "ts": asked.ts,
            "user": ALICE,
            "text": asked.text,
        },
        TEAM_ID,
        BOT_USER_ID,
    )
    assert stored is not None
    await slack_of(first).front.events.record([(stored.key, None, stored.to_json())])
    await first.stop()
    await make_service(ready=False)
    await until(lambda: texts(fake, GENERAL, asked.ts))
    assert texts(fake, GENERAL, asked.ts) == ["🆕 New conversation started."]


async def test_a_follow_up_to_a_mention_waiting_since_a_restart_is_answered(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """The mention stored before a stop is taken over and waits for Alice's name (the
    names are asked again after a start); her line in its thread meanwhile was dropped
    until 2026-12-07: the thread was not joined in this process and had no session yet
    (found by review)."""
    first = await make_service()
    events = fake.events
    fake.events = frozenset()  # the mention is in Slack; its event was stored, not handled
    asked = fake.mention(GENERAL, ALICE, "hello")
    fake.events = events
    event = {"type": "app_mention", "channel": GENERAL, "ts": asked.ts, "user": ALICE}
    stored = Incoming.of({**event, "text": asked.text}, TEAM_ID, BOT_USER_ID)
    assert stored is not None
    await slack_of(first).front.events.record([(stored.key, None, stored.to_json())])
    await first.stop()

    fake.slow("users.info", 0.2)
    second = await make_service()
    fake.thread_message(GENERAL, ALICE, "are you there?", asked.ts)

    # Both reach the model, in one turn or two.
    await until(lambda: "are you there?" in "\n".join(texts(fake, GENERAL, asked.ts)))
    await slack_of(second).drain()
    assert "hello" in "\n".join(texts(fake, GENERAL, asked.ts))


async def test_two_lines_in_a_thread_keep_their_order_after_a_restart(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """Each envelope is a task of its own: after a restart a plain line's thread is
    looked up before it is stored, a mention's is not, and the mention sent right after
    it reached the model first (found by review)."""
    first = await make_service()
    asked = fake.mention(GENERAL, ALICE, "start")
    await until(lambda: texts(fake, GENERAL, asked.ts) == ["echo: start"])
    await slack_of(first).drain()
    await first.stop()
    second = await make_service()
    line = {
        "type": "message",
        "user": ALICE,
        "channel": GENERAL,
        "channel_type": "channel",
        "ts": f"{float(asked.ts) + 10:.6f}",
        "thread_ts": asked.ts,
        "text": "AAA first",
    }
    fake.push_event(line)
    fake.push_event(dict(line, ts=f"{float(asked.ts) + 11:.6f}", text=f"<@{BOT_USER_ID}> BBB"))
    await until(lambda: len(texts(fake, GENERAL, asked.ts)) >= 2)
    await slack_of(second).drain()
    said = "\n".join(texts(fake, GENERAL, asked.ts)[1:])
    assert said.index("AAA") < said.index("BBB"), said


@pytest.mark.parametrize(
    ("error", "gone"),
    [
        ("channel_not_found", True),
        ("is_archived", True),
        ("msg_too_long", False),
        ("account_inactive", False),  # the bot's token's account: no one conversation's
    ],
)
async def test_a_channel_that_refuses_the_bot_for_good_is_noted_for_its_jobs(
    make_service: MakeService, fake: FakeSlackServer, error: str, gone: bool
) -> None:
    """The channel was archived, or the bot removed from it: the refusal is noted, so its
    scheduled jobs pause instead of running at every fire for answers Slack refuses."""
    service = await make_service()
    asked = fake.mention(GENERAL, ALICE, "one")
    await until(lambda: texts(fake, GENERAL, asked.ts) == ["echo: one"])
    fake.fail_next("chat.postMessage", error, count=10)
    before = len(fake.calls_to("chat.postMessage"))
    again = fake.mention(GENERAL, ALICE, "two")
    await until(lambda: len(fake.calls_to("chat.postMessage")) > before)
    outbox = slack_of(service).outbound.store
    for _ in range(500):  # the refused reply's row settles (failed)
        if not await outbox.pending():
            break
        await asyncio.sleep(0.01)
    reason = await outbox.gone_reason(GENERAL)
    assert reason == (error if gone else None)
    chat = f"slack:{GENERAL}:{again.ts}"
    assert await service.scheduler.runner.chat_gone(chat) == reason


async def test_an_edit_of_a_message_still_waiting_is_what_the_agent_reads(
    make_service: MakeService, fake: FakeSlackServer, model: EchoModel
) -> None:
    """A DM corrected while the agent was busy with the one before: the agent acted on
    the words taken back (until 2026-12-07; found by review)."""
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    release = held(model)
    fake.dm(ALICE, "first")
    await release.asked.wait()
    waiting = fake.dm(ALICE, "deploy to prod")
    source = f"slack:{dm}"
    await until_true(lambda: _waiting(service, source, ["deploy to prod"]))
    push_edit(fake, dm, waiting.ts, "deploy to staging")
    await until_true(lambda: _waiting(service, source, ["deploy to staging"]))
    release.set()
    await until(lambda: texts(fake, dm) == ["echo: first", "echo: deploy to staging"])


async def test_a_message_deleted_while_it_waits_for_its_turn_is_not_read(
    make_service: MakeService, fake: FakeSlackServer, model: EchoModel
) -> None:
    """A password pasted by mistake while the agent was busy, and deleted at once, was
    still read (found by review on 2026-12-07)."""
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    release = held(model)
    fake.dm(ALICE, "first")
    await release.asked.wait()
    waiting = fake.dm(ALICE, "my password is hunter2")
    source = f"slack:{dm}"
    await until_true(lambda: _waiting(service, source, ["my password is hunter2"]))
    fake.push_event(
        {
            "type": "message",
            "subtype": "message_deleted",
            "channel": dm,
            "ts": "9.000003",
            "channel_type": "im",
            "deleted_ts": waiting.ts,
        }
    )
    await until_true(lambda: _waiting(service, source, []))
    release.set()
    fake.dm(ALICE, "sentinel")
    await until(lambda: "echo: sentinel" in texts(fake, dm))
    assert not any("hunter2" in t for t in texts(fake, dm)), texts(fake, dm)


async def test_an_edit_of_a_waiting_message_with_a_file_is_what_the_agent_reads(
    make_service: MakeService, fake: FakeSlackServer, model: EchoModel
) -> None:
    """An edit of a message that came with a file (not a sound clip) was ignored, and the
    agent acted on the words taken back (found by review on 2026-12-07)."""
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    release = held(model)
    fake.dm(ALICE, "first")
    await release.asked.wait()
    waiting = fake.dm(ALICE, "delete every row", files=[("rows.csv", b"a,b", "text/csv", None)])
    source = f"slack:{dm}"
    await until_true(lambda: _waiting(service, source, ["delete every row"]))
    push_edit(fake, dm, waiting.ts, "count the rows", files=waiting.files)
    await until_true(lambda: _waiting(service, source, ["count the rows"]))
    release.set()
    await until(lambda: "echo: count the rows" in texts(fake, dm))


async def test_an_edit_that_overtakes_its_message_waits_for_it(
    make_service: MakeService,
    fake: FakeSlackServer,
    model: EchoModel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The edit was applied at once while its message was still in its conversation's
    lane (behind an earlier message's name lookup), or before its own event reached
    the lane (each envelope is handled in a task of its own): nothing waited yet, and
    the message was queued as first written (found by review on 2026-12-07). The edit
    follows its message."""
    await make_service()
    caplog.set_level(logging.INFO, logger="bot")
    dm = fake.dm_channel(ALICE)
    fake.slow("users.info", 1.0)  # the lane's first message waits for its sender's name
    release = held(model)
    fake.dm(ALICE, "first")
    waiting = fake.dm(ALICE, "deploy to prod")
    push_edit(fake, dm, waiting.ts, "deploy to staging")
    # Taken while it waited (in the queue, or already joining the running turn).
    await until(lambda: "edited while it waited" in caplog.text, 2 * TIMEOUT)
    release.set()
    await until(lambda: "staging" in "".join(texts(fake, dm)))
    assert "prod" not in "".join(texts(fake, dm)), texts(fake, dm)


def push_edit(fake: FakeSlackServer, dm: str, ts: str, text: str, *, files: Any = None) -> None:
    """Alice's ``message_changed`` of her DM ``ts`` (its ``files`` kept, if any)."""
    edit: dict[str, Any] = {"type": "message", "user": ALICE, "text": text, "ts": ts}
    if files:
        edit["files"] = copy.deepcopy(files)
    fake.push_event(
        {
            "type": "message",
            "subtype": "message_changed",
            "channel": dm,
            "ts": "9.000001",
            "channel_type": "im",
            "message": {**edit, "edited": {"user": ALICE, "ts": "9.000001"}},
        }
    )


async def _waiting(service, source: str, expected: list[str]) -> bool:  # type: ignore[no-untyped-def]
    return [row.content for row in await service.hub.waiting_messages(source)] == expected


async def until_true(check, within_s: float = 2 * TIMEOUT) -> None:  # type: ignore[no-untyped-def]
    """Until the coroutine ``check()`` is true (the store and the fake, on a loaded
    machine: a count of tries ran out under CI's load)."""
    deadline = time.monotonic() + within_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def test_a_refusal_of_the_status_in_one_channel_keeps_it_in_the_others(
    make_service: MakeService, fake: FakeSlackServer, model: EchoModel
) -> None:
    """The bot removed from one channel turned "is thinking…" off in every channel until
    a restart (found by review on 2026-12-07)."""
    other = "C0RANDOM01"
    fake.add_channel(other, "random", members=[ALICE])
    await make_service()
    # The bot was just removed from #general: its thread's status is refused there.
    fake.fail_next("assistant.threads.setStatus", "not_in_channel")
    release = held(model)
    first = fake.mention(GENERAL, ALICE, "one")
    await until(lambda: fake.calls_to("assistant.threads.setStatus"))
    release.set()
    await until(lambda: texts(fake, GENERAL, first.ts) == ["echo: one"])
    # A turn in another channel's thread, that takes its time: it should show the status.
    release = held(model)
    second = fake.mention(other, ALICE, "two")
    try:
        await until(lambda: any(s[:2] == (other, second.ts) for s in fake.statuses), 3.0)
    finally:
        release.set()
        await until(lambda: texts(fake, other, second.ts) == ["echo: two"])
