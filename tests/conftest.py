"""Shared fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.fakes.openai_server import FakeOpenAIServer

# A service's fact deriver asks the model after turns: in tests it would take the replies
# scripted for the next turn. Off unless a test turns it on (tests/memory test it).
os.environ.setdefault("MEMORY_DERIVE_FACTS", "false")

#: The slowest test files, slowest first (wall seconds on this 2-core machine, 2026-12-07
#: evening: 113 down to 24), started before the others: ``make test`` hands each file to
#: one worker (xdist's own order, the most tests first, handed a file of seven tests
#: that runs 90 s out late).
SLOW_FIRST = (
    "tests/bot/test_startup_faults.py",
    "tests/bot/matrix/test_rooms.py",
    "tests/bot/fleet/test_fleet_processes.py",
    "tests/bot/test_junk_updates.py",
    "tests/bot/webchat/test_browser.py",
    "tests/engine/hub/test_fleet.py",
    "tests/bot/test_setup.py",
    "tests/bot/test_terminal_chat.py",
    "tests/bot/platform_contract/test_approvals.py",
    "tests/memory/test_deriver.py",
    "tests/bot/telegram_contract/test_message_kinds.py",
    "tests/bot/matrix/test_crash.py",
    "tests/bot/test_serve.py",
    "tests/bot/discord/test_gateway.py",
    "tests/scheduler/test_store.py",
    "tests/bot/platform_contract/test_questions.py",
    "tests/bot/webchat/test_voice.py",
    "tests/memory/test_indexer.py",
    "tests/bot/test_doctor.py",
    "tests/bot/platform_contract/test_conversation.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first, the rest in their order (the same in every worker)."""
    rank = {path: index for index, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


@pytest.fixture(scope="session")
def _fake_openai_server() -> Iterator[FakeOpenAIServer]:
    # One server for the whole run: starting and stopping uvicorn costs ~0.2 s.
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def fake_openai(_fake_openai_server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI-compatible server, with no scripts and no recorded requests."""
    _fake_openai_server.reset()
    yield _fake_openai_server
    _fake_openai_server.reset()
