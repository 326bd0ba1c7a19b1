"""A kill between a sub-agent's frame ending and its parent's call result.

``SubAgentFrames.run_sub_agent`` ends the child frame (``_close_frame``, one commit) and
returns; the parent's call result is a later commit (``handle_tool_call`` /
``run_batch`` through the ``OutcomeRecorder``). A kill between the two leaves the
spawning call open and its child frame ended, the child's answer stored in it. The
resume must take that answer: the child's agent is not asked again and its tools (a mail
sent) do not run a second time.

A real process is killed there (the ``after_child_frame_ended`` failpoint), then the
session is resumed over the same database in this one (the rows such a kill leaves, in
batches too: ``tests/engine/session/test_resume.py``).

Run as a script (``python this_file.py URL WORKSPACE MAIL_LOG``) it is that killed process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from engine.config import AppConfig, EngineConfig, load_settings
from engine.core import Engine
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import text, tool_call
from engine.llm.types import LlmResponse, Message
from engine.session.turn.gate import AllowAll
from engine.tools.protocols import ToolCategory, ToolContext

PROMPT = "Mail Bob the quarterly report."
ANSWER = "Mail sent to Bob."


class SendMail:
    """A tool with an effect outside the database: each run appends a line to a file."""

    name = "send_mail"
    description = "Sends an e-mail."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"to": {"type": "string"}},
        "required": ["to"],
    }
    category = ToolCategory.SHELL
    root_agent_only = sub_agents_only = interactive_only = False

    def __init__(self, log: Path) -> None:
        self.log = log

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        with self.log.open("a") as out:
            out.write(f"mail to {args['to']}\n")
        return "sent"


def _who(messages: Sequence[Message]) -> str:
    first = messages[0]["content"]
    prompt = first if isinstance(first, str) else json.dumps(first)
    return "generalist" if "You are a sub-agent" in prompt else "main"


class RoutedModel:
    """The root hands the mail to a generalist; the generalist sends it, then answers."""

    name = "primary"
    cache_hints = False

    def __init__(self) -> None:
        self.asked: list[str] = []  # who asked, in order
        self.requests: list[list[Message]] = []

    async def complete(self, messages, tools, *, on_delta=None) -> LlmResponse:  # type: ignore[no-untyped-def]
        who = _who(messages)
        self.asked.append(who)
        self.requests.append(list(messages))
        has_result = any(m["role"] == "tool" for m in messages)
        if who == "generalist":
            return text(ANSWER) if has_result else tool_call("send_mail", '{"to": "bob"}', "m1")
        if has_result:
            return text("Done: the report went to Bob.")
        arguments = json.dumps({"agent_id": "generalist", "prompt": PROMPT})
        return tool_call("execute_subtask", arguments, "s1")

    async def aclose(self) -> None:
        return None


async def open_engine(url: str, workspace: Path, mail_log: Path, model: Any) -> Engine:
    settings = load_settings(
        database_url=url, chathub_workspace=workspace, chathub_timezone="UTC", _env_file=None
    )
    limits = EngineConfig(max_tool_rounds=6, max_tool_result_chars=200, command_timeout_s=5)
    config = AppConfig(settings=settings, models=(), engine=limits)
    engine = await Engine.open(config, models=ModelRegistry([model]), policy=AllowAll())
    engine.tools.register(SendMail(mail_log))
    return engine


def tool_messages(messages: list[Message]) -> list[Any]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def frames_of(db: Path, session_id: int) -> list[tuple[int, bool]]:
    """``(depth, ended)`` of every frame the session ever had, oldest first."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT depth, terminated_at IS NOT NULL FROM chat_sessions_stack"
            " WHERE session_id = ? ORDER BY id",
            (session_id,),
        ).fetchall()
    return [(depth, bool(ended)) for depth, ended in rows]


# -- the killed process ----------------------------------------------------------------------


async def _killed_turn(url: str, workspace: Path, mail_log: Path) -> None:
    engine = await open_engine(url, workspace, mail_log, RoutedModel())
    handler = await engine.new_session("cron", is_interactive=False)
    print(handler.session.id, flush=True)
    await handler.handle_message("Send the quarterly report to Bob.")
    print("not killed", flush=True)


# -- the test ----------------------------------------------------------------------------------


def _paths(tmp_path: Path) -> tuple[str, Path, Path, Path]:
    from tests.pg import migrated_sqlite

    db = tmp_path / "chathub.db"
    return migrated_sqlite(db), db, tmp_path / "workspace", tmp_path / "mail.log"


async def test_a_kill_after_the_child_frame_ended_takes_its_answer_not_a_second_run(tmp_path):
    url, db, workspace, mail_log = _paths(tmp_path)
    env = {**os.environ, "MEMORY_DERIVE_FACTS": "false"}
    env["CHATHUB_FAILPOINTS"] = "after_child_frame_ended"
    killed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-P", __file__, url, str(workspace), str(mail_log)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=50,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    session_id = int(killed.stdout.split()[0])
    assert mail_log.read_text() == "mail to bob\n"
    # What the kill left: the child's frame ended, the spawning call still open.
    assert frames_of(db, session_id) == [(0, False), (1, True)]

    model = RoutedModel()
    engine = await open_engine(url, workspace, mail_log, model)
    try:
        assert await engine.interrupted_sessions() == [session_id]
        result = await engine.resume(session_id)

        assert model.asked == ["main"], "the generalist was asked again"
        assert mail_log.read_text() == "mail to bob\n", "the mail was sent twice"
        assert tool_messages(model.requests[0]) == [ANSWER]
        assert getattr(result, "content", None) == "Done: the report went to Bob."
        assert frames_of(db, session_id) == [(0, False), (1, True)]  # no second child
        root = await engine.store.sessions.root_frame(session_id)
        [call] = [c for m in await engine.store.history.load(root.id) for c in m.tool_calls]
        assert (call.status, call.result) == ("done", ANSWER)
        assert await engine.interrupted_sessions() == []
    finally:
        await engine.close()


if __name__ == "__main__":
    asyncio.run(_killed_turn(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
