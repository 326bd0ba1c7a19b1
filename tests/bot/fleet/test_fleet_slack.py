"""Two ``chathub serve`` processes with Slack in Socket Mode on one PostgreSQL: one socket
for the fleet (the ``slack:socket`` lease), every DM answered once, and when the holder
dies with ``kill -9`` the other connects and answers what was written in the gap (Slack
keeps an unacknowledged event and sends it again) and what comes after.

PostgreSQL only (``CHATHUB_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bot.slack.service import SOCKET_LEASE
from tests.bot.fleet.test_fleet_processes import fleet_on_fresh_database
from tests.bot.process import wait_for
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_server import FakeSlackServer
from tests.pg import POSTGRES_URL_ENV

pytestmark = pytest.mark.skipif(
    not os.environ.get(POSTGRES_URL_ENV), reason=f"{POSTGRES_URL_ENV} is not set"
)

USERS = [f"U0FLEET{n:03d}" for n in range(6)]
NAMES = ["s1", "s2"]


def echoes(fake: FakeSlackServer, user: str) -> list[str]:
    return [m.text for m in fake.messages(fake.dm_channel(user)) if m.text.startswith("echo: ")]


@pytest.mark.timeout(180)
def test_one_process_holds_the_socket_and_another_takes_over_after_kill_9(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.echo = True
    with (
        FakeSlackServer(ack_timeout=1.0, retry_delays=(0.0, 1.0, 2.0)) as fake,
        fleet_on_fresh_database(tmp_path, fake_openai) as fleet,
    ):
        for user in USERS:
            fake.add_user(user, user.lower())
        env = {
            "TELEGRAM_BOT_TOKEN": "",
            "SLACK_BOT_TOKEN": fake.bot_token,
            "SLACK_APP_TOKEN": fake.app_token,
            "SLACK_API_URL": fake.api_url,
            "SLACK_ALLOWED_USER_IDS": ",".join(USERS),
        }
        for name in NAMES:
            fleet.start(name, **env)

        def holder() -> str | None:
            return fleet.name_of(fleet.holder(SOCKET_LEASE))

        try:
            wait_for(lambda: holder() is not None and fake.ready_connections == 1, within_s=60)
            wait_for(lambda: {fleet.name_of(o) for o in fleet.members()} >= set(NAMES), 60)
            time.sleep(1.0)  # a second socket would be open by now
            assert fake.live_connections == 1
            for user in USERS[:3]:
                fake.dm(user, f"hello {user}")
            wait_for(lambda: all(echoes(fake, u) for u in USERS[:3]), within_s=30)

            first = holder()
            assert first is not None
            fleet.kill(first)
            killed = time.monotonic()
            fake.dm(USERS[0], "in the gap")  # to a dead socket, or to none: sent again
            wait_for(lambda: holder() not in (None, first), within_s=30)
            wait_for(lambda: fake.ready_connections == 1, within_s=30)
            print(f"fail-over: a new socket {time.monotonic() - killed:.1f} s after kill -9")
            for user in USERS[3:]:
                fake.dm(user, f"hello {user}")
            wait_for(lambda: all(echoes(fake, u) for u in USERS[3:]), within_s=30)
            wait_for(lambda: "echo: in the gap" in echoes(fake, USERS[0]), within_s=30)
            time.sleep(0.5)  # a doubled reply would come now
        except AssertionError:
            print(fleet.diagnosis())
            print(fleet.logs())
            raise
        assert echoes(fake, USERS[0]) == [f"echo: hello {USERS[0]}", "echo: in the gap"]
        for user in USERS[1:]:
            assert echoes(fake, user) == [f"echo: hello {user}"]
