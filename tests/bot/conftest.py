"""Fixtures for tests that run ``chathub serve`` as a process against the fakes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bot.process import ALICE, free_port
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
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(tmp_path),
                "LLM_BASE_URL": fake_openai.base_url,
                "LLM_MODEL": "fake-model",
                "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}",
                "CHATHUB_WORKSPACE": str(tmp_path / "workspace"),
                "CHATHUB_TIMEZONE": "UTC",
                "TELEGRAM_BOT_TOKEN": "123456:TEST",
                "TELEGRAM_API_URL": telegram.base_url,
                "TELEGRAM_ALLOWED_USER_IDS": str(ALICE),
                "HTTP_PORT": str(free_port()),
                **env,
            },
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
