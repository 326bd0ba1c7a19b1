"""Two ``chathub serve`` processes with Discord on one PostgreSQL: one gateway connection
for the fleet (the ``discord:gateway`` lease), every DM answered once, and when the
holder dies with ``kill -9`` the other connects, answers what was written in the gap
(read back from the channel) and what comes after.

PostgreSQL only (``CHATHUB_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bot.discord.service import GATEWAY_LEASE
from tests.bot.fleet.test_fleet_processes import fleet_on_fresh_database
from tests.bot.process import wait_for
from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.pg import POSTGRES_URL_ENV

pytestmark = pytest.mark.skipif(
    not os.environ.get(POSTGRES_URL_ENV), reason=f"{POSTGRES_URL_ENV} is not set"
)

TOKEN = "fleet-discord-token"
USERS = [700_000_000_000_000_000 + n for n in range(6)]
NAMES = ["d1", "d2"]


def live_connections(fake: FakeDiscordServer) -> int:
    return sum(1 for c in fake.connections if c.close_code is None and c.closed_by is None)


def echoes(fake: FakeDiscordServer, user: int) -> list[str]:
    return [
        m.content for m in fake.messages(fake.dm_channel_id(user)) if m.content.startswith("echo: ")
    ]


@pytest.mark.timeout(180)
def test_one_process_holds_the_gateway_and_another_takes_over_after_kill_9(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.echo = True
    with (
        FakeDiscordServer(token=TOKEN) as fake,
        fleet_on_fresh_database(tmp_path, fake_openai) as fleet,
    ):
        for user in USERS:
            fake.add_user(user, username=f"user{user % 100}")
        env = {
            "TELEGRAM_BOT_TOKEN": "",
            "DISCORD_BOT_TOKEN": TOKEN,
            "DISCORD_API_URL": fake.base_url,
            "DISCORD_ALLOWED_USER_IDS": ",".join(map(str, USERS)),
        }
        for name in NAMES:
            fleet.start(name, **env)

        def holder() -> str | None:
            return fleet.name_of(fleet.holder(GATEWAY_LEASE))

        try:
            wait_for(lambda: holder() is not None and fake.session is not None, within_s=60)
            wait_for(lambda: {fleet.name_of(o) for o in fleet.members()} >= set(NAMES), 60)
            time.sleep(1.0)  # a second connection would be opened by now
            assert live_connections(fake) == 1 and fake.identify_count == 1
            for user in USERS[:3]:
                fake.dm(user, f"hello {user}")
            wait_for(lambda: all(echoes(fake, u) for u in USERS[:3]), within_s=30)

            first = holder()
            assert first is not None
            fleet.kill(first)
            # Written while nobody holds the gateway: Discord replays it to no new session.
            fake.dm(USERS[0], "in the gap", offline=True)
            wait_for(lambda: holder() not in (None, first), within_s=30)
            wait_for(lambda: fake.identify_count == 2 and fake.session is not None, 30)
            for user in USERS[3:]:
                fake.dm(user, f"hello {user}")
            wait_for(lambda: all(echoes(fake, u) for u in USERS[3:]), within_s=30)
            time.sleep(0.5)  # a doubled reply would come now
        except AssertionError:
            print(fleet.diagnosis())
            print(fleet.logs())
            raise
        wait_for(lambda: "echo: in the gap" in echoes(fake, USERS[0]), within_s=30)
        assert echoes(fake, USERS[0]) == [f"echo: hello {USERS[0]}", "echo: in the gap"]
        for user in USERS[1:]:
            assert echoes(fake, user) == [f"echo: hello {user}"]


@pytest.mark.timeout(180)
def test_a_message_the_gateways_holder_stored_and_died_on_is_answered_by_the_next(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """The holder stores a DM and is killed before handling it: the process that takes
    the gateway over answers it, once (it read the channel only after the newest stored
    message, and skipped the stored one: answered at the next restart only)."""
    fake_openai.echo = True
    with (
        FakeDiscordServer(token=TOKEN) as fake,
        fleet_on_fresh_database(tmp_path, fake_openai) as fleet,
    ):
        user = USERS[0]
        fake.add_user(user, username="user0")
        env = {
            "TELEGRAM_BOT_TOKEN": "",
            "DISCORD_BOT_TOKEN": TOKEN,
            "DISCORD_API_URL": fake.base_url,
            "DISCORD_ALLOWED_USER_IDS": str(user),
        }
        first = fleet.start("d1", CHATHUB_FAILPOINTS="before_event_handled", **env)
        try:
            wait_for(lambda: fleet.name_of(fleet.holder(GATEWAY_LEASE)) == "d1", within_s=60)
            wait_for(lambda: fake.session is not None, within_s=30)
            fleet.start("d2", **env)
            wait_for(lambda: "d2" in {fleet.name_of(o) for o in fleet.members()}, 60)
            fake.dm(user, "stored, then the power went")
            first.wait(timeout=30)  # killed right after storing it
            fleet.killed.append(fleet.ids["d1"])
            wait_for(lambda: fleet.name_of(fleet.holder(GATEWAY_LEASE)) == "d2", within_s=30)
            wait_for(lambda: bool(echoes(fake, user)), within_s=30)
            time.sleep(0.5)  # a doubled reply would come now
        except AssertionError:
            print(fleet.diagnosis())
            print(fleet.logs())
            raise
        assert echoes(fake, user) == ["echo: stored, then the power went"]
