"""The terminal's prompts as a person at the keyboard meets them: a job's card shown at
the prompt, a card decided elsewhere, a command typed at a prompt, ``/stop`` with lines
typed meanwhile. An in-process ``TerminalChat`` on the real engine and hub, stdin a pipe."""

from __future__ import annotations

import asyncio
import io
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest

from bot.terminal import SOURCE, TerminalChat
from engine.approval import OPERATOR
from engine.core import Engine
from engine.hub import ChatHub, Choice
from scheduler.service import Scheduler
from tests.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer

TIMEOUT_S = 10.0


async def until(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"never came: {what}"
        await asyncio.sleep(0.01)
    return value


class Keyboard:
    """A terminal chat with a pipe for stdin and a buffer for the screen."""

    def __init__(self, hub: ChatHub) -> None:
        read, write = os.pipe()
        self._keys = os.fdopen(write, "w")
        self.screen = io.StringIO()
        self.chat = TerminalChat(
            hub, hub.events(SOURCE), stdin=os.fdopen(read, "r"), stdout=self.screen
        )
        self.task = asyncio.create_task(self.chat.run())

    def type(self, line: str) -> None:
        self._keys.write(line + "\n")
        self._keys.flush()

    async def shows(self, text: str) -> None:
        await until(lambda: text in self.screen.getvalue() or self.task.done(), text)
        assert text in self.screen.getvalue(), self.screen.getvalue()

    async def leaves(self) -> str:
        await asyncio.wait_for(asyncio.shield(self.task), TIMEOUT_S)
        return self.screen.getvalue()

    async def close(self) -> str:
        if not self._keys.closed:
            self._keys.close()
        return await self.leaves()


@pytest.fixture
async def keyboard(hub: ChatHub) -> AsyncIterator[Keyboard]:
    keys = Keyboard(hub)
    yield keys
    await keys.close()


def said(model: FakeOpenAIServer, role: str = "user") -> list[str]:
    return [m["content"] for r in model.requests for m in r["messages"] if m["role"] == role]


class Briefing:
    """A job of the console that reads notes.txt (its card asks), fired on demand."""

    def __init__(self, engine: Engine, hub: ChatHub, model: FakeOpenAIServer) -> None:
        (engine.workspace.root / "notes.txt").write_text("Buy milk.")
        self.clock = FakeClock()
        self.scheduler = Scheduler(
            engine, hub, timezone="UTC", clock=self.clock, owner="terminal-test"
        )
        self._model = model

    async def fire(self) -> int:
        job = await self.scheduler.create_cron(SOURCE, "Notes", "0 8 * * *", "Brief me.")
        self._model.reply_tool_calls(("r1", "read_file", {"path": "notes.txt"}))
        self._model.reply_text("Brief: buy milk.")
        self.clock.now = job.next_run_at + timedelta(seconds=1)
        await self.scheduler.dispatcher.step()
        return job.id

    async def done(self, job_id: int) -> bool:
        await asyncio.wait_for(self.scheduler.dispatcher.drain(), TIMEOUT_S)
        [run] = await self.scheduler.store.runs(job_id)
        return run.status == "done"


@pytest.fixture
async def briefing(
    engine: Engine, hub: ChatHub, fake_openai: FakeOpenAIServer
) -> AsyncIterator[Briefing]:
    job = Briefing(engine, hub, fake_openai)
    yield job
    await job.scheduler.close()


async def test_y_at_the_prompt_decides_a_jobs_card_shown_there(
    keyboard: Keyboard, briefing: Briefing, fake_openai: FakeOpenAIServer
) -> None:
    """The card printed "Approve? [y]es …" at the prompt, but the "y" went to the model
    as a message and the job's run waited on (found by review)."""
    await keyboard.shows("› ")
    job_id = await briefing.fire()
    fake_openai.reply_text("(a chat message)")
    await keyboard.shows("Approve? [y]es")
    keyboard.type("y")
    assert await briefing.done(job_id)
    assert "y" not in said(fake_openai)


async def test_a_jobs_card_shown_during_a_turn_still_takes_y_after_that_turn(
    keyboard: Keyboard, briefing: Briefing, fake_openai: FakeOpenAIServer
) -> None:
    """The end of the console's own turn closed the job's prompt too: the card still said
    "Approve? [y]es", but the "y" went to the model as a message (found by review)."""
    fake_openai.reply_hang(partial="Thinking ")  # the console's turn
    keyboard.type("hello")
    await keyboard.shows("Thinking")
    job_id = await briefing.fire()
    await keyboard.shows("Approve? [y]es")  # the job's card, during the console's turn
    keyboard.type("/stop")  # the console's turn ends; the job's card is still open
    await keyboard.shows("Stopped")
    keyboard.type("y")
    assert await briefing.done(job_id)
    assert "y" not in said(fake_openai)


async def test_a_path_answers_a_question(keyboard: Keyboard, fake_openai: FakeOpenAIServer) -> None:
    """At a prompt every line starting with "/" ran as a command: "/home/ann/project"
    answering "Which directory?" was "Unknown command" (found by review)."""
    ask = {"question": "Which directory?"}
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", ask))
    fake_openai.reply_text("Using it.")
    keyboard.type("set up the project")
    await keyboard.shows("Which directory?")
    keyboard.type("/home/ann/project")
    await keyboard.shows("Using it.")
    assert said(fake_openai, "tool")[-1] == "/home/ann/project"


async def test_an_answer_over_the_limit_is_refused_and_the_next_line_answers(
    hub: ChatHub, keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    """A refused answer (too long) left the question waiting but the prompt gone: the
    next line went in as a new message, behind the waiting turn (found by review)."""
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which city?"}))
    fake_openai.reply_text("Booking it.")
    keyboard.type("book a hotel")
    await keyboard.shows("Which city?")
    keyboard.type("R" * (hub.config.max_message_chars + 1))
    await keyboard.shows("the limit is")
    keyboard.type("Rome")
    await keyboard.shows("Booking it.")
    assert said(fake_openai, "tool")[-1] == "Rome"


async def test_a_message_starting_with_a_path_is_a_message(
    keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.reply_text("Let me look.")
    keyboard.type("/etc/hosts is broken")
    await keyboard.shows("Let me look.")
    assert said(fake_openai)[-1] == "/etc/hosts is broken"


async def test_a_card_decided_elsewhere_leaves_the_next_line_a_message(
    hub: ChatHub,
    keyboard: Keyboard,
    fake_openai: FakeOpenAIServer,
) -> None:
    """Decided in the web inbox, the card still took the next line typed as its answer:
    "⌛ Expired", and the line was lost (found by review)."""
    fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "echo hi"}))
    fake_openai.reply_hang(partial="Thinking it over ")
    keyboard.type("say hi")
    await keyboard.shows("Approve? [y]es")
    [item] = await hub.pending_approvals(await hub.session_id(SOURCE))
    await hub.decide(item.tool_call_id, Choice.named("approve"), decider=OPERATOR, by="Ann")
    await keyboard.shows("✅ Approved by Ann")
    await keyboard.shows("Thinking it over")
    keyboard.type("and what about tomorrow?")  # typed while the turn runs: a message
    keyboard.type("/stop")
    await keyboard.shows("Stopped")
    screen = keyboard.screen.getvalue()
    assert "Expired" not in screen and "(1 line(s) typed meanwhile dropped)" in screen


