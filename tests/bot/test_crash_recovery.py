"""kill -9 in the middle of a tool call, restart, and nothing is lost."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from engine.tools.processes import ProcessIdentity, members_of
from tests.bot.process import service_env
from tests.fakes.openai_server import FakeOpenAIServer


def _env(tmp_path: Path, fake: FakeOpenAIServer) -> dict[str, str]:
    return service_env(tmp_path, fake.base_url)


def _wait_for(path: Path, deadline_s: float = 20) -> None:
    # Polls a file the child writes; the wait ends as soon as the child gets there.
    end = time.monotonic() + deadline_s
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def _wait_for_process_group(db_path: Path, deadline_s: float = 20) -> None:
    end = time.monotonic() + deadline_s
    query = "SELECT count(*) FROM chat_llm_tools WHERE process_group IS NOT NULL"
    while True:
        with sqlite3.connect(db_path) as db:
            if db.execute(query).fetchone()[0]:
                return
        assert time.monotonic() < end, "the command's process group was never recorded"
        time.sleep(0.02)


def test_a_command_killed_mid_flight_is_reported_to_the_model_never_run_twice(
    tmp_path: Path, fake_openai: FakeOpenAIServer
):
    workspace = tmp_path / "workspace"
    allow_shell = ["rules", "add", "--tool", "execute_cmd", "--action", "allow", "--priority", "1"]
    subprocess.run(
        [sys.executable, "-m", "bot.cli", *allow_shell],
        env=_env(tmp_path, fake_openai),
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    command = "echo run >> runs.log; sleep 60"
    fake_openai.reply_tool_calls(("call_1", "execute_cmd", {"command": command}))
    child = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(tmp_path, fake_openai),
        cwd=tmp_path,
    )
    assert child.stdin is not None
    child.stdin.write("append a run to runs.log\n")
    child.stdin.flush()
    _wait_for(workspace / "runs.log")
    _wait_for_process_group(tmp_path / "chathub.db")  # the command now sleeps
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    child.stdin.close()

    with sqlite3.connect(tmp_path / "chathub.db") as db:
        assert db.execute("SELECT role, content FROM chat_history ORDER BY id").fetchall() == [
            ("user", "append a run to runs.log"),
            ("assistant", ""),
        ]
        [(name, status, launched, group, start)] = db.execute(
            "SELECT name, status, launched_at, process_group, process_start FROM chat_llm_tools"
        ).fetchall()
    assert (name, status) == ("execute_cmd", "running")
    assert launched is not None and group is not None and start is not None
    identity = ProcessIdentity.decode(start)
    assert identity is not None
    # The command's group died with the service (its `sleep 60` too).
    deadline = time.monotonic() + 5
    while members_of(group, identity):
        assert time.monotonic() < deadline, "the command outlived the service"
        time.sleep(0.01)

    fake_openai.reply_text("It was interrupted; runs.log has the line, so I will not retry.")
    fake_openai.reply_text("Yes: runs.log has the line.")
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "chat"],
        input="did it work?\n",
        capture_output=True,
        text=True,
        env=_env(tmp_path, fake_openai),
        cwd=tmp_path,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    # At start the interrupted turn is resumed: the command had started, so it is not run
    # again; the model is told and answers the first message; then the new message gets
    # its own turn.
    assert "Resuming" in done.stdout and "interrupted" in done.stdout
    assert "Yes: runs.log has the line." in done.stdout
    assert (workspace / "runs.log").read_text() == "run\n"  # its effect happened once
    resumed, answered = (r["messages"] for r in fake_openai.requests[-2:])
    assert [m["role"] for m in resumed[1:-1]] == ["user", "assistant", "tool"]
    assert resumed[3]["content"] == (
        "Error: the service restarted while this command was running; it may or may not "
        "have completed. Check before retrying."
    )
    assert [m["role"] for m in answered[1:-1]] == ["user", "assistant", "tool", "assistant", "user"]
    with sqlite3.connect(tmp_path / "chathub.db") as db:
        assert db.execute("SELECT status FROM chat_llm_tools").fetchall() == [("failed",)]
