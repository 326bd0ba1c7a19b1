"""``kill -9`` with one turn in flight and three messages queued: after restart all four
are answered, in order, and none is lost or stored twice.

The hub runs in a child process (``tests/engine/hub/hub_driver.py``) over a SQLite file
and the fake OpenAI server. Messages 2-4 are acknowledged (``QUEUED``: durably stored)
and killed before their turn starts, so this also covers "killed right after the
acknowledgement".
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[3]
SOURCE = "telegram:42"
MESSAGES = ["first message", "second message", "third message", "fourth message"]


def _env(tmp_path: Path, fake: FakeOpenAIServer) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "LLM_BASE_URL": fake.base_url,
        "LLM_MODEL": "fake-model",
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}",
        "CHATHUB_WORKSPACE": str(tmp_path / "workspace"),
        "CHATHUB_TIMEZONE": "UTC",
    }


class Driver:
    """The driver process; its stdout lines arrive on a queue read by a thread."""

    def __init__(self, tmp_path: Path, fake: FakeOpenAIServer, run: int) -> None:
        self.stderr_path = tmp_path / f"driver-{run}.stderr"
        with self.stderr_path.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.engine.hub.hub_driver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=_env(tmp_path, fake),
                cwd=tmp_path,  # no stray .env is read
            )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # EOF: the process ended

    def send(self, source: str, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{source}\t{text}\n")
        self.process.stdin.flush()

    def expect(self, prefix: str, count: int = 1, deadline_s: float = 20) -> list[str]:
        """The next ``count`` lines starting with ``prefix`` (other lines are kept in seen)."""
        end = time.monotonic() + deadline_s
        found: list[str] = []
        while len(found) < count:
            try:
                line = self.lines.get(timeout=max(end - time.monotonic(), 0))
            except queue.Empty:
                raise AssertionError(
                    self._report(f"no {count}x {prefix!r} in {deadline_s}s")
                ) from None
            if line is None:
                raise AssertionError(self._report(f"the driver exited waiting for {prefix!r}"))
            self.seen.append(line)
            if line.startswith(prefix):
                found.append(line)
        return found

    def _report(self, what: str) -> str:
        return f"{what}; stdout so far: {self.seen}; stderr: {self.stderr_path.read_text()[-3000:]}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def drivers(tmp_path: Path, fake_openai: FakeOpenAIServer) -> Iterator[list[Driver]]:
    started: list[Driver] = []
    yield started
    for driver in started:
        driver.kill()


def _wait_for_requests(fake: FakeOpenAIServer, count: int, deadline_s: float = 20) -> None:
    # Polls the fake server (in this process) while the child gets there.
    end = time.monotonic() + deadline_s
    while len(fake.requests) < count:
        assert time.monotonic() < end, f"the model got {len(fake.requests)} of {count} requests"
        time.sleep(0.02)


def _user_texts(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def _rows(db_path: Path) -> tuple[list[tuple], list[str]]:
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        history = db.execute("SELECT id, role, content, status FROM chat_history ORDER BY id")
        queued = db.execute("SELECT content FROM queued_messages ORDER BY id")
        return history.fetchall(), [content for (content,) in queued.fetchall()]


def test_kill_9_with_a_turn_in_flight_and_three_queued_loses_nothing(
    tmp_path: Path, fake_openai: FakeOpenAIServer, drivers: list[Driver]
):
    db_path = tmp_path / "chathub.db"
    fake_openai.reply_hang()  # the first turn's model call never answers
    first = Driver(tmp_path, fake_openai, 1)
    drivers.append(first)
    first.expect("READY")
    first.send(SOURCE, MESSAGES[0])
    first.expect("QUEUED")
    # Once the model has the request, the first turn is past its round boundary and
    # hangs: the next three messages can only wait in the queue (none is injected).
    _wait_for_requests(fake_openai, 1)
    for text in MESSAGES[1:]:
        first.send(SOURCE, text)
    first.expect("QUEUED", 3)  # acknowledged: each is durable now
    first.kill()

    history, queued = _rows(db_path)
    assert [(role, content, status) for _, role, content, status in history] == [
        ("user", MESSAGES[0], "ok")
    ]
    assert queued == MESSAGES[1:]
    assert _user_texts(fake_openai.requests[0]) == MESSAGES[:1]

    # After restart the interrupted turn is resumed first (without taking queued input)
    # and answers message 1. Then message 2 seeds a turn, and messages 3 and 4 are
    # injected into it at its first round boundary, before its model call: one answer
    # covers 2-4. So two model calls and two Done events answer the four messages.
    fake_openai.reply_text("answer to the first")
    fake_openai.reply_text("answer to the rest")
    second = Driver(tmp_path, fake_openai, 2)
    drivers.append(second)
    assert second.expect("DONE", 2) == [
        f"DONE {SOURCE} answer to the first",
        f"DONE {SOURCE} answer to the rest",
    ]
    assert not [line for line in second.seen if line.startswith(("ERROR", "LAGGED"))]

    history, queued = _rows(db_path)
    assert queued == []
    users = [(id_, content, status) for id_, role, content, status in history if role == "user"]
    assert [content for _, content, _ in users] == MESSAGES  # each stored once, in order
    assert all(status == "ok" for _, _, status in users)
    for id_, _, _ in users:  # every user message has an answer after it
        assert any(role == "assistant" and later > id_ for later, role, _, _ in history)
    assert [(role, content) for _, role, content, _ in history] == [
        ("user", MESSAGES[0]),
        ("assistant", "answer to the first"),
        ("user", MESSAGES[1]),
        ("user", MESSAGES[2]),
        ("user", MESSAGES[3]),
        ("assistant", "answer to the rest"),
    ]

    # The model saw the messages in order: the hung call, the resumed turn, and the turn
    # seeded by message 2 with 3 and 4 injected (the request builder merges consecutive
    # user rows into one user message, blank-line separated).
    assert len(fake_openai.requests) == 3
    assert [_user_texts(r) for r in fake_openai.requests] == [
        MESSAGES[:1],
        MESSAGES[:1],
        [MESSAGES[0], "\n\n".join(MESSAGES[1:])],
    ]
