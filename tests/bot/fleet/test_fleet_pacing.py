"""Three ``chathub serve`` processes on one PostgreSQL keep one bot's overall cap together:
100 chats answered at once, the fake Bot API enforcing Telegram's 30 messages per second
per bot, and not one 429 — each live member sends its share (bot/delivery/pacing.py,
docs/scale-out.md "One bot's cap, a whole fleet").

PostgreSQL only (``CHATHUB_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.bot.fleet.test_fleet_processes import fleet_on_fresh_database, replies
from tests.bot.process import wait_for
from tests.fakes.openai_server import FakeOpenAIServer
from tests.pg import POSTGRES_URL_ENV

pytestmark = pytest.mark.skipif(
    not os.environ.get(POSTGRES_URL_ENV), reason=f"{POSTGRES_URL_ENV} is not set"
)

CHATS = [5000 + n for n in range(100)]
NAMES = ["p1", "p2", "p3"]


@pytest.mark.timeout(240)
def test_three_processes_answer_100_chats_at_once_without_one_429(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.echo = True
    with fleet_on_fresh_database(tmp_path, fake_openai) as fleet:
        limits = fleet.telegram.enforce_limits()
        fleet.allowed = CHATS
        for name in NAMES:
            fleet.start(name)
        fleet.ready(NAMES)

        def all_see_three() -> bool:  # each keeps a third of the cap from now on
            return all("fleet members now 3" in fleet.log_of(name) for name in NAMES)

        wait_for(all_see_three, within_s=30)
        started = time.monotonic()
        for chat in CHATS:
            fleet.telegram.user_message(chat, chat, f"hello from {chat}")
        try:
            wait_for(lambda: all(replies(fleet.telegram, c) for c in CHATS), within_s=150)
        except AssertionError:
            missing = [c for c in CHATS if not replies(fleet.telegram, c)]
            print(f"{len(missing)} chats without their reply, the first: {missing[:10]}")
            others = [m.text for c in missing for m in fleet.telegram.messages(c)]
            print(f"{len(others)} other messages in them, the first: {others[:5]}")
            print(fleet.diagnosis())
            print(fleet.state())
            print(
                fleet.psql(
                    "SELECT id, conversation, status, attempts, recorded_by, sending_by, "
                    "next_attempt_at, error FROM platform_outbox WHERE status <> 'sent' "
                    "ORDER BY id"
                )
            )
            print(fleet.logs())
            raise
        elapsed = time.monotonic() - started
        time.sleep(1.0)  # a doubled reply would come now

        assert limits.count_429 == 0, limits.rejected[:5]
        assert limits.peak["overall 30/1s"] <= 30
        for chat in CHATS:
            assert replies(fleet.telegram, chat) == [f"echo: hello from {chat}"], chat
        print(
            f"\n3 processes, {len(CHATS)} replies in {elapsed:.1f} s: 0 responses 429, "
            f"at most {limits.peak['overall 30/1s']} in any second"
        )
