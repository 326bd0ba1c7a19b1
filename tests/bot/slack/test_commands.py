"""Commands on Slack: ``/chathub <command>`` answered only to its user, and a command
written in a thread (after a mention, or with a leading space) run there, never sent to
the model."""

from __future__ import annotations

import re

from bot.slack.messages import NOT_PAIRED
from engine.llm.scripted import text
from tests.bot.slack.conftest import (
    ALICE,
    BOB,
    GENERAL,
    OWNER,
    MakeService,
    slack_of,
    texts,
    until,
)
from tests.fakes.slack_server import FakeSlackServer


def private(fake: FakeSlackServer, user: str) -> list[str]:
    return [m.text for m in fake.ephemerals(user)]


async def test_the_slash_command_answers_only_its_user(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    await make_service()
    dm = fake.dm_channel(ALICE)
    command = fake.slash(dm, ALICE, "/chathub", "help")
    await until(lambda: any("/new" in t for t in private(fake, ALICE)))
    assert command.acked
    fake.slash(dm, ALICE, "/chathub", "")  # alone: help too
    fake.slash(dm, ALICE, "/chathub", "launch rockets")
    await until(lambda: any("Unknown command /launch" in t for t in private(fake, ALICE)))
    assert texts(fake, dm) == []  # nothing in the conversation itself


async def test_a_stranger_running_the_command_is_told_to_ask(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    await make_service()
    fake.slash(GENERAL, BOB, "/chathub", "new")
    await until(lambda: private(fake, BOB) == [NOT_PAIRED])


async def test_stop_written_in_a_thread_stops_that_conversation(
    make_service: MakeService, fake: FakeSlackServer, model
) -> None:
    service = await make_service()
    model.add(text("First answer."))
    asked = fake.mention(GENERAL, ALICE, "start")
    await until(lambda: texts(fake, GENERAL, asked.ts) == ["First answer."])
    fake.thread_message(GENERAL, ALICE, f"<@{slack_of(service).me.user_id}> /new", asked.ts)
    await until(lambda: any("New conversation" in t for t in texts(fake, GENERAL, asked.ts)))
    fake.thread_message(GENERAL, ALICE, " /context", asked.ts)  # Slack sends " /…" as text
    await until(lambda: len(texts(fake, GENERAL, asked.ts)) >= 3)
    await slack_of(service).drain()
    assert all(not t.startswith("echo:") for t in texts(fake, GENERAL, asked.ts))


async def test_the_owner_pairs_with_the_command_slack_takes_and_can_unpair(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """Until 2026-12-06 the owner was told "/pair CODE", which Slack refuses as an unknown
    command, and "/unpair U…" answered its usage line: a Slack member id is no number
    (found by review)."""
    service = await make_service()
    fake.dm(BOB, "hello")  # a stranger: a code for them, a line for the owner
    owner_dm = fake.dm_channel(OWNER)
    await until(lambda: any("/chathub pair " in m.text for m in fake.messages(owner_dm)))
    code = re.search(r"/chathub pair (\S+)", fake.messages(owner_dm)[-1].text)
    assert code is not None
    fake.slash(owner_dm, OWNER, "/chathub", f"pair {code.group(1)}")
    await until(lambda: any("Paired" in t for t in private(fake, OWNER)))
    assert slack_of(service).is_allowed(BOB)
    fake.slash(owner_dm, OWNER, "/chathub", f"unpair {BOB}")
    await until(lambda: f"Unpaired {BOB}." in private(fake, OWNER))
    assert not slack_of(service).is_allowed(BOB)