async def test_quit_at_an_approval_prompt_leaves_with_the_call_pending(
    hub: ChatHub,
    keyboard: Keyboard,
    fake_openai: FakeOpenAIServer,
) -> None:
    """ "/quit" at the prompt rejected the call with "/quit" as its reason, and the
    terminal stayed (found by review)."""
    fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "echo hi"}))
    fake_openai.reply_text("You rejected it.")
    keyboard.type("say hi")
    await keyboard.shows("Approve? [y]es")
    keyboard.type("/quit")
    await keyboard.leaves()
    assert not any("/quit" in (result or "") for result in said(fake_openai, "tool"))
    assert len(await hub.pending_approvals(await hub.session_id(SOURCE))) == 1


async def test_a_command_at_an_approval_prompt_runs_and_the_prompt_waits(
    hub: ChatHub,
    keyboard: Keyboard,
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "echo hi"}))
    fake_openai.reply_text("It said hi.")
    keyboard.type("say hi")
    await keyboard.shows("Approve? [y]es")
    keyboard.type("/help")
    keyboard.type("y")
    await keyboard.shows("It said hi.")
    assert said(fake_openai, "tool")[-1].startswith("hi")


async def test_stop_drops_the_lines_typed_during_the_turn(
    keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    """Every platform's /stop drops the queued messages; the terminal's own backlog went
    on to the model right after "⏹ Stopped." (found by review)."""
    fake_openai.reply_hang(partial="Working on the long job ")
    fake_openai.reply_text("Deleting the old backups.")
    keyboard.type("do the long job")
    await keyboard.shows("Working on the long job")
    keyboard.type("then delete the old backups")
    keyboard.type("/stop")
    await keyboard.shows("Stopped")
    await keyboard.close()
    assert "then delete the old backups" not in said(fake_openai)
