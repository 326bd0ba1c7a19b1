"""Shared fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.fakes.openai_server import FakeOpenAIServer

# A service's fact deriver asks the model after turns: in tests it would take the replies
# scripted for the next turn. Off unless a test turns it on (tests/memory test it).
os.environ.setdefault("MEMORY_DERIVE_FACTS", "false")


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
