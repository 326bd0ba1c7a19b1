"""kill -9 the terminal chat at each crash point, restart it, and nothing is lost.

Issue 3's points, one scenario each (the tool killed mid-run is in test_crash_recovery.py):
the model call in flight, the tool-call rows written but no tool started, an approval
pending, the final answer just written. After every restart the same three things hold:
no user message is lost (each is kept and answered), no model request carries a tool call
without its result, and no completed tool runs a second time (each run appends a line to
workspace/runs.log).
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer

LOG_A_RUN = "echo run >> runs.log"
DEADLINE_S = 20


class Chat:
    """``chathub chat`` subprocesses over one database, workspace and fake model."""

    def __init__(self, tmp_path: Path, fake: FakeOpenAIServer) -> None:
        self.tmp_path = tmp_path
        self.fake = fake
        self.db_path = tmp_path / "chathub.db"
        self.workspace = tmp_path / "workspace"
        self.children: list[Child] = []

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.tmp_path),
            "LLM_BASE_URL": self.fake.base_url,
            "LLM_MODEL": "fake-model",
            "DATABASE_URL": f"sqlite+aiosqlite:///{self.db_path}",
            "CHATHUB_WORKSPACE": str(self.workspace),
            "CHATHUB_TIMEZONE": "UTC",
            # The fact deriver would ask the model after a turn (as service_env says).
            "MEMORY_DERIVE_FACTS": os.environ.get("MEMORY_DERIVE_FACTS", "false"),
            **extra,
        }

    def allow_shell(self) -> None:
        """A rule so execute_cmd runs without an approval prompt."""
        rule = ["--tool", "execute_cmd", "--action", "allow", "--priority", "1"]
        subprocess.run(
            [sys.executable, "-m", "bot.cli", "rules", "add", *rule],
            env=self.env(),
            cwd=self.tmp_path,
            check=True,
            capture_output=True,
            timeout=DEADLINE_S,
        )

    def start(self, message: str, *, pipe_stdout: bool = False, **env: str) -> Child:
        """A chat with ``message`` typed in and stdin left open (the turn it starts runs)."""
        process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "chat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE if pipe_stdout else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env=self.env(**env),
            cwd=self.tmp_path,
        )
        child = Child(process)
        self.children.append(child)
        child.type(message)
        return child

    def restart(self, stdin: str = "") -> str:
        """A chat that reads ``stdin`` to its end and exits; its stdout."""
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli", "chat"],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=self.tmp_path,
            timeout=DEADLINE_S,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.db_path) as db:
            return db.execute(sql).fetchall()

    def runs(self) -> int:
        log = self.workspace / "runs.log"
        return len(log.read_text().splitlines()) if log.exists() else 0

    def close(self) -> None:
        for child in self.children:
            child.close()


class Child:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        if process.stdout is not None:
            self._pump_thread.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def type(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def wait_for_output(self, text: str) -> None:
        """Read stdout lines until one contains ``text``."""
        end = time.monotonic() + DEADLINE_S
        while not any(text in line for line in self.output):
            remaining = end - time.monotonic()
            assert remaining > 0, f"{text!r} never printed; got {''.join(self.output)!r}"
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            assert line is not None, f"exited before printing {text!r}: {''.join(self.output)!r}"
            self.output.append(line)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def wait_for_self_kill(self) -> None:
        """A failpoint kills the process with SIGKILL: wait for that death."""
        assert self.process.wait(timeout=DEADLINE_S) == -signal.SIGKILL

    def close(self) -> None:
        """Kill the process if a failed test left it running; close its pipes."""
        if self.process.poll() is None:
            self.kill()
        if self._pump_thread.is_alive():
            self._pump_thread.join(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def chat(tmp_path: Path, fake_openai: FakeOpenAIServer) -> Iterator[Chat]:
    harness = Chat(tmp_path, fake_openai)
    try:
        yield harness
    finally:
        harness.close()


def assert_nothing_lost(chat: Chat, *, users: list[str], runs: int) -> None:
    """The three invariants, checked on the database and on every model request."""
    rows = chat.query("SELECT id, role, content, status FROM chat_history ORDER BY id")
    with_calls = {
        message_id for (message_id,) in chat.query("SELECT message_id FROM chat_llm_tools")
    }
    # No user message lost: each is stored once, ok, and answered before the next one.
    assert [(content, status) for _, role, content, status in rows if role == "user"] == [
        (text, "ok") for text in users
    ]
    user_at = [i for i, (_, role, _, _) in enumerate(rows) if role == "user"]
    for start, stop in zip(user_at, [*user_at[1:], len(rows)], strict=True):
        answers = [
            content
            for message_id, role, content, status in rows[start + 1 : stop]
            if role == "assistant" and status == "ok" and message_id not in with_calls
        ]
        assert answers and answers[-1], f"{rows[start][2]!r} got no answer: {rows}"
    assert (
        chat.query("SELECT name, status FROM chat_llm_tools WHERE status IN ('running', 'pending')")
        == []
    )
    # No tool call without its result in any model context (the last one included).
    assert chat.fake.requests, "the model was never asked"
    for request in chat.fake.requests:
        assert_calls_answered(request["messages"])
    last = chat.fake.requests[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"] == users
    # No completed tool executed a second time.
    assert chat.runs() == runs


def assert_calls_answered(messages: list[dict[str, Any]]) -> None:
    """Each assistant message's tool calls are followed by one tool message per call id."""
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        asked = [call["id"] for call in message["tool_calls"]]
        answered = []
        for following in messages[index + 1 :]:
            if following["role"] != "tool":
                break
            answered.append(following["tool_call_id"])
        assert sorted(answered) == sorted(asked), f"unanswered tool calls in {messages}"


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


