"""Commands on Slack: ``/chathub <command>`` answered only to its user, and a command
written in a thread (after a mention, or with a leading space) run there, never sent to
the model."""

from __future__ import annotations

import re

import pytest

from bot.platform.access import ASKED_ALREADY
from bot.platform.jobs import NO_JOBS
from bot.slack.interactions import NOT_OUR_DM, Interactions
from bot.slack.messages import NOT_PAIRED, SlackMe, slack_commands
from bot.slack.mrkdwn import to_mrkdwn
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
    await until(lambda: any("/chathub new" in t for t in private(fake, ALICE)))
    assert command.acked
    fake.slash(dm, ALICE, "/chathub", "")  # alone: help too
    fake.slash(dm, ALICE, "/chathub", "launch rockets")
    await until(lambda: any("Unknown command /chathub launch" in t for t in private(fake, ALICE)))
    assert texts(fake, dm) == []  # nothing in the conversation itself


async def test_the_commands_a_reply_names_are_written_as_slack_takes_them(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """A message starting with ``/`` is a slash command to Slack: the help's ``/new``, the
    usage lines and "Send /forget_me yes" named commands Slack refuses as "not a valid
    command" (until 2026-12-07; found by review)."""
    await make_service()
    dm = fake.dm_channel(ALICE)
    fake.slash(dm, ALICE, "/chathub", "help")
    fake.slash(dm, ALICE, "/chathub", "forget_me")
    await until(lambda: len(private(fake, ALICE)) == 2)
    shown = "\n".join(private(fake, ALICE))
    assert re.findall(r"(?m)(?<![\w/])/(?!chathub\b)(\w+)", shown) == []
    assert "/chathub model" in shown and "/chathub forget_me yes" in shown


async def test_a_stranger_running_the_command_is_told_to_ask(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    await make_service()
    fake.slash(GENERAL, BOB, "/chathub", "new")
    await until(lambda: private(fake, BOB) == [NOT_PAIRED])


async def test_a_stranger_s_command_in_their_dm_asks_for_access(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """As a message in their DM does: a pairing code only they see, the owner told
    (until 2026-12-06 they were told to send a direct message, in one; found by review).
    Again within the reminder window: the owner has the request."""
    await make_service()
    dm = fake.dm_channel(BOB)
    fake.slash(dm, BOB, "/chathub", "start")
    await until(lambda: any("code" in t.lower() for t in private(fake, BOB)))
    await until(lambda: any("/chathub pair" in t for t in texts(fake, fake.dm_channel(OWNER))))
    fake.slash(dm, BOB, "/chathub", "help")
    await until(lambda: private(fake, BOB)[-1] == ASKED_ALREADY)
    assert texts(fake, dm) == []  # nothing in the conversation itself


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


async def test_a_conversation_command_in_a_channel_points_to_the_thread(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """Each thread of a channel is its own conversation, and a slash command has no
    thread: "/chathub new" there posted "New conversation started." to everyone."""
    service = await make_service()
    fake.slash(GENERAL, ALICE, "/chathub", "new")
    await until(lambda: private(fake, ALICE))
    assert "@chathub /new" in private(fake, ALICE)[0]
    await slack_of(service).drain()
    assert texts(fake, GENERAL) == []


@pytest.mark.parametrize("command", ["voice on", "search budget", "memory off", "memory"])
async def test_voice_search_and_memory_in_a_channel_point_to_the_thread(
    make_service: MakeService, fake: FakeSlackServer, command: str
) -> None:
    """They act on one conversation, and a channel's are its threads: "/chathub voice on"
    there said replies now came as voice and none did; a search found nothing, searching
    the channel, which has no conversations of its own; "memory off" said memory was off
    and every thread's words were still learned (found by review)."""
    await make_service()
    fake.slash(GENERAL, ALICE, "/chathub", command)
    await until(lambda: private(fake, ALICE))
    name = command.split()[0]
    assert private(fake, ALICE) == [
        f"In a channel each thread is its own conversation: write `@chathub /{name}` in the "
        "thread it is about."
    ]


async def test_a_person_switches_memory_off_in_their_own_dm(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """A DM is one person's conversation: it was taken for a group, so only the owner
    could switch memory off there, and /memory spoke of "this group" (found by review)."""
    await make_service()
    dm = fake.dm_channel(ALICE)
    fake.slash(dm, ALICE, "/chathub", "memory off")
    await until(lambda: private(fake, ALICE))
    assert private(fake, ALICE)[0].startswith("Memory is off in this chat")
    fake.slash(dm, ALICE, "/chathub", "memory")
    await until(lambda: len(private(fake, ALICE)) == 2)
    assert private(fake, ALICE)[1].startswith("I remember nothing about you in this chat.")


class _Listing:
    """A message handler whose every command answers ``reply``, and notes what it ran."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[tuple[str, str]] = []

    async def run_command(self, source: str, name: str, argument: str, user: str) -> str:
        self.calls.append((name, argument))
        return self.reply

    async def direct_with(self, user: str) -> str:
        return "D0ALICE001"


class _Everyone:
    def is_allowed(self, user: object) -> bool:
        return True


async def _command(text: str, handler: _Listing) -> list[str]:
    """``/chathub <text>`` in Alice's DM, straight to ``Interactions``; what it answered."""
    said: list[str] = []

    async def respond(answer: str) -> None:
        said.append(answer)

    async def no_view(trigger: str, view: object) -> bool:
        return False

    interactions = Interactions(
        None,  # type: ignore[arg-type]
        SlackMe(team_id="T1"),
        _Everyone(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        handler,  # type: ignore[arg-type]
        no_view,
    )
    body = {"team_id": "T1", "user_id": "U0ALICE001", "channel_id": "D0ALICE001", "text": text}
    await interactions.command(body, respond)
    return said


async def test_a_long_command_reply_comes_whole_in_parts() -> None:
    """A long /chathub memory was cut at 4,000 characters, its tail lost."""
    facts = [f"{n}. " + "likes long walks on the beach and tea " * 5 for n in range(1, 31)]
    reply = "What I remember about you (30):\n" + "\n".join(facts)
    said = await _command("memory", _Listing(reply))
    assert len(said) == 2 and all(len(part) <= 4000 for part in said)
    assert "30. likes" in said[-1]


async def test_a_command_gets_its_words_as_typed() -> None:
    """Slack sends a command's text with ``&``, ``<`` and ``>`` escaped, as a message's:
    "/chathub search Tom & Jerry" searched for "Tom &amp; Jerry" (found by review)."""
    handler = _Listing("done")
    await _command("search Tom &amp; Jerry &lt;3", handler)
    assert handler.calls == [("search", "Tom & Jerry <3")]


@pytest.mark.parametrize(
    ("reply", "written"),
    [
        (
            "/new — start over. Send /forget_me yes.",
            "/chathub new — start over. Send /chathub forget_me yes.",
        ),
        ('(/new) or "/memory"', '(/chathub new) or "/chathub memory"'),
        # A path, a URL, code and words that are no command stay as they are.
        ("~/memory, a/new, /etc/new, /new.txt, https://x.com/new", None),
        ("`/new` and ```\n/new\n```", None),
        ("/launch the rockets", None),
    ],
)
def test_only_the_commands_a_reply_names_are_rewritten(reply: str, written: str | None) -> None:
    known = {"new", "memory", "forget_me"}
    assert slack_commands(reply, known.__contains__) == (written or reply)


async def test_the_strangers_code_names_the_command_slack_takes(
    fake: FakeSlackServer, make_service: MakeService
) -> None:
    """The stranger was told to have the owner send ``/pair CODE``, which Slack refuses
    (found by review on 2026-12-07)."""
    await make_service()
    fake.dm(BOB, "let me in")
    dm = fake.dm_channel(BOB)
    await until(lambda: any("pairing code" in t for t in texts(fake, dm)))
    told = next(t for t in texts(fake, dm) if "pairing code" in t)
    assert "/chathub pair" in told, told


async def test_jobs_in_a_channel_points_to_its_threads(
    fake: FakeSlackServer, make_service: MakeService
) -> None:
    """A job is the thread's it was asked in: in a channel ``/chathub jobs`` said "No
    scheduled jobs in this chat" while its threads had some (found by review on
    2026-12-07)."""
    service = await make_service()
    asked = fake.mention(GENERAL, ALICE, "every weekday at 8 send me a briefing")
    await until(lambda: texts(fake, GENERAL, asked.ts))
    thread = f"slack:{GENERAL}:{asked.ts}"
    await service.scheduler.create_cron(thread, "Briefing", "0 8 * * 1-5", "brief me")
    fake.slash(GENERAL, ALICE, "/chathub", "jobs")
    await until(lambda: fake.ephemerals(ALICE))
    told = fake.ephemerals(ALICE)[-1].text
    assert told != NO_JOBS and "thread" in told, told


@pytest.mark.parametrize("command", ["new", "sethome"])
async def test_a_command_in_a_dm_between_two_people_is_told_it_is_not_the_bots(
    fake: FakeSlackServer, make_service: MakeService, command: str
) -> None:
    """Slack runs a command in any conversation: every ``D…`` channel was taken for the
    person's DM with the bot, "new" answered nothing and "sethome" sent every
    notification where Slack refuses the bot (found by review on 2026-12-07)."""
    service = await make_service()
    home = service.hub.home
    alice_and_bob = "D0ALICEBOB1"
    fake.add_channel(alice_and_bob, "directmessage", members=[ALICE, BOB], bot_member=False)
    fake.slash(alice_and_bob, ALICE, "/chathub", command)
    await until(lambda: fake.ephemerals(ALICE))
    assert fake.ephemerals(ALICE)[-1].text == to_mrkdwn(NOT_OUR_DM)
    assert service.hub.home == home
    if command == "sethome":  # in her own DM with the bot it is hers
        fake.slash(fake.dm_channel(ALICE), ALICE, "/chathub", command)
        await until(lambda: service.hub.home == f"slack:{fake.dm_channel(ALICE)}")
