"""``kill -9`` during derivation loses and doubles nothing.

A deriver runs in a child process (``tests/memory/deriver_driver.py``) over a SQLite file
and the fake model server; it is killed with SIGKILL while the model call hangs, inside
the transaction that applies the batch (a failpoint, everything written but not
committed), or right after that commit. A deriver started again in this process on the
same file then leaves each fact stored exactly once and the mark past the batch, and asks
the model again only when the killed one had not committed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.config import ModelConfig
from engine.failpoints import ENV_VAR
from engine.llm.client import OpenAICompatModel
from engine.store import Store
from memory.deriver import Deriver
from memory.facts import FactStore
from tests.fakes.openai_server import FakeOpenAIServer
from tests.memory.conftest import MEMORY_LAYERS, write_history

ROOT = Path(__file__).resolve().parents[2]
MODEL = "memory-model"
SOURCE = "telegram:111"
DEADLINE_S = 20


def answer(message_ids: list[int]) -> str:
    ops = [
        {"op": "add", "fact": "Ann is vegetarian", "message_ids": message_ids[:1]},
        {"op": "add", "fact": "Ann lives in Lisbon", "message_ids": message_ids[1:2]},
    ]
    return json.dumps({"operations": ops})


class Files:
    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "chathub.db"
        self.url = f"sqlite+aiosqlite:///{self.path}"
        self.tmp_path = tmp_path
        self.children: list[subprocess.Popen[str]] = []

    async def history(self) -> tuple[int, list[int]]:
        store = await Store.open(self.url, MEMORY_LAYERS)
        session = await store.sessions.create(SOURCE)
        ids = await write_history(
            store,
            session.id,
            [("user", "I'm vegetarian"), ("user", "and I live in Lisbon"), ("assistant", "Noted")],
        )
        await store.close()
        return session.id, ids

    def child(self, fake: FakeOpenAIServer, failpoint: str | None = None) -> subprocess.Popen[str]:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.tmp_path),
            "PYTHONPATH": str(ROOT),
        }
        if failpoint:
            env[ENV_VAR] = failpoint
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.memory.deriver_driver", self.url, fake.base_url],
            stdout=subprocess.PIPE,
            stderr=(self.tmp_path / "driver.stderr").open("w"),
            text=True,
            env=env,
            cwd=self.tmp_path,
        )
        self.children.append(process)
        return process

    def rows(self) -> tuple[list[tuple[str, str]], list[tuple[int, int]]]:
        """(facts as (body, message_ids json), marks as (last_message_id, failures))."""
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            facts = db.execute("SELECT body, message_ids FROM memory_facts ORDER BY id").fetchall()
            marks = db.execute(
                "SELECT last_message_id, failures FROM memory_derive_marks"
            ).fetchall()
        return facts, marks

    def stderr(self) -> str:
        return (self.tmp_path / "driver.stderr").read_text()[-3000:]


@pytest.fixture
def files(tmp_path: Path) -> Iterator[Files]:
    made = Files(tmp_path)
    yield made
    for process in made.children:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def wait_for_requests(fake: FakeOpenAIServer, count: int) -> None:
    # Polls the fake server (in this process) while the child gets there.
    end = time.monotonic() + DEADLINE_S
    while len(fake.requests) < count:
        assert time.monotonic() < end, f"the model got {len(fake.requests)} of {count} requests"
        time.sleep(0.02)


def killed_by_its_failpoint(process: subprocess.Popen[str], files: Files) -> None:
    try:
        code = process.wait(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the driver did not die; stderr: {files.stderr()}") from None
    assert code == -signal.SIGKILL, f"exit {code}; stderr: {files.stderr()}"


async def derive_again(files: Files, fake: FakeOpenAIServer) -> int:
    store = await Store.open(files.url, MEMORY_LAYERS)
    try:
        async with httpx.AsyncClient() as http:
            config = ModelConfig(name=MODEL, base_url=fake.base_url, timeout_s=5)
            model = OpenAICompatModel(config, http)
            deriver = Deriver(store.db, lambda: [model], FactStore(store.db))
            changed = await deriver.derive_pending()
            assert await deriver.pending() == []
            return changed
    finally:
        await store.close()


EXPECTED = ["Ann is vegetarian", "Ann lives in Lisbon"]


async def test_kill_9_while_the_model_call_hangs_derives_the_batch_once_after_restart(
    files: Files, fake_openai: FakeOpenAIServer
) -> None:
    _, ids = await files.history()
    fake_openai.reply_hang(model=MODEL)
    child = files.child(fake_openai)
    wait_for_requests(fake_openai, 1)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    assert files.rows() == ([], [(0, 0)])

    fake_openai.reset()  # the hanging request is let go
    fake_openai.reply_text(answer(ids), model=MODEL)
    assert await derive_again(files, fake_openai) == 2

    facts, marks = files.rows()
    assert [body for body, _ in facts] == EXPECTED
    assert [json.loads(m) for _, m in facts] == [[ids[0]], [ids[1]]]
    assert marks == [(ids[-1], 0)]
    [request] = fake_openai.requests  # the batch was read again, whole
    conversation = json.loads(request["messages"][1]["content"])["conversation"]
    assert [m["message_id"] for m in conversation] == ids


async def test_kill_9_inside_the_apply_transaction_commits_nothing_and_restart_applies_once(
    files: Files, fake_openai: FakeOpenAIServer
) -> None:
    _, ids = await files.history()
    fake_openai.reply_text(answer(ids), model=MODEL)
    killed_by_its_failpoint(files.child(fake_openai, "deriver_before_commit"), files)
    assert files.rows() == ([], [(0, 0)])  # the facts were written, the kill undid them

    fake_openai.reply_text(answer(ids), model=MODEL)
    assert await derive_again(files, fake_openai) == 2

    facts, marks = files.rows()
    assert [body for body, _ in facts] == EXPECTED
    assert marks == [(ids[-1], 0)]
    assert len(fake_openai.requests) == 2


async def test_kill_9_right_after_the_commit_derives_nothing_again(
    files: Files, fake_openai: FakeOpenAIServer
) -> None:
    _, ids = await files.history()
    fake_openai.reply_text(answer(ids), model=MODEL)
    killed_by_its_failpoint(files.child(fake_openai, "deriver_after_commit"), files)
    assert [body for body, _ in files.rows()[0]] == EXPECTED

    assert await derive_again(files, fake_openai) == 0

    facts, marks = files.rows()
    assert [body for body, _ in facts] == EXPECTED
    assert marks == [(ids[-1], 0)]
    assert len(fake_openai.requests) == 1  # the restarted deriver did not ask again
