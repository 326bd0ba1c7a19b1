"""Fixtures for tests that run ``chathub serve`` as a process against the fakes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bot.matrix.homeserver import Homeserver, unavailable
from tests.bot.process import ALICE, free_port, service_env
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeTelegramServer


@pytest.fixture
def telegram() -> Iterator[FakeTelegramServer]:
    server = FakeTelegramServer().start()
    yield server
    server.stop()


@pytest.fixture
def serve(tmp_path: Path, telegram: FakeTelegramServer, fake_openai: FakeOpenAIServer):
    children: list[subprocess.Popen[str]] = []

    def start(**env: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=service_env(
                tmp_path,
                fake_openai.base_url,
                **{
                    "TELEGRAM_BOT_TOKEN": "123456:TEST",
                    "TELEGRAM_API_URL": telegram.base_url,
                    "TELEGRAM_ALLOWED_USER_IDS": str(ALICE),
                    "HTTP_PORT": str(free_port()),
                    **env,
                },
            ),
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        if child.stderr:
            child.stderr.close()


@pytest.fixture(scope="session")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    """A real Synapse for the Matrix tests, started once per session and worker."""
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    server = Homeserver(tmp_path_factory.mktemp("synapse"))
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"Synapse could not start here: {exc}")
    yield server
    server.stop()
