"""Two ``chathub serve`` processes with Matrix on one PostgreSQL and a real Synapse: one sync
loop for the fleet (the ``matrix:sync`` lease), every message answered once, and when the
holder dies with ``kill -9`` the other takes the lease, syncs from the stored token and
answers what was written in the gap and what comes after.

PostgreSQL only (``CHATHUB_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from bot.matrix.service import SYNC_LEASE
from tests.bot.fleet.test_fleet_processes import fleet_on_fresh_database
from tests.bot.matrix.conftest import bodies, joined
from tests.bot.matrix.homeserver import Homeserver
from tests.bot.process import wait_for
from tests.fakes.openai_server import FakeOpenAIServer
from tests.pg import POSTGRES_URL_ENV

pytestmark = pytest.mark.skipif(
    not os.environ.get(POSTGRES_URL_ENV), reason=f"{POSTGRES_URL_ENV} is not set"
)

NAMES = ["m1", "m2"]


@pytest.mark.timeout(180)
def test_one_process_syncs_and_another_takes_over_after_kill_9(
    tmp_path: Path, fake_openai: FakeOpenAIServer, homeserver: Homeserver
) -> None:
    fake_openai.echo = True
    tag = uuid.uuid4().hex[:8]
    bot = homeserver.register(f"fleetbot{tag}")
    people = [homeserver.register(f"fleetperson{n}{tag}") for n in range(4)]
    with fleet_on_fresh_database(tmp_path, fake_openai) as fleet:
        env = {
            "TELEGRAM_BOT_TOKEN": "",
            "MATRIX_HOMESERVER": homeserver.url,
            "MATRIX_USER_ID": bot.user_id,
            "MATRIX_ACCESS_TOKEN": bot.token,
            "MATRIX_ALLOWED_USER_IDS": ",".join(p.user_id for p in people),
        }
        for name in NAMES:
            fleet.start(name, **env)

        def holder() -> str | None:
            return fleet.name_of(fleet.holder(SYNC_LEASE))

        def echoes(person, room):
            return [b for b in bodies(person, room, bot.user_id) if b.startswith("echo: ")]

        try:
            wait_for(lambda: holder() is not None, within_s=60)
            wait_for(lambda: {fleet.name_of(o) for o in fleet.members()} >= set(NAMES), 60)
            rooms = [p.create_room(invite=[bot.user_id], direct=True) for p in people]
            for person, room in zip(people, rooms, strict=True):
                wait_for(lambda p=person, r=room: joined(p, r, bot.user_id), within_s=30)
            for person, room in zip(people[:2], rooms[:2], strict=True):
                person.say(room, "hello")
            wait_for(
                lambda: all(echoes(p, r) for p, r in zip(people[:2], rooms[:2], strict=True)), 30
            )

            first = holder()
            assert first is not None
            fleet.kill(first)
            killed = time.monotonic()
            people[0].say(rooms[0], "in the gap")
            wait_for(lambda: holder() not in (None, first), within_s=30)
            print(f"fail-over: the lease taken {time.monotonic() - killed:.1f} s after kill -9")
            for person, room in zip(people[2:], rooms[2:], strict=True):
                person.say(room, "hello")
            wait_for(
                lambda: all(echoes(p, r) for p, r in zip(people[2:], rooms[2:], strict=True)), 30
            )
            wait_for(lambda: "echo: in the gap" in echoes(people[0], rooms[0]), within_s=30)
            time.sleep(1.0)  # a doubled reply would come now
        except AssertionError:
            print(fleet.diagnosis())
            print(fleet.logs())
            raise
        assert echoes(people[0], rooms[0]) == ["echo: hello", "echo: in the gap"]
        for person, room in zip(people[1:], rooms[1:], strict=True):
            assert echoes(person, room) == ["echo: hello"]