# -- 1. killed while the model call is in flight ---------------------------------------


def test_killed_during_the_first_model_call(chat: Chat, fake_openai: FakeOpenAIServer):
    fake_openai.reply_hang()
    child = chat.start("hello")
    wait_until(lambda: len(fake_openai.requests) == 1, "the model request")
    child.kill()

    assert chat.query("SELECT role, content, status FROM chat_history") == [("user", "hello", "ok")]

    fake_openai.reply_text("Hi! (asked again after the restart)")
    out = chat.restart()

    assert "Resuming" in out and "Hi! (asked again after the restart)" in out
    assert len(fake_openai.requests) == 2
    assert_nothing_lost(chat, users=["hello"], runs=0)


def test_killed_during_the_model_call_after_a_tool_round(chat: Chat, fake_openai: FakeOpenAIServer):
    chat.allow_shell()
    fake_openai.reply_tool_calls(("call_1", "execute_cmd", {"command": LOG_A_RUN}))
    fake_openai.reply_hang()
    child = chat.start("log a run")
    wait_until(lambda: len(fake_openai.requests) == 2, "the model request after the tool")
    child.kill()

    assert chat.query("SELECT name, status FROM chat_llm_tools") == [("execute_cmd", "done")]
    assert chat.runs() == 1

    fake_openai.reply_text("Logged one run.")
    out = chat.restart()

    # The finished call is not re-run: its stored result goes to the model.
    assert "Resuming" in out and "Logged one run." in out
    assert tool_results(fake_openai.requests[-1]["messages"]) == ["(no output)\n[exit code 0]"]
    assert_nothing_lost(chat, users=["log a run"], runs=1)


# -- 2. killed after the tool-call row is written, before the tool starts ---------------


def test_killed_after_the_tool_rows_before_the_tool_starts(
    chat: Chat, fake_openai: FakeOpenAIServer
):
    chat.allow_shell()
    fake_openai.reply_tool_calls(("call_1", "execute_cmd", {"command": LOG_A_RUN}))
    chat.start("log a run", CHATHUB_FAILPOINTS="after_tool_rows").wait_for_self_kill()

    assert chat.query("SELECT role, content FROM chat_history ORDER BY id") == [
        ("user", "log a run"),
        ("assistant", ""),
    ]
    assert chat.query("SELECT name, status FROM chat_llm_tools") == [("execute_cmd", "running")]
    assert chat.runs() == 0

    fake_openai.reply_text("Logged one run.")
    out = chat.restart()

    # The call runs from its recorded intent, once.
    assert "Resuming" in out and "⚙ execute_cmd" in out and "Logged one run." in out
    assert chat.query("SELECT status FROM chat_llm_tools") == [("done",)]
    assert tool_results(fake_openai.requests[-1]["messages"]) == ["(no output)\n[exit code 0]"]
    assert_nothing_lost(chat, users=["log a run"], runs=1)


# -- 3. killed while the tool runs: tests/bot/test_crash_recovery.py ---------------------

# -- 4. killed while an approval is pending, approved after the restart -----------------


def test_killed_while_an_approval_is_pending(chat: Chat, fake_openai: FakeOpenAIServer):
    # No allow rule: under the default rules execute_cmd asks first.
    fake_openai.reply_tool_calls(("call_1", "execute_cmd", {"command": LOG_A_RUN}))
    child = chat.start("log a run", pipe_stdout=True)
    child.wait_for_output("Approve?")
    assert any("⚠ execute_cmd wants to run in" in line for line in child.output)

    (call_id,) = (row[0] for row in chat.query("SELECT id FROM chat_llm_tools"))
    assert chat.query("SELECT tool_call_id, decision FROM tool_approvals") == [(call_id, None)]
    assert chat.query("SELECT status FROM chat_llm_tools") == [("pending",)]
    child.kill()
    assert chat.runs() == 0

    fake_openai.reply_text("Logged one run.")
    out = chat.restart("y\n")

    # Asked again at the start; "y" approves; the tool runs once and the turn completes.
    assert "Resuming" in out
    assert out.count("⚠ execute_cmd wants to run in") == 1 and out.count("Approve?") == 1
    assert "Logged one run." in out
    assert chat.query("SELECT status FROM chat_llm_tools") == [("done",)]
    assert chat.query("SELECT tool_call_id, decision FROM tool_approvals") == [
        (call_id, "approved")
    ]
    assert tool_results(fake_openai.requests[-1]["messages"]) == ["(no output)\n[exit code 0]"]
    assert_nothing_lost(chat, users=["log a run"], runs=1)


# -- 5. killed right after the final answer row is written ------------------------------


def test_killed_right_after_the_final_answer_row(chat: Chat, fake_openai: FakeOpenAIServer):
    chat.allow_shell()
    fake_openai.reply_tool_calls(("call_1", "execute_cmd", {"command": LOG_A_RUN}))
    fake_openai.reply_text("Logged one run.")
    chat.start("log a run", CHATHUB_FAILPOINTS="after_final_row").wait_for_self_kill()

    assert chat.query("SELECT role, content FROM chat_history ORDER BY id") == [
        ("user", "log a run"),
        ("assistant", ""),
        ("assistant", "Logged one run."),
    ]
    assert chat.runs() == 1

    fake_openai.reply_text("Still one run.")
    out = chat.restart("how many runs?\n")

    # The turn was complete: nothing to resume, nothing re-run; the next turn sees it all.
    assert "Resuming" not in out and "Still one run." in out
    assert len(fake_openai.requests) == 3
    assert_nothing_lost(chat, users=["log a run", "how many runs?"], runs=1)
